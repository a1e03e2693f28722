// Shareable device memory through CUDA's virtual memory management API
// (cuMemCreate, cuMemMap), shared with other processes as POSIX file
// descriptors.
//
// Why. Legacy CUDA IPC (cuIpcGetMemHandle) only works for cuMemAlloc/cudaMalloc
// memory. NVIDIA's library allocates ncclMemAlloc memory with the VMM API, and
// allocators built on it (PyTorch's expandable segments) hand out memory that
// legacy IPC refuses. Such memory is shared by exporting its physical
// allocation as a file descriptor, passing the descriptor to the other process
// (SCM_RIGHTS: transport/shm/fd_mailbox.h), which imports it and maps it at an
// address of its own.
//
// allocate() makes ncclMemAlloc memory as NVIDIA's library does: one physical
// allocation on the calling thread's device, exportable as a file descriptor,
// rounded up to the recommended granularity, mapped at an address reserved for
// it, and readable and writable by that device and by every device that can
// access it as a peer (kernels of ranks on other GPUs read it in place).
// free() undoes exactly what allocate() made. exportFd() and importFd() share
// any VMM allocation created exportable as a file descriptor.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace theseus::device {

class Vmm {
 public:
  // The VMM entry points of the loaded driver, or nullptr (driver not loaded, or too old).
  static const Vmm* get();

  // True when device `dev` supports VMM allocations exportable as POSIX file descriptors.
  bool shareableOn(int dev) const;
  // A new shareable allocation of at least `bytes` on the calling thread's current device.
  Result<void*> allocate(size_t bytes) const;
  // Frees `p` when allocate() returned it (true); false when it did not, and nothing is done.
  Result<bool> free(void* p) const;

  // False when the allocation holding `p` is not one legacy CUDA IPC can share (a VMM mapping).
  bool legacyIpcCapable(const void* p) const;
  // A new descriptor for the physical allocation mapped at `base` (the start of a mapping); the
  // caller closes it. Fails when the allocation was not created exportable as a descriptor.
  Result<int> exportFd(void* base) const;
  // Another process's allocation of `bytes`, from its descriptor (not consumed): mapped whole, from
  // offset 0 (as ncclMemAlloc and PyTorch's expandable segments map theirs), at an address of this
  // process, readable and writable by device `dev`.
  struct Mapping {
    void* base = nullptr;
    size_t bytes = 0;
    unsigned long long handle = 0;
  };
  Result<Mapping> importFd(int fd, size_t bytes, int dev) const;
  Status unmap(const Mapping& m) const;

 private:
  Vmm() = default;
  friend struct VmmLoader;
  using Fn = void*;
  Fn create_ = nullptr, release_ = nullptr, reserve_ = nullptr, addressFree_ = nullptr, map_ = nullptr,
     unmap_ = nullptr, setAccess_ = nullptr, retain_ = nullptr, exportTo_ = nullptr, importFrom_ = nullptr,
     granularity_ = nullptr, deviceAttribute_ = nullptr, canAccessPeer_ = nullptr,
     pointerAttribute_ = nullptr;
};

}  // namespace theseus::device
