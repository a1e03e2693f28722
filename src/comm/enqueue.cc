// Running a group's operations: every communicator of the group becomes one
// executor lane (its operations in issue order), lowered by its engine, and
// all lanes run together on the executor for the group's memory (host memory,
// or device buffers through the staging executor), so a thread that drives
// several ranks (ncclCommInitAll, nccl-tests -g/-t) moves them all. Host-memory
// operations complete before this returns. Each finished plan goes to the
// communicator's telemetry (when the adaptive machinery is on); a straggling
// rank of THESEUS_EMULATE stalls before its plans run. An NCCL profiler plugin
// sees the launch's events around the executor's run (comm/profiling.h).
#include "comm/classify.h"
#include "comm/collective_engine.h"
#include "comm/communicator.h"
#include "comm/group.h"
#include "comm/profiling.h"
#include "comm/timeouts.h"
#include "common/log.h"
#include "exec/executor.h"
#include "exec/progress.h"
#include "exec/staging.h"

namespace theseus::comm {

Status executeOps(std::vector<CommOps>& work) {
  thread_local std::vector<device::StreamCapture> captures;  // per stream of the group
  TH_CHECK(classifyGroup(work, &captures));  // before anything runs
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
  if (!executor->capturable()) TH_CHECK(refuseCapture(work, captures, memory));
  for (auto& w : work) {
    Status st = w.comm->engine()->beforeRun();
    if (!st.isOk()) return st;  // aborted before anything ran
  }
  const bool profiled = anyProfiled(work);
  thread_local std::vector<LaunchEvents> events;
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
