// Registrations: a communicator's registered buffers (ncclCommRegister /
// ncclCommDeregister) and windows (ncclCommWindowRegister /
// ncclCommWindowDeregister). Today they are recorded, not used: host
// collectives find peer-mappable memory through the shared-memory registry
// (ncclMemAlloc), whatever was registered. Handles stay valid until
// deregistered or the communicator goes.
#pragma once

#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "common/status.h"
#include "nccl.h"

namespace theseus::comm {

class Registrations {
 public:
  Status registerBuffer(void* buff, size_t size, void** handle);
  Status deregisterBuffer(void* handle);
  Status registerWindow(void* buff, size_t size, ncclWindow_t* win, int flags);
  Status deregisterWindow(ncclWindow_t win);

 private:
  using Range = std::pair<void*, size_t>;
  std::mutex mu_;
  std::vector<std::unique_ptr<Range>> buffers_;
  std::vector<std::unique_ptr<Range>> windows_;
};

}  // namespace theseus::comm
