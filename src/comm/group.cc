// Groups: thread-local, nested; everything is deferred to the outermost end.
//
// State per thread: the depth, the queued communicator jobs (init, split,
// shrink, finalize), the queued releases (destroy, abort) and the queued
// operations, collected per communicator in issue order. The outermost
// ncclGroupEnd (or an implicit group of one outside any group):
//  1. rejects mixing blocking and non-blocking communicators (NCCL's rule);
//  2. runs the operations: executeOps gets all communicators' lists at once,
//     so one thread can drive several ranks; each communicator counts the
//     batch as "operations in flight" so destroy/abort wait for it;
//  3. runs the jobs, one thread per communicator so that several ranks of one
//     communicator initialised from a single thread meet each other. Jobs of
//     blocking communicators are joined (the first error is returned); jobs of
//     non-blocking ones continue in the background, report through their
//     communicator's async error, and ncclGroupEnd returns ncclInProgress;
//  4. runs the releases, in order, on the calling thread.
// A failed call inside a group returns its error and queues nothing.
#include <algorithm>
#include <cstring>
#include <thread>

#include "comm/communicator.h"
#include "comm/group_internal.h"
#include "comm/profiling.h"
#include "comm/lifecycle_internal.h"
#include "common/log.h"
#include "common/tls.h"

namespace theseus::comm {
namespace {

constexpr unsigned kSimInfoMagic = 0x74685283;

struct Job {
  Communicator* comm = nullptr;
  bool blocking = true;
  std::function<Status()> run;
};

struct GroupState {
  int depth = 0;
  std::vector<Job> jobs;
  std::vector<Job> releases;
  std::vector<CommOps> ops;
};

thread_local GroupState tGroup;

// What finished groups leave behind, reused by the next ones on this thread, so a warm
// group allocates nothing: the per-communicator operation lists and the list of them.
thread_local std::vector<std::vector<OpDesc>> tSpareOpLists;
thread_local std::vector<CommOps> tSpareCommOps;

// Takes the group being ended out of tGroup, which starts afresh on spare storage.
GroupState takeGroup() {
  GroupState g = std::move(tGroup);
  tGroup = GroupState{};
  tGroup.ops.swap(tSpareCommOps);
  return g;
}

void recycle(GroupState& g) {
  for (CommOps& w : g.ops) {
    w.ops.clear();
    tSpareOpLists.push_back(std::move(w.ops));
  }
  g.ops.clear();
  if (tSpareCommOps.capacity() < g.ops.capacity()) tSpareCommOps.swap(g.ops);
}

OpsRunner gRunOps = nullptr;
OpsEstimator gEstimateOps = nullptr;

Status runOpsNow(std::vector<CommOps>& work) {
  // Count the batch as in flight on every communicator; a communicator being
  // destroyed or aborted meanwhile refuses it.
  size_t counted = 0;
  Status s;
  for (auto& w : work) {
    LifecycleState* st = w.comm->lifecycleState();
    if (st != nullptr) st->opsInFlight.fetch_add(1);
    ++counted;
    if (st != nullptr && st->closing.load()) {
      s = invalidUsage("communicator %p was destroyed or aborted before its operations ran",
                       static_cast<void*>(w.comm));
      break;
    }
  }
  if (s.isOk()) s = gRunOps ? gRunOps(work) : executeOps(work);
  for (size_t i = 0; i < counted; ++i)
    if (LifecycleState* st = work[i].comm->lifecycleState()) st->opsInFlight.fetch_sub(1);
  // ncclTimeout only when every communicator's caller knows the code.
  if (!s.isOk())
    for (const auto& w : work) s = visibleTo(s, w.comm->config());
  return s;
}

// Runs jobs grouped per communicator (see the file comment).
Status runJobs(std::vector<Job>& jobs) {
  std::vector<std::vector<Job*>> perComm;
  for (auto& j : jobs) {
    auto it = std::find_if(perComm.begin(), perComm.end(), [&](auto& v) { return v.front()->comm == j.comm; });
    if (it == perComm.end()) perComm.push_back({&j});
    else it->push_back(&j);
  }
  auto runAll = [](std::vector<Job*> list) -> Status {
    Status first;
    for (Job* j : list) {
      Status s = j->run();
      if (first.isOk() && !s.isOk()) first = s;
    }
    return first;
  };
  bool background = false;
  std::vector<std::vector<Job*>> blocking;
  for (auto& list : perComm) {
    if (list.front()->blocking) {
      blocking.push_back(list);
      continue;
    }
    background = true;
    std::vector<Job> owned;
    for (Job* j : list) owned.push_back(std::move(*j));
    try {
      std::thread([owned = std::move(owned)]() mutable {
        for (auto& j : owned) (void)j.run();
      }).detach();
    } catch (const std::system_error& e) {
      return systemError("cannot start a thread for a non-blocking communicator job: %s", e.what());
    }
  }
  Status first;
  if (blocking.size() == 1) {
    first = runAll(blocking.front());
  } else if (!blocking.empty()) {
    std::vector<Status> results(blocking.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < blocking.size(); ++i) {
      try {
        threads.emplace_back([&, i] { results[i] = runAll(blocking[i]); });
      } catch (const std::system_error&) {
        results[i] = runAll(blocking[i]);  // no thread left: run it here
      }
    }
    for (auto& t : threads) t.join();
    for (auto& r : results)
      if (first.isOk() && !r.isOk()) first = r;
  }
  if (!first.isOk()) return first;
  return background ? Status(ncclInProgress, "") : Status::ok();
}

// NCCL's rule: one group may not mix blocking and non-blocking communicators.
Status checkBlockingMix(const GroupState& g) {
  int seen = -1;
  auto check = [&](bool blocking) {
    if (seen >= 0 && seen != static_cast<int>(blocking)) return false;
    seen = blocking;
    return true;
  };
  bool ok = true;
  for (const auto& j : g.jobs) ok = ok && check(j.blocking);
  for (const auto& o : g.ops) ok = ok && check(o.comm->config().blocking);
  if (ok) return Status::ok();
  return invalidUsage("a group may not mix blocking and non-blocking communicators (config.blocking)");
}

// Runs what the outermost group end collected; `simInfo` non-null = estimate the operations instead.
Status launch(GroupState& g, ncclSimInfo_t* simInfo, float* estimate) {
  Status mix = checkBlockingMix(g);
  if (!mix.isOk()) {
    // Nothing runs; communicators the group was creating are marked failed so nobody waits for them.
    for (auto& j : g.jobs)
      if (j.comm->lifecycle() == Lifecycle::kInitializing) {
        j.comm->setLifecycle(Lifecycle::kFailed);
        j.comm->setAsyncError(mix.code(), mix.message());
      }
  }
  Status first = mix;
  if (mix.isOk() && !g.ops.empty()) {
    if (simInfo != nullptr) first = gEstimateOps ? gEstimateOps(g.ops, estimate) : estimateOps(g.ops, estimate);
    else first = runOpsNow(g.ops);
  }
  for (auto& w : g.ops) profileGroupDone(w);
  if (mix.isOk() && !g.jobs.empty()) {
    Status s = runJobs(g.jobs);
    if (first.isOk() || (first.code() == ncclInProgress && !s.isOk())) first = s;
  }
  for (auto& r : g.releases) {
    Status s = r.run();
    if (first.isOk() && !s.isOk()) first = s;
  }
  return first;
}

}  // namespace

void setOpsRunnersForTesting(OpsRunner run, OpsEstimator estimate) {
  gRunOps = run;
  gEstimateOps = estimate;
}

int groupDepth() { return tGroup.depth; }

Status groupStart() {
  ++tGroup.depth;
  return Status::ok();
}

Status groupEnd() {
  if (tGroup.depth == 0) return invalidUsage("ncclGroupEnd called without a matching ncclGroupStart");
  if (--tGroup.depth > 0) return Status::ok();
  GroupState g = takeGroup();
  for (auto& w : g.ops) profileGroupEndStarts(w);
  Status s = launch(g, nullptr, nullptr);
  recycle(g);
  return s;
}

Status groupSimulateEnd(ncclSimInfo_t* info) {
  if (info == nullptr) return invalidArgument("simInfo is NULL");
  size_t size;
  unsigned magic;
  memcpy(&size, info, sizeof(size));
  if (size < offsetof(ncclSimInfo_t, version))
    return invalidArgument("ncclSimInfo_t size %zu is too small; initialise it with NCCL_SIM_INFO_INITIALIZER", size);
  memcpy(&magic, reinterpret_cast<const char*>(info) + offsetof(ncclSimInfo_t, magic), sizeof(magic));
  if (magic != kSimInfoMagic)
    return invalidArgument("ncclSimInfo_t argument not initialized via NCCL_SIM_INFO_INITIALIZER (magic %#x, expected %#x)",
                           magic, kSimInfoMagic);
  if (tGroup.depth == 0) return invalidUsage("ncclGroupSimulateEnd called without a matching ncclGroupStart");
  if (--tGroup.depth > 0) return Status::ok();
  GroupState g = takeGroup();
  float us = 0;
  Status s = launch(g, info, &us);
  recycle(g);
  if (!s.isOk() && s.code() != ncclInProgress) return s;
  ncclSimInfo_t out;
  memcpy(&out, info, std::min(size, sizeof(out)));
  out.estimatedTime = us;
  memcpy(info, &out, std::min(size, sizeof(out)));  // never past the caller's size
  return s;
}

Status enqueueOp(Communicator* comm, const OpDesc& op) {
  GroupState& group = keptAddress(tGroup);  // one look-up of the thread-local (common/tls.h)
  if (group.depth == 0) {
    // An implicit group of one: reuse this thread's batch so a plain collective allocates nothing.
    struct Implicit {
      std::vector<CommOps> single = std::vector<CommOps>(1);
      bool busy = false;
    };
    thread_local Implicit implicit;
    Implicit& mine = keptAddress(implicit);
    std::vector<CommOps>& single = mine.single;
    bool& busy = mine.busy;
    std::vector<CommOps> own;
    std::vector<CommOps>& work = busy ? own : single;  // re-entered from executeOps: use a fresh one
    work.resize(1);
    work[0].comm = comm;
    work[0].ops.clear();
    work[0].ops.push_back(op);
    work[0].groupApiEvent = nullptr;
    // The profiler's events belong to the call too: counted in flight around them, so an abort
    // from another thread releases the communicator (its profiler session) only after them.
    LifecycleState* st = comm->lifecycleState();
    if (st != nullptr) st->opsInFlight.fetch_add(1);
    profileApiStart(comm, work[0].ops.back(), nullptr);
    const bool wasBusy = busy;
    busy = true;
    Status s = runOpsNow(work);
    busy = wasBusy;
    profileApiStop(comm, work[0].ops.back());
    if (st != nullptr) st->opsInFlight.fetch_sub(1);
    return s;
  }
  auto it = std::find_if(group.ops.begin(), group.ops.end(), [&](const CommOps& c) { return c.comm == comm; });
  if (it == group.ops.end()) {
    group.ops.push_back(CommOps{comm, {}, nullptr});
    it = group.ops.end() - 1;
    if (!tSpareOpLists.empty()) {
      it->ops.swap(tSpareOpLists.back());
      tSpareOpLists.pop_back();
    }
    profileGroupJoined(*it, group.depth);
  }
  it->ops.push_back(op);
  profileApiStart(comm, it->ops.back(), it->groupApiEvent);
  profileApiStop(comm, it->ops.back());
  return Status::ok();
}

Status enqueueJob(Communicator* comm, bool blocking, std::function<Status()> job) {
  if (tGroup.depth == 0) {
    std::vector<Job> one{Job{comm, blocking, std::move(job)}};
    return runJobs(one);
  }
  tGroup.jobs.push_back(Job{comm, blocking, std::move(job)});
  return Status::ok();
}

Status enqueueRelease(Communicator* comm, std::function<Status()> job) {
  if (tGroup.depth == 0) return job();
  tGroup.releases.push_back(Job{comm, true, std::move(job)});
  return Status::ok();
}

}  // namespace theseus::comm
