// ncclCommSplit and ncclCommShrink: children made through the parent's bootstrap.
//
// Split is collective over all parent ranks: every rank contributes {color,
// key} to an out-of-band allGather on the parent; ranks of one colour form a
// child ordered by (key, parent rank); NCCL_SPLIT_NOCOLOR ranks take part in
// the exchange and get NULL. The child id (same on every member) is the
// parent's split/shrink counter plus the colour, so concurrent children never
// mix. Shrink involves only the survivors: each computes the same member list
// (parent ranks minus the excluded ones, in order) locally, so excluded ranks,
// dead or alive, are never waited for; the child's hash covers the member
// list, and the child leader rejects a member that computed a different one.
// In both cases the members then meet through the parent's listen sockets
// (bootstrap::createChild) and the child is finished like any new communicator.
#include <algorithm>
#include <cstring>
#include <optional>
#include <set>

#include "bootstrap/bootstrap_settings.h"
#include "bootstrap/wire.h"
#include "comm/group.h"
#include "comm/lifecycle.h"
#include "comm/lifecycle_internal.h"
#include "comm/root_cause.h"
#include "comm/timeouts.h"
#include "common/log.h"

namespace theseus::comm {
namespace {

constexpr uint64_t kSplitTag = 0x53504c49ull;   // "SPLI"
constexpr uint64_t kShrinkTag = 0x5348524bull;  // "SHRK"
constexpr uint64_t kShrinkAbortTag = 0x5348524b41ull;  // "SHRKA"

// Whether a parent may create children now.
Status checkParent(Communicator* parent, bool allowFailed, const char* what) {
  switch (parent->lifecycle()) {
    case Lifecycle::kReady:
      return Status::ok();
    case Lifecycle::kFailed:
      if (allowFailed && parent->bootstrap() != nullptr) return Status::ok();
      return invalidUsage("%s: the parent communicator has failed (%s)", what, parent->asyncErrorMessage().c_str());
    case Lifecycle::kInitializing:
      return invalidUsage("%s: the parent communicator is still initialising", what);
    default:
      return invalidUsage("%s: the parent communicator was finalized", what);
  }
}

uint64_t nextChildSeq(LifecycleState& st) {
  std::lock_guard<std::mutex> lock(st.mu);
  return ++st.childSeq;
}

// The identity of a shrink's child. A shrink after a failure (NCCL_SHRINK_ABORT) must meet
// on every survivor even when they made different numbers of split/shrink calls before it:
// one survivor's split may have succeeded where another's failed, so that one went on to a
// next split that failed too. Abort-shrinks therefore count on their own (each survivor
// calls it once per failure) and the child's identity also covers the member list.
uint64_t shrinkChildId(LifecycleState& st, bool abortParent, const std::vector<int>& members) {
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    seq = abortParent ? ++st.abortShrinks : ++st.childSeq;
  }
  uint64_t id = bootstrap::wire::hashValue(seq, abortParent ? kShrinkAbortTag : kShrinkTag);
  for (int r : members) id = bootstrap::wire::hashValue(static_cast<int64_t>(r), id);
  return id;
}

// Builds the child's bootstrap and finishes it; the parent stays untouched on failure.
Status makeChild(Communicator* parent, const std::shared_ptr<LifecycleState>& child, const std::vector<int>& members,
                 uint64_t childId) {
  bootstrap::InitOptions options;
  options.cudaDev = parent->cudaDev();
  reportCuda(&options, parent->cudaDev());
  options.abort = &child->bootstrapAbort;
  child->comm->setTimeoutMs(parent->timeoutMs());  // a child inherits its parent's timeout
  options.timeoutMs = boundedWaitMs(child->comm->timeoutMs(), bootstrap::bootstrapTimeoutMs());
  log::setThreadDevice(parent->cudaDev());
  Status s = finishInit(child->comm, bootstrap::createChild(*parent->bootstrap(), members, childId, options),
                        parent->cudaDev());
  // A member that died makes the others fail in many ways (its leader left, a link reset):
  // name the parent rank that failed first, as the parent's own operations would.
  if (!s.isOk() && parent->bootstrap() != nullptr && !parent->abortFlag().isSet())
    return withRootCause(*parent->bootstrap(), s);
  return s;
}

// Reports a failure that happened before the child's bootstrap existed.
Status failChild(const std::shared_ptr<LifecycleState>& child, const Status& why) {
  if (child) {
    child->comm->setLifecycle(Lifecycle::kFailed);
    child->comm->setAsyncError(why.code(), why.message());
    return visibleTo(why, child->comm->config());
  }
  return why;
}

Status runSplit(const std::shared_ptr<LifecycleState>& pst, const std::shared_ptr<LifecycleState>& cst, int color,
                int key, uint64_t seq, bool blocking) {
  JobScope parentJob(pst);
  if (!parentJob.status().isOk()) return failChild(cst, parentJob.status());
  std::optional<JobScope> childJob;
  if (cst) {
    childJob.emplace(cst);
    TH_CHECK(childJob->status());
  }
  Communicator* parent = pst->comm;
  bootstrap::wire::Writer w;
  w.put<int32_t>(color).put<int32_t>(key);
  std::vector<std::string> all;
  Status s = parent->bootstrap()->allGather(w.data(), &all);
  if (s.isOk()) {
    for (const auto& e : all)
      if (e.size() != 8) s = internalError("ncclCommSplit: malformed colour exchange");
  }
  if (!s.isOk()) {
    s = s.withContext("ncclCommSplit: exchanging colours on the parent");
    // Without a child to report on, a non-blocking caller learns it from the parent.
    if (!cst && !blocking) parent->setAsyncError(s.code(), s.message());
    else if (!blocking) parent->setAsyncError(ncclSuccess);
    return failChild(cst, s);
  }
  if (!blocking) parent->setAsyncError(ncclSuccess);
  if (!cst) return Status::ok();
  struct Entry {
    int key, rank;
  };
  std::vector<Entry> same;
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    int32_t c, k;
    memcpy(&c, all[r].data(), 4);
    memcpy(&k, all[r].data() + 4, 4);
    if (c == color) same.push_back({k, r});
  }
  std::stable_sort(same.begin(), same.end(), [](const Entry& a, const Entry& b) { return a.key < b.key; });
  std::vector<int> members;
  for (const auto& e : same) members.push_back(e.rank);
  uint64_t childId = bootstrap::wire::hashValue(static_cast<int64_t>(color), bootstrap::wire::hashValue(seq, kSplitTag));
  return makeChild(parent, cst, members, childId);
}

Status runShrink(const std::shared_ptr<LifecycleState>& pst, const std::shared_ptr<LifecycleState>& cst,
                 std::vector<int> members, uint64_t childId, bool abortParent) {
  JobScope parentJob(pst);
  if (!parentJob.status().isOk()) return failChild(cst, parentJob.status());
  JobScope childJob(cst);
  TH_CHECK(childJob.status());
  if (abortParent) {
    Status idle = waitForOpsIdle(*pst, bootstrap::bootstrapTimeoutMs(), "ncclCommShrink(NCCL_SHRINK_ABORT)");
    if (!idle.isOk()) return failChild(cst, idle);
  }
  return makeChild(pst->comm, cst, members, childId);
}

}  // namespace

Status commSplit(Communicator* parent, int color, int key, ncclComm_t* newcomm, const ncclConfig_t* config) {
  if (newcomm == nullptr) return invalidArgument("ncclCommSplit: newcomm is NULL");
  *newcomm = nullptr;
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return invalidArgument("ncclCommSplit: color %d is invalid (must be >= 0 or NCCL_SPLIT_NOCOLOR)", color);
  auto pst = stateOf(parent);
  if (pst == nullptr) return invalidArgument("ncclCommSplit: unknown parent communicator");
  bool revoked;
  {
    std::lock_guard<std::mutex> lock(pst->mu);
    revoked = pst->revoked;
  }
  TH_CHECK(checkParent(parent, /*allowFailed=*/revoked, "ncclCommSplit"));
  CommConfig cfg;
  TH_CHECK(parseConfig(config, &parent->config(), &cfg));
  const uint64_t seq = nextChildSeq(*pst);
  std::shared_ptr<LifecycleState> cst;
  if (color != NCCL_SPLIT_NOCOLOR) {
    cst = newCommunicator(cfg);
    *newcomm = static_cast<ncclComm*>(cst->comm);
  }
  const bool blocking = cfg.blocking;
  if (!blocking) parent->setAsyncError(ncclInProgress);
  return enqueueJob(cst ? cst->comm : parent, blocking,
                    [pst, cst, color, key, seq, blocking] { return runSplit(pst, cst, color, key, seq, blocking); });
}

Status commShrink(Communicator* parent, const int* excludeRanks, int excludeCount, ncclComm_t* newcomm,
                  const ncclConfig_t* config, int flags) {
  if (newcomm == nullptr) return invalidArgument("ncclCommShrink: newcomm is NULL");
  *newcomm = nullptr;
  if (flags != NCCL_SHRINK_DEFAULT && flags != NCCL_SHRINK_ABORT)
    return invalidArgument("ncclCommShrink: shrinkFlags %d is invalid (NCCL_SHRINK_DEFAULT or NCCL_SHRINK_ABORT)", flags);
  const int n = parent->nranks();
  if (excludeCount < 0 || excludeCount >= n)
    return invalidArgument("ncclCommShrink: excludeRanksCount %d is out of range [0, %d)", excludeCount, n);
  if (excludeCount > 0 && excludeRanks == nullptr)
    return invalidArgument("ncclCommShrink: excludeRanksList is NULL with count %d", excludeCount);
  std::set<int> excluded;
  for (int i = 0; i < excludeCount; ++i) {
    int r = excludeRanks[i];
    if (r < 0 || r >= n) return invalidArgument("ncclCommShrink: excluded rank %d is out of range [0, %d)", r, n);
    if (!excluded.insert(r).second) return invalidArgument("ncclCommShrink: rank %d is excluded twice", r);
  }
  if (excluded.count(parent->rank()))
    return invalidArgument("ncclCommShrink: rank %d is in the exclude list; excluded ranks must not call it",
                           parent->rank());
  auto pst = stateOf(parent);
  if (pst == nullptr) return invalidArgument("ncclCommShrink: unknown parent communicator");
  TH_CHECK(checkParent(parent, /*allowFailed=*/true, "ncclCommShrink"));
  CommConfig cfg;
  TH_CHECK(parseConfig(config, &parent->config(), &cfg));
  if (flags == NCCL_SHRINK_ABORT) {
    // Operations still pending on the parent end now; the parent is only good for destroy afterwards.
    parent->abortFlag().set();
    parent->setLifecycle(Lifecycle::kFailed);
  }
  std::vector<int> members;
  for (int r = 0; r < n; ++r)
    if (!excluded.count(r)) members.push_back(r);
  const bool abortParent = flags == NCCL_SHRINK_ABORT;
  const uint64_t childId = shrinkChildId(*pst, abortParent, members);
  auto cst = newCommunicator(cfg);
  *newcomm = static_cast<ncclComm*>(cst->comm);
  return enqueueJob(cst->comm, cfg.blocking, [pst, cst, members, childId, abortParent] {
    return runShrink(pst, cst, members, childId, abortParent);
  });
}

}  // namespace theseus::comm
