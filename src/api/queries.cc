// Communicator queries and the asynchronous error.
#include "api/guard.h"
#include "comm/communicator.h"
#include "common/log.h"

namespace comm = theseus::comm;

NCCL_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t* asyncError) {
  return TH_API_GUARD({
    comm::Communicator* c;
    TH_ASSIGN(c, comm::fromHandle(comm));
    if (asyncError == nullptr) return theseus::invalidArgument("asyncError is NULL");
    *asyncError = c->asyncError();
    // A connection that failed with nothing waiting on the host (a proxied device FIFO's network,
    // transport/async_failure.h): NVIDIA's library reports its network failures here too.
    if ((*asyncError == ncclSuccess || *asyncError == ncclInProgress) && c->transports() != nullptr) {
      if (theseus::Status s = c->transports()->asyncFailure(); !s.isOk()) {
        theseus::log::setLastError(s.message());
        *asyncError = s.code();
        return theseus::Status::ok();
      }
    }
    // Why, for ncclGetLastError (the error may have come from another thread, or from a peer
    // that died while this rank was idle).
    if (*asyncError != ncclSuccess && *asyncError != ncclInProgress) theseus::log::setLastError(c->asyncErrorMessage());
    return theseus::Status::ok();
  });
}

NCCL_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int* count) {
  return TH_API_GUARD({
    comm::Communicator* c;
    TH_ASSIGN(c, comm::fromHandle(comm));
    if (count == nullptr) return theseus::invalidArgument("count is NULL");
    *count = c->nranks();
    return theseus::Status::ok();
  });
}

NCCL_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int* device) {
  return TH_API_GUARD({
    comm::Communicator* c;
    TH_ASSIGN(c, comm::fromHandle(comm));
    if (device == nullptr) return theseus::invalidArgument("device is NULL");
    *device = c->cudaDev();
    return theseus::Status::ok();
  });
}

NCCL_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int* rank) {
  return TH_API_GUARD({
    comm::Communicator* c;
    TH_ASSIGN(c, comm::fromHandle(comm));
    if (rank == nullptr) return theseus::invalidArgument("rank is NULL");
    *rank = c->rank();
    return theseus::Status::ok();
  });
}
