#include "comm/scratch.h"

#include <algorithm>

#include "device/cuda_driver.h"
#include "transport/shared_memory_registry.h"

namespace theseus::comm {

Result<char*> ScratchArena::get(size_t bytes) {
  if (bytes <= bytes_.load()) return static_cast<char*>(base_);
  size_t want = std::max(bytes, bytes_.load() * 2);
  void* p;
  TH_ASSIGN(p, transport::allocShared(want));
  if (base_ != nullptr) replaced_.push_back(base_);  // earlier plans of this group may use it
  base_ = p;
  bytes_ = want;
  return static_cast<char*>(p);
}

void ScratchArena::endGroup() {
  for (void* p : replaced_) (void)transport::freeShared(p);
  replaced_.clear();
}

void ScratchArena::release() {
  endGroup();
  if (base_ != nullptr) (void)transport::freeShared(base_);
  base_ = nullptr;
  bytes_ = 0;
}

Result<char*> DeviceScratchArena::get(size_t bytes, int device) {
  if (!regions_.empty() && bytes <= current_) return static_cast<char*>(regions_.back());
  const device::CudaDriver* cuda = device::CudaDriver::get();
  if (cuda == nullptr) return internalError("device scratch: the CUDA driver is not loaded");
  size_t want = std::max(bytes, current_ * 2);
  void* p;
  TH_ASSIGN(p, cuda->allocOn(device, want));  // the communicator's device, whichever is current
  regions_.push_back(p);
  current_ = want;
  return static_cast<char*>(p);
}

void DeviceScratchArena::release() {
  if (regions_.empty()) return;
  if (const device::CudaDriver* cuda = device::CudaDriver::get(); cuda != nullptr)
    for (void* p : regions_) (void)cuda->free(p);
  regions_.clear();
  current_ = 0;
}

}  // namespace theseus::comm
