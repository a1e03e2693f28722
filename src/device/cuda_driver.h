// The CUDA driver, used through dlopen so that Theseus builds and runs without
// CUDA and never loads the driver into a CPU-only process: the driver is used
// only when the application already loaded it (PyTorch, nccl-tests). Every call
// returns a Status with the driver's error name.
#pragma once

#include <cstddef>

#include "common/status.h"
#include "nccl.h"

namespace theseus::device {

class CudaDriver {
 public:
  // The driver when the process has loaded it and it initialises, else nullptr.
  // A failed probe is not cached, so a process that loads CUDA later is seen then.
  static const CudaDriver* get();

  // True when `p` is device (or managed) memory the host cannot dereference directly.
  bool isDevicePointer(const void* p) const;
  Status copyToHost(void* dst, const void* src, size_t bytes) const;
  Status copyToDevice(void* dst, const void* src, size_t bytes) const;
  // Waits for the work queued on `stream` (the legacy default stream for NULL).
  Status synchronize(cudaStream_t stream) const;
  // True when `stream` is being captured into a CUDA graph.
  bool isCapturing(cudaStream_t stream) const;
  Result<void*> alloc(size_t bytes) const;
  Status free(void* p) const;
  int currentDevice() const;  // -1 without a current context

 private:
  CudaDriver() = default;
  Status check(int rc, const char* what) const;
  using Fn = void*;
  Fn init_ = nullptr, pointerGetAttribute_ = nullptr, memcpyDtoH_ = nullptr, memcpyHtoD_ = nullptr,
     streamSynchronize_ = nullptr, streamIsCapturing_ = nullptr, memAlloc_ = nullptr, memFree_ = nullptr,
     getErrorName_ = nullptr, ctxGetCurrent_ = nullptr, ctxGetDevice_ = nullptr;
  friend struct DriverLoader;
};

}  // namespace theseus::device
