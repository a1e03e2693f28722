// ncclCommGetUniqueId and ncclCommGrow: a communicator gains ranks.
//
// One existing rank, the coordinator, asks its communicator for an id. That
// is an ordinary unique id whose root rendezvous runs in the coordinator's
// process (never the fixed NCCL_COMM_ID address, which belongs to the first
// creation). The communicator remembers it as pending: one at a time, each
// used by one grow. The coordinator hands it to the joining processes out of
// band, then every rank calls ncclCommGrow:
//   * existing ranks pass the parent, rank -1, and the id on the coordinator
//     only. An allGather on the parent shares the id: exactly one rank must
//     pass one, and it must be the id its communicator issued. Every rank sees
//     the same exchange, so all decide the same; then all join the rendezvous
//     with the id under their old rank numbers;
//   * new ranks pass no parent, the id and their rank; they join directly.
// The root rejects a rank number taken twice and a different nRanks, so a
// joining rank that picked an existing rank's number fails the creation with
// a message instead of corrupting it. The grown communicator is finished like
// any new one; the parent stays usable (NCCL suggests destroying it).
#include <cstring>
#include <vector>

#include "bootstrap/bootstrap_settings.h"
#include "bootstrap/unique_id.h"
#include "bootstrap/wire.h"
#include "comm/group.h"
#include "comm/lifecycle.h"
#include "comm/lifecycle_internal.h"
#include "common/log.h"

namespace theseus::comm {
namespace {

// Reports a failure before the grown communicator's bootstrap existed.
Status failGrown(const std::shared_ptr<LifecycleState>& st, const Status& why) {
  st->comm->setLifecycle(Lifecycle::kFailed);
  st->comm->setAsyncError(why.code(), why.message());
  return visibleTo(why, st->comm->config());
}

// Existing ranks: agree on the coordinator's id over the parent, then join.
Status runGrowExisting(const std::shared_ptr<LifecycleState>& pst, const std::shared_ptr<LifecycleState>& cst,
                       bool hasId, ncclUniqueId id, bool idIsPending, int nRanks) {
  JobScope parentJob(pst);
  if (!parentJob.status().isOk()) return failGrown(cst, parentJob.status());
  JobScope childJob(cst);
  TH_CHECK(childJob.status());
  Communicator* parent = pst->comm;
  bootstrap::wire::Writer w;
  w.put<uint8_t>(hasId ? 1 : 0).put<uint8_t>(idIsPending ? 1 : 0).put<int32_t>(nRanks);
  std::string mine = w.data();
  mine.append(id.internal, sizeof(id.internal));
  std::vector<std::string> all;
  Status s = parent->bootstrap()->allGather(mine, &all);
  if (!s.isOk()) return failGrown(cst, s.withContext("ncclCommGrow: sharing the id on the parent"));
  std::vector<int> holders;  // parent ranks that passed an id
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    const std::string& e = all[r];
    if (e.size() != mine.size()) return failGrown(cst, internalError("ncclCommGrow: malformed id exchange"));
    int32_t theirN;
    memcpy(&theirN, e.data() + 2, sizeof(theirN));
    if (theirN != nRanks)
      return failGrown(cst, invalidArgument("ncclCommGrow: rank %d passed nRanks %d, rank %d passed %d", parent->rank(),
                                            nRanks, r, theirN));
    if (e[0] != 0) holders.push_back(r);
  }
  if (holders.size() > 1)
    return failGrown(cst, invalidUsage("ncclCommGrow: ranks %d and %d of the parent both passed an id; only the rank "
                                       "that called ncclCommGetUniqueId passes it, the others pass NULL",
                                       holders[0], holders[1]));
  if (holders.empty())
    return failGrown(cst, invalidUsage("ncclCommGrow: no parent rank passed the id; the rank that called "
                                       "ncclCommGetUniqueId must pass it"));
  const int coordinator = holders.front();
  const std::string& chosen = all[coordinator];
  if (chosen[1] == 0)
    return failGrown(cst, invalidArgument("ncclCommGrow: the id passed by parent rank %d was not issued by "
                                          "ncclCommGetUniqueId on this communicator (or was already used)",
                                          coordinator));
  memcpy(id.internal, chosen.data() + 6, sizeof(id.internal));
  TH_INFO(log::kInit, "ncclCommGrow: rank %d of %d joins a communicator of %d ranks (id from rank %d)", parent->rank(),
          parent->nranks(), nRanks, coordinator);
  return initFromUniqueIds(cst, &id, 1, parent->rank(), nRanks, parent->cudaDev());
}

// Takes the coordinator's pending id when `id` is it (each id serves one grow).
bool consumePendingId(LifecycleState& st, const ncclUniqueId& id) {
  std::lock_guard<std::mutex> lock(st.mu);
  if (!st.pendingGrowId || memcmp(st.pendingGrowId->internal, id.internal, sizeof(id.internal)) != 0) return false;
  st.pendingGrowId.reset();
  return true;
}

}  // namespace

Status commGetUniqueId(Communicator* comm, ncclUniqueId* id) {
  if (id == nullptr) return invalidArgument("ncclCommGetUniqueId: uniqueId is NULL");
  auto st = stateOf(comm);
  if (st == nullptr) return invalidArgument("ncclCommGetUniqueId: unknown communicator");
  if (comm->lifecycle() != Lifecycle::kReady)
    return invalidUsage("ncclCommGetUniqueId: the communicator is not ready (it is initialising, finalized, revoked "
                        "or failed)");
  std::lock_guard<std::mutex> lock(st->mu);
  if (st->pendingGrowId)
    return invalidUsage("ncclCommGetUniqueId: the id it returned before has not been used yet; call ncclCommGrow "
                        "with it first (one pending id per communicator)");
  ncclUniqueId fresh;
  TH_CHECK(bootstrap::createUniqueId(&fresh, /*ignoreCommIdEnv=*/true));
  st->pendingGrowId = fresh;
  *id = fresh;
  return Status::ok();
}

Status commGrow(Communicator* parent, int nRanks, const ncclUniqueId* id, int rank, ncclComm_t* newcomm,
                const ncclConfig_t* config) {
  if (newcomm == nullptr) return invalidArgument("ncclCommGrow: newcomm is NULL");
  *newcomm = nullptr;
  if (parent == nullptr) {
    // A joining rank.
    if (id == nullptr) return invalidArgument("ncclCommGrow: a new rank (comm NULL) must pass the unique id");
    if (nRanks < 2) return invalidArgument("ncclCommGrow: nRanks %d is invalid", nRanks);
    if (rank < 0 || rank >= nRanks)
      return invalidArgument("ncclCommGrow: rank %d is out of range [0, %d) for a new rank", rank, nRanks);
    auto decoded = bootstrap::decodeRootId(*id);
    if (!decoded.isOk()) return decoded.status().withContext("ncclCommGrow: uniqueId");
    // Otherwise a plain init from the coordinator's id.
    return commInitRank(newcomm, nRanks, id, 1, rank, config);
  }
  // An existing rank.
  if (rank != -1)
    return invalidArgument("ncclCommGrow: rank must be -1 on a rank of the existing communicator (it keeps rank %d), "
                           "got %d", parent->rank(), rank);
  if (nRanks <= parent->nranks())
    return invalidArgument("ncclCommGrow: nRanks %d must be larger than the communicator's %d ranks", nRanks,
                           parent->nranks());
  auto pst = stateOf(parent);
  if (pst == nullptr) return invalidArgument("ncclCommGrow: unknown parent communicator");
  if (parent->lifecycle() != Lifecycle::kReady)
    return invalidUsage("ncclCommGrow: the parent communicator is not ready (initialising, finalized, revoked or "
                        "failed)");
  CommConfig cfg;
  TH_CHECK(parseConfig(config, &parent->config(), &cfg));
  const bool hasId = id != nullptr;
  ncclUniqueId copy{};
  bool pending = false;
  if (hasId) {
    copy = *id;
    pending = consumePendingId(*pst, copy);
  }
  auto cst = newCommunicator(cfg);
  __atomic_store_n(newcomm, static_cast<ncclComm*>(cst->comm), __ATOMIC_RELEASE);
  return enqueueJob(cst->comm, cfg.blocking, [pst, cst, hasId, copy, pending, nRanks] {
    return runGrowExisting(pst, cst, hasId, copy, pending, nRanks);
  });
}

}  // namespace theseus::comm
