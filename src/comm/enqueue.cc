// Running a group's operations: every communicator of the group becomes one
// executor lane (its operations in issue order), lowered by its engine, and
// all lanes run together on the executor for the group's memory and its
// communicators' device executor (host memory on the host executor; device
// buffers on the CUDA executor, or the staging executor where a communicator
// cannot have it), so a thread that drives several ranks (ncclCommInitAll,
// nccl-tests -g/-t) moves them all. Host-memory operations complete before
// this returns; the CUDA executor's return once queued on their streams. Each
// finished plan goes to the communicator's telemetry (when the adaptive
// machinery is on); a straggling rank of THESEUS_EMULATE stalls before its
// plans run. An NCCL profiler plugin sees the launch's events around the
// executor's run (comm/profiling.h).
#include <atomic>
#include <string>

#include "comm/classify.h"
#include "comm/collective_engine.h"
#include "comm/communicator.h"
#include "comm/group.h"
#include "comm/profiling.h"
#include "comm/timeouts.h"
#include "common/log.h"
#include "common/tls.h"
#include "exec/device/device_executor.h"
#include "exec/executor.h"
#include "exec/progress.h"
#include "exec/staging.h"

namespace theseus::comm {

namespace {

const std::string kNoReason;

// The CUDA executor runs a group only when every communicator of the group has
// it (each set up its device FIFOs for it at creation); `*notCuda` is the first
// that has not (its reason goes into the staging path's messages).
exec::DeviceExecutorMode groupDeviceExecutor(const std::vector<CommOps>& work, const Communicator** notCuda) {
  exec::DeviceExecutorMode mode = exec::DeviceExecutorMode::kCuda;
  for (const CommOps& w : work) {
    const exec::DeviceExecutorMode m = w.comm->deviceExecutor();
    if (m == exec::DeviceExecutorMode::kCuda) continue;
    if (*notCuda == nullptr) *notCuda = w.comm;
    if (m == exec::DeviceExecutorMode::kEmulate) return m;  // THESEUS_DEVICE_EXECUTOR=emulate: every communicator
    mode = exec::DeviceExecutorMode::kOff;
  }
  return mode;
}

// Once per process, at WARN: the first operation whose device buffers took the
// synchronous staging path, and why it did not get the CUDA executor.
[[gnu::cold, gnu::noinline]] void warnStagedOnce(const std::vector<exec::Lane>& lanes, const std::string& why) {
  static std::atomic<bool> warned{false};
  if (warned.load(std::memory_order_relaxed) || warned.exchange(true)) return;
  std::string what = "a group";
  for (const exec::Lane& lane : lanes)
    if ((lane.memory & ~device::kHostAccessibleKinds) != 0 && !lane.plans.empty()) {
      what = lane.plans.front()->describe() + " on rank " + std::to_string(lane.plans.front()->rank);
      break;
    }
  TH_WARN("device buffers of %s are staged through host memory, synchronously (%s); later operations that take "
          "this path are not logged",
          what.c_str(), why.empty() ? "the CUDA executor cannot run this group" : why.c_str());
}

// A group on a stream being captured, refused before it is lowered when the executor its memory kinds and
// communicators give it cannot be captured.
[[gnu::cold, gnu::noinline]] Status refuseUnrepeatableCapture(const std::vector<CommOps>& work,
                                                             const std::vector<device::StreamCapture>& captures,
                                                             device::MemoryKindMask kinds, exec::DeviceExecutorMode mode,
                                                             const std::string& whyNotCuda) {
  exec::Executor* planned;
  TH_ASSIGN(planned, exec::executorFor(kinds, mode));
  return planned->capturable() ? Status::ok() : refuseCapture(work, captures, kinds, whyNotCuda);
}

}  // namespace

Status executeOps(std::vector<CommOps>& work) {
  // The calling thread's scratch, reused by every group: one thread-local looked up once
  // (common/tls.h).
  struct Scratch {
    std::vector<device::StreamCapture> captures;  // per stream of the group
    std::vector<exec::Lane> lanes;                // per communicator
    std::vector<LaunchEvents> events;             // per communicator, when profiled
  };
  thread_local Scratch scratch;
  Scratch& t = keptAddress(scratch);
  std::vector<device::StreamCapture>& captures = t.captures;
  std::vector<exec::Lane>& lanes = t.lanes;
  device::MemoryKindMask kinds;
  bool captured;
  TH_CHECK(classifyGroup(work, &captures, &kinds, &captured));  // before anything runs
  const Communicator* notCuda = nullptr;
  const exec::DeviceExecutorMode mode = groupDeviceExecutor(work, &notCuda);
  const std::string& whyNotCuda = notCuda != nullptr ? notCuda->deviceExecutorWhyNot() : kNoReason;
  // A capture that the group's executor could not repeat is refused before the lowering numbers the group's
  // collectives: the communicators stay in step with their peers, as if the call had not been made.
  if (__builtin_expect(captured, 0)) TH_CHECK(refuseUnrepeatableCapture(work, captures, kinds, mode, whyNotCuda));
  lanes.resize(work.size());
  device::MemoryKindMask memory = 0;
  for (size_t i = 0; i < work.size(); ++i) {
    Status s = work[i].comm->engine()->lower(work[i].ops, &lanes[i]);
    if (!s.isOk()) return s;  // nothing ran yet: no communicator state changed
    memory |= lanes[i].memory;
  }
  exec::Executor* executor;
  TH_ASSIGN(executor, exec::executorFor(memory, mode));
  // What the lowering added (host scratch of a pinned-memory operation beside device buffers) may still make
  // a captured group uncapturable.
  if (__builtin_expect(captured, 0) && !executor->capturable())
    TH_CHECK(refuseCapture(work, captures, memory, whyNotCuda));
  if ((memory & ~device::kHostAccessibleKinds) != 0 && executor != exec::cudaDeviceExecutor())
    warnStagedOnce(lanes, whyNotCuda);
  for (auto& w : work) {
    Status st = w.comm->engine()->beforeRun();
    if (!st.isOk()) return st;  // aborted before anything ran
  }
  const bool profiled = anyProfiled(work);
  std::vector<LaunchEvents>& events = t.events;
  if (profiled) {
    events.resize(work.size());
    for (size_t i = 0; i < work.size(); ++i) profileLaunchStart(work[i], lanes[i], &events[i]);
  }
  exec::ExecOptions options;
  options.captures = &captures;
  int64_t commMs = 0;  // the shortest communicator timeout among the group's (comm/timeouts.h)
  for (auto& w : work)
    if (int64_t t = w.comm->timeoutMs(); t > 0 && (commMs == 0 || t < commMs)) commMs = t;
  if (commMs > 0) options.stallTimeoutMs = boundedWaitMs(commMs, exec::configuredStallTimeoutMs());
  Status s = executor->run(lanes, options);
  if (profiled)
    for (size_t i = 0; i < work.size(); ++i) profileLaunchStop(work[i].comm, &events[i]);
  if (!s.isOk()) {
    // Messages may be half-exchanged: the communicators involved cannot continue.
    Status first;
    for (size_t i = 0; i < work.size(); ++i) {
      Status why = work[i].comm->engine()->noteFailure(s);
      if (i == 0) first = why;
    }
    return first;
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
