// Memory allocation and buffer registration.
#include "api/guard.h"
#include "comm/collective_engine.h"
#include "comm/communicator.h"
#include "comm/mem_alloc.h"

namespace comm = theseus::comm;
using theseus::Status;

NCCL_API(ncclResult_t, ncclMemAlloc, void** ptr, size_t size) {
  return TH_API_GUARD({
    if (ptr == nullptr) return theseus::invalidArgument("ptr is NULL");
    if (size == 0) {
      *ptr = nullptr;
      return Status::ok();
    }
    void* p;
    TH_ASSIGN(p, comm::memAlloc(size));
    *ptr = p;
    return Status::ok();
  });
}

NCCL_API(ncclResult_t, ncclMemFree, void* ptr) {
  return TH_API_GUARD({
    if (ptr == nullptr) return Status::ok();
    return comm::memFree(ptr);
  });
}

namespace {
theseus::Result<comm::CollectiveEngine*> readyEngine(ncclComm_t handle) {
  comm::Communicator* c;
  TH_ASSIGN(c, comm::fromHandle(handle));
  if (c->engine() == nullptr) return theseus::invalidUsage("communicator %p is not initialised", (void*)handle);
  return c->engine();
}
}  // namespace

NCCL_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void* buff, size_t size, void** handle) {
  return TH_API_GUARD({
    comm::CollectiveEngine* e;
    TH_ASSIGN(e, readyEngine(comm));
    if (handle == nullptr) return theseus::invalidArgument("handle is NULL");
    return e->registerBuffer(buff, size, handle);
  });
}

NCCL_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void* handle) {
  return TH_API_GUARD({
    comm::CollectiveEngine* e;
    TH_ASSIGN(e, readyEngine(comm));
    if (handle == nullptr) return Status::ok();
    return e->deregisterBuffer(handle);
  });
}

NCCL_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
         int winFlags) {
  return TH_API_GUARD({
    // NCCL 2.29 and later: *win is NULL unless a window was made; an empty buffer is an error.
    if (win == nullptr) return theseus::invalidArgument("win is NULL");
    *win = nullptr;
    comm::CollectiveEngine* e;
    TH_ASSIGN(e, readyEngine(comm));
    if (buff == nullptr || size == 0)
      return theseus::invalidArgument("buffer %p of %zu bytes is invalid (NULL or empty)", buff, size);
    return e->registerWindow(buff, size, win, winFlags);
  });
}

NCCL_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win) {
  return TH_API_GUARD({
    if (win == nullptr) return Status::ok();  // as NCCL, whatever the communicator
    comm::CollectiveEngine* e;
    TH_ASSIGN(e, readyEngine(comm));
    if (win == nullptr) return Status::ok();
    return e->deregisterWindow(win);
  });
}

NCCL_API(ncclResult_t, ncclWinGetUserPtr, ncclComm_t comm, ncclWindow_t win, void** outUserPtr) {
  return TH_API_GUARD({
    if (outUserPtr == nullptr) return theseus::invalidArgument("outUserPtr is NULL");
    *outUserPtr = nullptr;
    comm::CollectiveEngine* e;
    TH_ASSIGN(e, readyEngine(comm));
    TH_ASSIGN(*outUserPtr, e->windowUserPtr(win));
    return Status::ok();
  });
}

NCCL_API(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
         ncclScalarResidence_t residence, ncclComm_t comm) {
  return TH_API_GUARD({
    comm::CollectiveEngine* e;
    TH_ASSIGN(e, readyEngine(comm));
    if (op == nullptr) return theseus::invalidArgument("op is NULL");
    if (scalar == nullptr) return theseus::invalidArgument("scalar is NULL");
    if (static_cast<int>(datatype) < 0 || datatype >= ncclNumTypes)
      return theseus::invalidArgument("invalid datatype %d", static_cast<int>(datatype));
    if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate)
      return theseus::invalidArgument("invalid scalar residence %d", static_cast<int>(residence));
    return e->createPreMulSum(op, scalar, datatype, residence);
  });
}

NCCL_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm) {
  return TH_API_GUARD({
    if (static_cast<int>(op) >= 0 && op < ncclNumOps)
      return theseus::invalidArgument("ncclRedOpDestroy: op %d is a builtin operation", static_cast<int>(op));
    comm::CollectiveEngine* e;
    TH_ASSIGN(e, readyEngine(comm));
    return e->destroyRedOp(op);
  });
}
