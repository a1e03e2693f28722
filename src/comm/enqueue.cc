// Running a group's operations: every communicator of the group becomes one
// executor lane (its operations in issue order), lowered by its engine. Each
// lane's executor follows from its memory and its communicator's mode alone
// (exec::executorFor: host memory on the host executor; device and pinned
// buffers on the CUDA executor where the communicator has it, else device
// buffers on the staging executor), so every rank of a communicator runs an
// operation alike whatever else its group holds. Lanes that share an executor
// run together, so a thread that drives several ranks (ncclCommInitAll,
// nccl-tests -g/-t) moves them all. Host-memory operations complete before
// this returns; the CUDA executor's return once queued on their streams. Each
// finished plan goes to the communicator's telemetry (when the adaptive
// machinery is on); a straggling rank of THESEUS_EMULATE stalls before its
// plans run. An NCCL profiler plugin sees the launch's events around the
// executor's run (comm/profiling.h).
#include <algorithm>
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

// Once per process, at WARN: the first operation whose device buffers took the
// synchronous staging path, and why it did not get the CUDA executor.
[[gnu::cold, gnu::noinline]] void warnStagedOnce(const exec::Lane& lane, const std::string& why) {
  static std::atomic<bool> warned{false};
  if (warned.load(std::memory_order_relaxed) || warned.exchange(true)) return;
  const std::string what =
      lane.plans.empty() ? "a group" : lane.plans.front()->describe() + " on rank " + std::to_string(lane.plans.front()->rank);
  TH_WARN("device buffers of %s are staged through host memory, synchronously (%s); later operations that take "
          "this path are not logged",
          what.c_str(), why.empty() ? "the CUDA executor cannot run this group" : why.c_str());
}

// A group on a stream being captured, refused before it is lowered when the executor that one of its
// communicators' operations get (from their memory kinds and the communicator's mode) cannot be captured.
[[gnu::cold, gnu::noinline]] Status refuseUnrepeatableCapture(const std::vector<CommOps>& work,
                                                             const std::vector<device::StreamCapture>& captures) {
  for (const CommOps& w : work) {
    exec::Executor* planned;
    TH_ASSIGN(planned, exec::executorFor(w.kinds, w.comm->deviceExecutor()));
    if (!planned->capturable()) TH_CHECK(refuseCapture(work, captures, w.kinds, w.comm->deviceExecutorWhyNot()));
  }
  return Status::ok();
}

// Every lane's executor, for a group that needs them one by one (mixed or captured):
// `fallback`, the group's first, for a lane without plans in a group of several.
[[gnu::cold, gnu::noinline]] Status laneExecutors(const std::vector<CommOps>& work,
                                                 const std::vector<exec::Lane>& lanes, exec::Executor* fallback,
                                                 std::vector<exec::Executor*>* executors) {
  executors->assign(work.size(), fallback);
  for (size_t i = 0; i < work.size(); ++i)
    if (!lanes[i].plans.empty() || work.size() == 1) {
      TH_ASSIGN((*executors)[i], exec::executorFor(lanes[i].memory, work[i].comm->deviceExecutor()));
    }
  return Status::ok();
}

// A stall of an operation on pageable host memory on a communicator whose ranks
// use the CUDA executor: a peer that passed device or pinned host memory for the
// same operation runs it over the device FIFOs and waits there (nothing compares
// the kinds of memory across ranks per call; theseus-doctor does from the
// flight-recorder dumps). The error says so.
[[gnu::cold, gnu::noinline]] Status withMemoryKindHint(const Status& s, const std::vector<CommOps>& work,
                                                      const std::vector<exec::Lane>& lanes) {
  if (s.code() != ncclTimeout) return s;
  for (size_t i = 0; i < work.size(); ++i)
    if (work[i].comm->deviceExecutor() == exec::DeviceExecutorMode::kCuda &&
        lanes[i].memory == device::maskOf(device::MemoryKind::kHost))
      return Status(s.code(), s.message() + " (this rank passed pageable host memory, which runs over the host "
                                            "FIFOs; if a peer passed device or pinned host memory for the same "
                                            "operation, it waits on the device FIFOs: pass buffers of the same kind "
                                            "on every rank)");
  return s;
}

// A group whose lanes have different executors (communicators in different
// modes: one whose ranks all use CUDA beside one with a rank that does not, or
// pageable host memory on one and device buffers on another). Each lane runs
// on the executor its own communicator's peers give the same operations, so
// every rank moves each message over the same FIFOs, whatever else its group
// holds. The CUDA executor's lanes go first (queued, they run on the GPU while
// the others run here), then each other executor's lanes together.
[[gnu::cold, gnu::noinline]] Status runEachExecutor(std::vector<exec::Lane>& lanes,
                                                   const std::vector<exec::Executor*>& executors,
                                                   const exec::ExecOptions& options) {
  std::vector<exec::Executor*> order;
  if (std::find(executors.begin(), executors.end(), exec::cudaDeviceExecutor()) != executors.end())
    order.push_back(exec::cudaDeviceExecutor());
  for (exec::Executor* e : executors)
    if (e != nullptr && std::find(order.begin(), order.end(), e) == order.end()) order.push_back(e);
  std::vector<exec::Lane> subset;
  std::vector<size_t> from;
  for (exec::Executor* e : order) {
    subset.clear();
    from.clear();
    for (size_t i = 0; i < lanes.size(); ++i)
      if (executors[i] == e) {
        subset.emplace_back();
        std::swap(subset.back(), lanes[i]);
        from.push_back(i);
      }
    Status s = e->run(subset, options);
    for (size_t k = 0; k < from.size(); ++k) std::swap(subset[k], lanes[from[k]]);
    TH_CHECK(s);
  }
  return Status::ok();
}

}  // namespace

Status executeOps(std::vector<CommOps>& work) {
  // The calling thread's scratch, reused by every group: one thread-local looked up once
  // (common/tls.h).
  struct Scratch {
    std::vector<device::StreamCapture> captures;  // per stream of the group
    std::vector<exec::Lane> lanes;                // per communicator
    std::vector<exec::Executor*> executors;       // per communicator: its lane's
    std::vector<LaunchEvents> events;             // per communicator, when profiled
  };
  thread_local Scratch scratch;
  Scratch& t = keptAddress(scratch);
  std::vector<device::StreamCapture>& captures = t.captures;
  std::vector<exec::Lane>& lanes = t.lanes;
  device::MemoryKindMask kinds;
  bool captured;
  TH_CHECK(classifyGroup(work, &captures, &kinds, &captured));  // before anything runs
  // A capture that an executor of the group could not repeat is refused before the lowering numbers the group's
  // collectives: the communicators stay in step with their peers, as if the call had not been made.
  if (__builtin_expect(captured, 0)) TH_CHECK(refuseUnrepeatableCapture(work, captures));
  lanes.resize(work.size());
  for (size_t i = 0; i < work.size(); ++i) {
    Status s = work[i].comm->engine()->lower(work[i].ops, &lanes[i]);
    if (!s.isOk()) return s;  // nothing ran yet: no communicator state changed
  }
  // Each lane's executor follows from its memory and its communicator's mode, as on the communicator's other
  // ranks (exec::executorFor); lanes without plans go with the others. One executor for the whole group is the
  // common case, kept to a register; the per-lane table is filled only for a mixed or captured group.
  exec::Executor* executor = nullptr;
  bool mixed = false;
  for (size_t i = 0; i < work.size(); ++i) {
    if (lanes[i].plans.empty() && work.size() > 1) continue;
    exec::Executor* e;
    TH_ASSIGN(e, exec::executorFor(lanes[i].memory, work[i].comm->deviceExecutor()));
    if (executor == nullptr) executor = e;
    mixed |= e != executor;
    if ((lanes[i].memory & ~device::kHostAccessibleKinds) != 0 && e != exec::cudaDeviceExecutor())
      warnStagedOnce(lanes[i], work[i].comm->deviceExecutorWhyNot());
  }
  if (executor == nullptr) {
    TH_ASSIGN(executor, exec::executorFor(0, work.front().comm->deviceExecutor()));
  }
  std::vector<exec::Executor*>& executors = t.executors;
  if (__builtin_expect(mixed || captured, 0)) {
    TH_CHECK(laneExecutors(work, lanes, executor, &executors));
    // The lowering adds only scratch of the kind the operation's executor reaches, so what was checked before it
    // still holds; were it not so, this refusal would come after the group's collectives were numbered.
    for (size_t i = 0; captured && i < work.size(); ++i)
      if (!executors[i]->capturable())
        TH_CHECK(refuseCapture(work, captures, lanes[i].memory, work[i].comm->deviceExecutorWhyNot()));
  }
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
  Status s = __builtin_expect(mixed, 0) ? runEachExecutor(lanes, executors, options) : executor->run(lanes, options);
  if (profiled)
    for (size_t i = 0; i < work.size(); ++i) profileLaunchStop(work[i].comm, &events[i]);
  if (!s.isOk()) {
    // Messages may be half-exchanged: the communicators involved cannot continue.
    s = withMemoryKindHint(s, work, lanes);
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
