// Unique ids and the communicator lifecycle (init, split, shrink, grow,
// suspend and resume, finalize, destroy, abort, revoke).
#include <cstring>

#include "api/guard.h"
#include "comm/lifecycle.h"

using theseus::Status;
namespace comm = theseus::comm;

NCCL_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId* uniqueId) {
  return TH_API_GUARD({
    if (uniqueId == nullptr) return theseus::invalidArgument("uniqueId is NULL");
    return comm::getUniqueId(uniqueId);
  });
}

NCCL_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t* newcomm, int nranks, ncclUniqueId commId, int rank,
         ncclConfig_t* config) {
  return TH_API_GUARD({ return comm::commInitRank(newcomm, nranks, &commId, 1, rank, config); });
}

NCCL_API(ncclResult_t, ncclCommInitRank, ncclComm_t* newcomm, int nranks, ncclUniqueId commId, int rank) {
  return TH_API_GUARD({ return comm::commInitRank(newcomm, nranks, &commId, 1, rank, nullptr); });
}

NCCL_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t* newcomm, int nranks, int myrank, int nId,
         ncclUniqueId* commIds, ncclConfig_t* config) {
  return TH_API_GUARD({
    if (commIds == nullptr) return theseus::invalidArgument("commIds is NULL");
    return comm::commInitRank(newcomm, nranks, commIds, nId, myrank, config);
  });
}

NCCL_API(ncclResult_t, ncclCommInitAll, ncclComm_t* comms, int ndev, const int* devlist) {
  return TH_API_GUARD({ return comm::commInitAll(comms, ndev, devlist); });
}

NCCL_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
         ncclConfig_t* config) {
  return TH_API_GUARD({
    comm::Communicator* parent;
    TH_ASSIGN(parent, comm::fromHandle(comm));
    return comm::commSplit(parent, color, key, newcomm, config);
  });
}

NCCL_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
         ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  return TH_API_GUARD({
    comm::Communicator* parent;
    TH_ASSIGN(parent, comm::fromHandle(comm));
    return comm::commShrink(parent, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags);
  });
}

NCCL_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm) {
  return TH_API_GUARD({
    if (comm == nullptr) return Status::ok();  // as NCCL
    comm::Communicator* c;
    TH_ASSIGN(c, comm::fromHandle(comm));
    return comm::commFinalize(c);
  });
}

NCCL_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm) {
  return TH_API_GUARD({
    if (comm == nullptr) return Status::ok();
    comm::Communicator* c;
    TH_ASSIGN(c, comm::fromHandle(comm));
    return comm::commDestroy(c);
  });
}

NCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm) {
  return TH_API_GUARD({
    if (comm == nullptr) return Status::ok();
    comm::Communicator* c;
    TH_ASSIGN(c, comm::fromHandle(comm));
    return comm::commAbort(c);
  });
}

NCCL_API(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags) {
  return TH_API_GUARD({
    comm::Communicator* c;
    TH_ASSIGN(c, comm::fromHandle(comm));
    return comm::commRevoke(c, revokeFlags);
  });
}

NCCL_API(ncclResult_t, ncclCommGetUniqueId, ncclComm_t comm, ncclUniqueId* uniqueId) {
  return TH_API_GUARD({
    comm::Communicator* c;
    TH_ASSIGN(c, comm::fromHandle(comm));
    return comm::commGetUniqueId(c, uniqueId);
  });
}

NCCL_API(ncclResult_t, ncclCommGrow, ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank,
         ncclComm_t* newcomm, ncclConfig_t* config) {
  return TH_API_GUARD({
    comm::Communicator* parent = nullptr;
    if (comm != nullptr) {
      TH_ASSIGN(parent, comm::fromHandle(comm));
    }
    return comm::commGrow(parent, nRanks, uniqueId, rank, newcomm, config);
  });
}

NCCL_API(ncclResult_t, ncclCommSuspend, ncclComm_t comm, int flags) {
  return TH_API_GUARD({
    comm::Communicator* c;
    TH_ASSIGN(c, comm::fromHandle(comm));
    return comm::commSuspend(c, flags);
  });
}

NCCL_API(ncclResult_t, ncclCommResume, ncclComm_t comm) {
  return TH_API_GUARD({
    comm::Communicator* c;
    TH_ASSIGN(c, comm::fromHandle(comm));
    return comm::commResume(c);
  });
}

NCCL_API(ncclResult_t, ncclCommMemStats, ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value) {
  // The caller may pass any int: read the bits, never load an out-of-range enum (undefined behaviour).
  int raw;
  static_assert(sizeof(raw) == sizeof(stat), "ncclCommMemStat_t is int-sized");
  memcpy(&raw, &stat, sizeof(raw));
  return TH_API_GUARD({
    comm::Communicator* c;
    TH_ASSIGN(c, comm::fromHandle(comm));
    return comm::commMemStats(c, raw, value);
  });
}
