// ScratchArena: a communicator's executor scratch — the blocks a program
// declares, and stand-ins for buffers a rank may pass as NULL. One region of
// peer-shareable host memory (so peers read scratch zero-copy), grown by
// doubling, reused by every collective, freed at shutdown.
#pragma once

#include <atomic>
#include <cstddef>

#include "common/status.h"

namespace theseus::comm {

class ScratchArena {
 public:
  ~ScratchArena() { release(); }
  // At least `bytes` of scratch (valid until the next call that grows it).
  Result<char*> get(size_t bytes);
  void release();
  // Bytes allocated now (any thread).
  size_t bytes() const { return bytes_.load(std::memory_order_relaxed); }

 private:
  void* base_ = nullptr;
  std::atomic<size_t> bytes_{0};
};

}  // namespace theseus::comm
