#include "comm/scratch.h"

#include <algorithm>

#include "transport/shared_memory_registry.h"

namespace theseus::comm {

Result<char*> ScratchArena::get(size_t bytes) {
  if (bytes <= bytes_.load()) return static_cast<char*>(base_);
  size_t want = std::max(bytes, bytes_.load() * 2);
  release();
  void* p;
  TH_ASSIGN(p, transport::allocShared(want));
  base_ = p;
  bytes_ = want;
  return static_cast<char*>(p);
}

void ScratchArena::release() {
  if (base_ != nullptr) (void)transport::freeShared(base_);
  base_ = nullptr;
  bytes_ = 0;
}

}  // namespace theseus::comm
