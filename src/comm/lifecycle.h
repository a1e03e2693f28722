// Communicator lifecycle: the implementation behind ncclGetUniqueId,
// ncclCommInit*, split, shrink, finalize, destroy, abort and revoke, with
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
Status commFinalize(Communicator* comm);
Status commDestroy(Communicator* comm);
Status commAbort(Communicator* comm);
Status commRevoke(Communicator* comm, int flags);

}  // namespace theseus::comm
