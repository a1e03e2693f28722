// ScratchArena: a communicator's executor scratch — the blocks a program
// declares, and stand-ins for buffers a rank may pass as NULL. One region of
// peer-shareable host memory (so peers read scratch zero-copy), grown by
// doubling, reused by every collective, freed at shutdown. A group lowers all
// its operations before any runs, so a region replaced by a larger one stays
// until the next group starts (endGroup()): the plans lowered before still
// point into it.
//
// DeviceScratchArena: the same for operations the CUDA executor runs on device
// buffers, in device memory. A region is never freed while the communicator
// lives: kernels still queued, and CUDA graphs that captured plans pointing
// into it, may use it after the arena grew, so growing allocates a larger
// region beside the old ones; release() frees them all (communicator destroy).
#pragma once

#include <atomic>
#include <cstddef>
#include <vector>

#include "common/status.h"

namespace theseus::comm {

class ScratchArena {
 public:
  ~ScratchArena() { release(); }
  // At least `bytes` of scratch (valid until the group after the call that grows it).
  Result<char*> get(size_t bytes);
  // The previous group finished: regions replaced during it can go.
  void endGroup();
  void release();
  // Bytes of the current region (any thread).
  size_t bytes() const { return bytes_.load(std::memory_order_relaxed); }

 private:
  void* base_ = nullptr;
  std::atomic<size_t> bytes_{0};
  std::vector<void*> replaced_;
};

class DeviceScratchArena {
 public:
  ~DeviceScratchArena() { release(); }
  // At least `bytes` of device scratch on `device` (-1: the current one) (errors: no CUDA driver,
  // allocation failed).
  Result<char*> get(size_t bytes, int device);
  void release();

 private:
  std::vector<void*> regions_;  // the last one is current
  size_t current_ = 0;          // bytes of the current region
};

}  // namespace theseus::comm
