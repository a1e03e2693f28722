// UserBuffers: the host buffers a communicator's user registered with
// ncclCommRegister, for transports that send from them without a copy (the
// net-plugin connections, and so the IB network: netplugin/net_send.cc).
//
// The communicator adds a buffer when it is registered and removes it when it
// is deregistered; a transport that registered the buffer with its own
// network (an MR) drops that registration when the manager tells its backends
// (Backend::forgetUserBuffer) — before ncclCommDeregister returns, so the user
// may free the memory then. Lookups take a mutex; an empty registry costs one
// relaxed load.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace theseus::transport {

class UserBuffers {
 public:
  struct Buffer {
    uint64_t id = 0;  // the registration's handle
    const char* base = nullptr;
    size_t size = 0;
  };
  void add(uint64_t id, const void* base, size_t size);
  void remove(uint64_t id);
  // The registered buffer that holds all of [p, p + bytes); false when none does.
  bool find(const void* p, size_t bytes, Buffer* out) const;
  bool empty() const { return count_.load(std::memory_order_relaxed) == 0; }

 private:
  mutable std::mutex mu_;
  std::vector<Buffer> buffers_;
  std::atomic<size_t> count_{0};
};

}  // namespace theseus::transport
