// Communicator lifecycle: the implementation behind ncclGetUniqueId,
// ncclCommInit*, split, shrink, grow, finalize, destroy, abort and revoke, with
// NCCL's semantics (group deferral, non-blocking configs, argument checks).
#pragma once

#include "comm/communicator.h"
#include "common/status.h"
#include "nccl.h"

namespace theseus::comm {

Status getUniqueId(ncclUniqueId* id);
// ncclCommInitRank/InitRankConfig (nIds == 1) and InitRankScalable.
Status commInitRank(ncclComm_t* newcomm, int nranks, const ncclUniqueId* ids, int nIds, int rank,
                    const ncclConfig_t* config);
Status commInitAll(ncclComm_t* comms, int ndev, const int* devlist);
Status commSplit(Communicator* parent, int color, int key, ncclComm_t* newcomm, const ncclConfig_t* config);
Status commShrink(Communicator* parent, const int* excludeRanks, int excludeCount, ncclComm_t* newcomm,
                  const ncclConfig_t* config, int flags);
// ncclCommGetUniqueId / ncclCommGrow (lifecycle_grow.cc): `parent` is NULL on a joining rank.
Status commGetUniqueId(Communicator* comm, ncclUniqueId* id);
Status commGrow(Communicator* parent, int nRanks, const ncclUniqueId* id, int rank, ncclComm_t* newcomm,
                const ncclConfig_t* config);
// ncclCommSuspend / Resume / MemStats (lifecycle_suspend.cc).
Status commSuspend(Communicator* comm, int flags);
Status commResume(Communicator* comm);
// `stat` as the caller passed it: an int, since a value outside the enum must be refused, not loaded as one.
Status commMemStats(Communicator* comm, int stat, uint64_t* value);
Status commFinalize(Communicator* comm);
Status commDestroy(Communicator* comm);
Status commAbort(Communicator* comm);
Status commRevoke(Communicator* comm, int flags);

}  // namespace theseus::comm
