// Registrations: a communicator's registered buffers (ncclCommRegister /
// ncclCommDeregister) and windows (ncclCommWindowRegister /
// ncclCommWindowDeregister). Registered host buffers also go to the transports
// (Engine::registerBuffer, transport/user_buffers.h): the IB network sends from
// them without a copy. Between local ranks they are not used: host
// collectives find peer-mappable memory through the shared-memory registry
// (ncclMemAlloc buffers are read in place by local peers whether registered
// or not), and memory ncclMemAlloc did not allocate cannot be mapped by other
// processes after the fact (cross-memory attach, process_vm_readv, is refused
// by Yama's ptrace_scope in common containers, and could not serve the
// reducing steps, which read peers' data in place). Device buffers would be
// registered for IPC/RDMA by the CUDA and verbs paths. The first registration
// of each kind says so at INFO (REG). Handles stay valid until deregistered or
// the communicator goes.
//
// A window handle (ncclWindow_t) points to a Window. Some NCCL calls take a
// window without its communicator (ncclGetLsaDevicePointer, ...): windowOf()
// checks such a handle against every live window of the process first, so a
// stale or garbage handle is a clean error, never a dereference.
#pragma once

#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "common/status.h"
#include "nccl.h"

namespace theseus::comm {

class Communicator;

struct Window {
  Communicator* comm = nullptr;
  void* userPtr = nullptr;
  size_t size = 0;
  int flags = 0;
  int rank = 0;    // of the registering rank in `comm`
  int nranks = 1;  // of `comm`
};

class Registrations {
 public:
  ~Registrations();
  Status registerBuffer(void* buff, size_t size, void** handle);
  Status deregisterBuffer(void* handle);
  Status registerWindow(Communicator* comm, int rank, int nranks, void* buff, size_t size, ncclWindow_t* win,
                        int flags);
  Status deregisterWindow(ncclWindow_t win);
  // The window `win` of this communicator.
  Result<const Window*> window(ncclWindow_t win) const;

 private:
  using Range = std::pair<void*, size_t>;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Range>> buffers_;
  std::vector<std::unique_ptr<Window>> windows_;
};

// A live window of any communicator of this process (the handle is checked first).
Result<Window> windowOf(ncclWindow_t win);

}  // namespace theseus::comm
