// Running a group's operations: every communicator of the group becomes one
// executor lane (its operations in issue order), and all lanes progress
// together, so a thread that drives several ranks (ncclCommInitAll, nccl-tests
// -g/-t) moves them all. Host-memory operations complete before this returns.
// Each finished plan goes to the communicator's telemetry (when the adaptive
// machinery is on); a straggling rank of THESEUS_EMULATE stalls before its plans run.
#include "comm/communicator.h"
#include "comm/group.h"
#include "comm/host_engine.h"
#include "common/log.h"
#include "device/staging.h"
#include "exec/executor.h"
#include "telemetry/telemetry.h"

namespace theseus::comm {

Status executeOps(std::vector<CommOps>& work) {
  // Device buffers go through host staging (no-op when CUDA is not loaded).
  thread_local device::Staging staging;
  TH_CHECK(staging.stageIn(work));
  thread_local std::vector<exec::Lane> lanes;
  lanes.resize(work.size());
  for (size_t i = 0; i < work.size(); ++i) {
    Communicator* c = work[i].comm;
    auto* engine = static_cast<HostEngine*>(c->engine());
    lanes[i].plans.clear();
    Status s = engine->lowerOps(work[i].ops, &lanes[i].plans);
    if (!s.isOk()) return s;  // nothing ran yet: no communicator state changed
    lanes[i].health = [engine] { return engine->health(); };
    if (telemetry::Recorder* t = engine->telemetry())
      lanes[i].onPlanDone = [t](const exec::Plan& p, uint64_t ns, uint64_t endNs) {
        t->onPlanDone(p, ns, endNs);
      };
    else
      lanes[i].onPlanDone = nullptr;
  }
  for (auto& w : work) {
    Status st = static_cast<HostEngine*>(w.comm->engine())->beforeExecute();
    if (!st.isOk()) return st;  // aborted before anything ran
  }
  Status s = exec::execute(lanes);
  if (!s.isOk()) {
    // Messages may be half-exchanged: the communicators involved cannot continue.
    for (auto& w : work) static_cast<HostEngine*>(w.comm->engine())->noteFailure(s);
    return s;
  }
  return staging.stageOut();
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
