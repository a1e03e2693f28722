// UserBuffers (user_buffers.h).
#include "transport/user_buffers.h"

#include <algorithm>

namespace theseus::transport {

void UserBuffers::add(uint64_t id, const void* base, size_t size) {
  std::lock_guard lock(mu_);
  buffers_.push_back(Buffer{id, static_cast<const char*>(base), size});
  count_.store(buffers_.size(), std::memory_order_relaxed);
}

void UserBuffers::remove(uint64_t id) {
  std::lock_guard lock(mu_);
  buffers_.erase(std::remove_if(buffers_.begin(), buffers_.end(), [&](const Buffer& b) { return b.id == id; }),
                 buffers_.end());
  count_.store(buffers_.size(), std::memory_order_relaxed);
}

bool UserBuffers::find(const void* p, size_t bytes, Buffer* out) const {
  const char* c = static_cast<const char*>(p);
  std::lock_guard lock(mu_);
  for (const Buffer& b : buffers_) {
    if (c >= b.base && bytes <= b.size && static_cast<size_t>(c - b.base) <= b.size - bytes) {
      *out = b;
      return true;
    }
  }
  return false;
}

}  // namespace theseus::transport
