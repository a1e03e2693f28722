// NCCL 2.29's one-sided operations on windows: ncclPutSignal, ncclSignal and
// ncclWaitSignal. NVIDIA's library runs them with the copy engine over NVLink
// and its CPU proxy over the network, ordered on the caller's stream, and only
// for windows of device memory with symmetric support. Theseus has no such
// path yet: after the argument checks NCCL makes (so a wrong call gets the
// same error), every call returns ncclInvalidUsage and says so in
// ncclGetLastError. Nothing is enqueued, so the communicator stays usable.
#include "api/guard.h"
#include "comm/communicator.h"
#include "comm/registrations.h"

using theseus::Status;
namespace comm = theseus::comm;

namespace {

Status notAvailable(const char* what) {
  return theseus::invalidUsage(
      "%s: one-sided operations (NCCL 2.29) need the copy-engine/proxy path of NVIDIA's library, which Theseus does "
      "not implement; use ncclSend/ncclRecv or collectives",
      what);
}

// What ncclSignal and ncclPutSignal check before anything runs.
Status checkSignalArgs(const char* what, comm::Communicator* c, int peer, int sigIdx, int ctx, unsigned flags) {
  if (peer < 0 || peer >= c->nranks())
    return theseus::invalidArgument("%s: peer %d is out of range [0, %d)", what, peer, c->nranks());
  if (sigIdx != 0) return theseus::invalidArgument("%s: sigIdx must be 0, got %d", what, sigIdx);
  if (ctx != 0) return theseus::invalidArgument("%s: ctx must be 0, got %d", what, ctx);
  if (flags != 0) return theseus::invalidArgument("%s: flags must be 0, got %u", what, flags);
  return Status::ok();
}

}  // namespace

NCCL_API(ncclResult_t, ncclPutSignal, const void* localbuff, size_t count, ncclDataType_t datatype, int peer,
         ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
         cudaStream_t stream) {
  return TH_API_GUARD({
    comm::Communicator* c;
    TH_ASSIGN(c, comm::fromHandle(comm));
    TH_CHECK(checkSignalArgs("ncclPutSignal", c, peer, sigIdx, ctx, flags));
    if (static_cast<int>(datatype) < 0 || datatype >= ncclNumTypes)
      return theseus::invalidArgument("ncclPutSignal: invalid datatype %d", static_cast<int>(datatype));
    if (count > 0 && localbuff == nullptr) return theseus::invalidArgument("ncclPutSignal: localbuff is NULL");
    comm::Window w;
    TH_ASSIGN(w, comm::windowOf(peerWin));
    if (w.comm != c) return theseus::invalidArgument("ncclPutSignal: peerWin belongs to another communicator");
    return notAvailable("ncclPutSignal");
  });
}

NCCL_API(ncclResult_t, ncclSignal, int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
         cudaStream_t stream) {
  return TH_API_GUARD({
    comm::Communicator* c;
    TH_ASSIGN(c, comm::fromHandle(comm));
    TH_CHECK(checkSignalArgs("ncclSignal", c, peer, sigIdx, ctx, flags));
    return notAvailable("ncclSignal");
  });
}

NCCL_API(ncclResult_t, ncclWaitSignal, int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm,
         cudaStream_t stream) {
  return TH_API_GUARD({
    comm::Communicator* c;
    TH_ASSIGN(c, comm::fromHandle(comm));
    if (nDesc < 0) return theseus::invalidArgument("ncclWaitSignal: nDesc %d is negative", nDesc);
    if (nDesc > 0 && signalDescs == nullptr) return theseus::invalidArgument("ncclWaitSignal: signalDescs is NULL");
    for (int i = 0; i < nDesc; ++i) {
      const ncclWaitSignalDesc_t& d = signalDescs[i];
      if (d.opCnt < 0) return theseus::invalidArgument("ncclWaitSignal: signalDescs[%d].opCnt %d is negative", i, d.opCnt);
      TH_CHECK(checkSignalArgs("ncclWaitSignal", c, d.peer, d.sigIdx, d.ctx, 0));
    }
    return notAvailable("ncclWaitSignal");
  });
}
