// dma-buf export of device memory (dmabuf.h).
#include "device/dmabuf.h"

#include <unistd.h>

#include <cstdint>

#include "device/cuda_driver.h"

namespace theseus::device {
namespace {

// The driver's constants (cuda.h; this leaf builds without it).
enum : int {
  kAttrDmaBufSupported = 124,  // CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED
  kRangeHandleDmaBufFd = 1,    // CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD
};

struct Entry {
  int (*attribute)(int*, int, int) = nullptr;
  int (*handleForRange)(void*, unsigned long long, size_t, int, unsigned long long) = nullptr;
};

const Entry* entry() {
  const CudaDriver* d = CudaDriver::get();
  if (d == nullptr) return nullptr;
  static const Entry e = [d] {
    Entry x;
    x.attribute = reinterpret_cast<int (*)(int*, int, int)>(d->symbol("cuDeviceGetAttribute"));
    x.handleForRange = reinterpret_cast<int (*)(void*, unsigned long long, size_t, int, unsigned long long)>(
        d->symbol("cuMemGetHandleForAddressRange"));
    return x;
  }();
  return e.attribute != nullptr && e.handleForRange != nullptr ? &e : nullptr;
}

}  // namespace

bool DmaBuf::supported(int dev) {
  const Entry* e = entry();
  int value = 0;
  return e != nullptr && dev >= 0 && e->attribute(&value, kAttrDmaBufSupported, dev) == 0 && value != 0;
}

Result<int> DmaBuf::exportRange(const void* p, size_t bytes, int dev) {
  const Entry* e = entry();
  if (e == nullptr) return invalidUsage("the CUDA driver exports no dma-buf (cuMemGetHandleForAddressRange)");
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  if (reinterpret_cast<uintptr_t>(p) % page != 0 || bytes % page != 0 || bytes == 0)
    return invalidUsage("a dma-buf range must be whole pages (%p, %zu bytes)", p, bytes);
  const CudaDriver* d = CudaDriver::get();
  int fd = -1;
  TH_CHECK(d->withDevice(dev, [&] {
    return d->check(e->handleForRange(&fd, reinterpret_cast<unsigned long long>(p), bytes, kRangeHandleDmaBufFd, 0),
                    "cuMemGetHandleForAddressRange");
  }));
  if (fd < 0) return internalError("cuMemGetHandleForAddressRange returned no descriptor");
  return fd;
}

}  // namespace theseus::device
