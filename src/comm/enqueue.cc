// Running a group's operations: every communicator of the group becomes one
// executor lane (its operations in issue order), lowered by its engine, and
// all lanes run together on the executor for the group's memory (host memory,
// or device buffers through the staging executor), so a thread that drives
// several ranks (ncclCommInitAll, nccl-tests -g/-t) moves them all. Host-memory
// operations complete before this returns. Each finished plan goes to the
// communicator's telemetry (when the adaptive machinery is on); a straggling
// rank of THESEUS_EMULATE stalls before its plans run.
#include "comm/collective_engine.h"
#include "comm/communicator.h"
#include "comm/group.h"
#include "common/log.h"
#include "device/cuda_driver.h"
#include "exec/executor.h"

namespace theseus::comm {
namespace {

// Where each operation's buffers live. Processes that never loaded the CUDA
// driver pay one cheap check per group.
void classifyMemory(std::vector<CommOps>& work) {
  const device::CudaDriver* cuda = device::CudaDriver::get();
  if (cuda == nullptr) return;  // no device memory can exist
  for (auto& w : work) {
    for (auto& op : w.ops) {
      op.sendMemory = cuda->memoryKind(op.sendbuff);
      op.recvMemory = op.recvbuff == op.sendbuff ? op.sendMemory : cuda->memoryKind(op.recvbuff);
    }
  }
}

}  // namespace

Status executeOps(std::vector<CommOps>& work) {
  classifyMemory(work);
  thread_local std::vector<exec::Lane> lanes;
  lanes.resize(work.size());
  device::MemoryKindMask memory = 0;
  for (size_t i = 0; i < work.size(); ++i) {
    Status s = work[i].comm->engine()->lower(work[i].ops, &lanes[i]);
    if (!s.isOk()) return s;  // nothing ran yet: no communicator state changed
    memory |= lanes[i].memory;
  }
  exec::Executor* executor;
  TH_ASSIGN(executor, exec::executorFor(memory));
  for (auto& w : work) {
    Status st = w.comm->engine()->beforeRun();
    if (!st.isOk()) return st;  // aborted before anything ran
  }
  Status s = executor->run(lanes, exec::ExecOptions{});
  if (!s.isOk()) {
    // Messages may be half-exchanged: the communicators involved cannot continue.
    for (auto& w : work) w.comm->engine()->noteFailure(s);
  }
  return s;
}

// A simple alpha-beta estimate per operation: latency per step plus bytes over a
// nominal host bandwidth. Good enough for ncclGroupSimulateEnd's purpose
// (comparing alternatives), refined by the policy's cost model later.
Status estimateOps(const std::vector<CommOps>& work, float* microseconds) {
  double total = 0;
  for (const auto& w : work) {
    double us = 0;
    int n = w.comm->nranks();
    for (const auto& op : w.ops) {
      double bytes = double(op.count) * double(exec::typeSize(op.type));
      if (op.kind == OpDesc::Kind::kCollective) {
        double steps = n > 1 ? 2.0 * (n - 1) : 0.0;
        double factor = op.collective == schedule::Collective::kAllReduce ? 2.0 * (n - 1) / n : double(n - 1) / n;
        if (n == 1) factor = 1;
        us += steps * 1.0 + bytes * factor / 5e3;  // 1 us per step, 5 GB/s
      } else {
        us += 1.0 + bytes / 5e3;
      }
    }
    total = std::max(total, us);
  }
  *microseconds = static_cast<float>(total);
  return Status::ok();
}

}  // namespace theseus::comm
