// ncclMemAlloc / ncclMemFree.
//
// Host mode: every allocation is a shared region (SharedMemoryRegistry), so
// ranks on this host can read it in place and collectives on it skip the FIFO
// copy. With a GPU in use (the process loaded the CUDA driver and the calling
// thread has a current context), ncclMemAlloc returns device memory as NCCL's
// does; THESEUS_MEMALLOC=host|device|auto overrides the choice (the harness
// uses host buffers on GPU machines with --host). Device memory comes from the
// VMM API, shareable as a file descriptor (device/vmm.h), as NVIDIA's library
// allocates it, where the device supports that and NCCL_CUMEM_ENABLE is not 0;
// else (or when that fails, said at INFO) from cuMemAlloc.
#include <strings.h>

#include "common/knobs.h"
#include "common/log.h"
#include "device/cuda_driver.h"
#include "device/vmm.h"
#include "comm/mem_alloc.h"
#include "transport/shared_memory_registry.h"

namespace theseus::comm {
namespace {

const StringKnob kMemAlloc("THESEUS_MEMALLOC", "auto",
                           "Where ncclMemAlloc allocates: auto (device memory when the caller has a current CUDA "
                           "context, else shared host memory), host, or device");

const BoolKnob kCuMemEnable("NCCL_CUMEM_ENABLE", true,
                             "1: ncclMemAlloc allocates device memory with CUDA's VMM API (cuMemCreate), shareable with "
                             "local peers as a file descriptor, where the device supports it; 0: cuMemAlloc");

const device::CudaDriver* deviceAllocator() {
  static const std::string mode = kMemAlloc.get();
  if (strcasecmp(mode.c_str(), "host") == 0) return nullptr;
  const device::CudaDriver* cuda = device::CudaDriver::get();
  if (cuda == nullptr) return nullptr;
  if (strcasecmp(mode.c_str(), "device") != 0 && cuda->currentDevice() < 0) return nullptr;
  return cuda;
}

}  // namespace

Result<void*> memAlloc(size_t size) {
  if (const device::CudaDriver* cuda = deviceAllocator()) {
    const device::Vmm* vmm = kCuMemEnable.get() ? device::Vmm::get() : nullptr;
    if (vmm != nullptr && vmm->shareableOn(cuda->currentDevice())) {
      auto v = vmm->allocate(size);
      if (v.isOk()) return v;
      TH_INFO(log::kAlloc, "ncclMemAlloc of %zu bytes takes cuMemAlloc: %s", size, v.status().message().c_str());
    }
    auto d = cuda->alloc(size);
    if (!d.isOk()) return d.status().withContext("ncclMemAlloc");
    return d;
  }
  if (strcasecmp(kMemAlloc.get().c_str(), "device") == 0)
    return invalidUsage("ncclMemAlloc: THESEUS_MEMALLOC=device but no CUDA context is current on this thread");
  auto r = transport::SharedMemoryRegistry::instance().allocate(size);
  if (!r.isOk()) return r.status().withContext("ncclMemAlloc");
  return r;
}

Status memFree(void* ptr) {
  const device::CudaDriver* cuda = device::CudaDriver::get();
  if (const device::Vmm* vmm = cuda != nullptr ? device::Vmm::get() : nullptr) {
    auto freed = vmm->free(ptr);
    if (!freed.isOk()) return freed.status().withContext("ncclMemFree");
    if (freed.value()) return Status::ok();
  }
  if (cuda != nullptr && cuda->isDevicePointer(ptr)) return cuda->free(ptr).withContext("ncclMemFree");
  return transport::SharedMemoryRegistry::instance().free(ptr).withContext("ncclMemFree");
}

}  // namespace theseus::comm
