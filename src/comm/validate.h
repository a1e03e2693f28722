// Argument checks for operations, with NCCL's result classes: a bad handle,
// type, op, root or peer, or a NULL buffer with a non-zero count is
// ncclInvalidArgument; using a communicator that is not ready (still
// initialising, finalized, failed) is ncclInvalidUsage.
#pragma once

#include "comm/group.h"
#include "common/status.h"

namespace theseus::comm {

// Resolves the handle and checks `op` against it; on success *out is the communicator.
Status validateOp(ncclComm_t handle, const OpDesc& op, Communicator** out);

}  // namespace theseus::comm
