#include "comm/cuda_device.h"

#include <dlfcn.h>

#include <atomic>

namespace theseus::comm {
namespace {

// Driver API entry points (CUresult is an int enum, CUdevice an int, CUcontext a pointer).
using CuInitFn = int (*)(unsigned);
using CuCtxGetCurrentFn = int (*)(void**);
using CuCtxGetDeviceFn = int (*)(int*);
using CuDeviceGetCountFn = int (*)(int*);

// The already-loaded driver, or NULL. RTLD_NOLOAD: never load it ourselves. A miss is
// not cached: the application may start using CUDA after our first look.
void* loadedDriver() {
  static std::atomic<void*> handle{nullptr};
  void* h = handle.load(std::memory_order_acquire);
  if (h == nullptr) {
    h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (h != nullptr) handle.store(h, std::memory_order_release);
  }
  return h;
}

}  // namespace

int callerCudaDevice() {
  void* drv = loadedDriver();
  if (drv == nullptr) return -1;
  auto getCurrent = reinterpret_cast<CuCtxGetCurrentFn>(dlsym(drv, "cuCtxGetCurrent"));
  auto getDevice = reinterpret_cast<CuCtxGetDeviceFn>(dlsym(drv, "cuCtxGetDevice"));
  if (getCurrent == nullptr || getDevice == nullptr) return -1;
  void* ctx = nullptr;
  if (getCurrent(&ctx) != 0 || ctx == nullptr) return -1;
  int dev = -1;
  if (getDevice(&dev) != 0) return -1;
  return dev;
}

int cudaDeviceCount() {
  void* drv = loadedDriver();
  if (drv == nullptr) return -1;
  auto init = reinterpret_cast<CuInitFn>(dlsym(drv, "cuInit"));
  auto count = reinterpret_cast<CuDeviceGetCountFn>(dlsym(drv, "cuDeviceGetCount"));
  int n = 0;
  if (init == nullptr || count == nullptr || init(0) != 0 || count(&n) != 0) return -1;
  return n;
}

}  // namespace theseus::comm
