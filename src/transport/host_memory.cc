// ncclMemAlloc / ncclMemFree in host mode: every allocation is a shared region
// (SharedMemoryRegistry), so ranks on this host can read it in place and
// collectives on it skip the FIFO copy.
//
// CUDA: when the library is built with CUDA and a device is usable, ncclMemAlloc
// must return device memory (cuMemCreate with a POSIX-fd handle, like NCCL, so
// peers can import it through cuda_ipc). That path belongs in src/device/ and is
// selected here, before the host path, once it exists.
#include "transport/memory.h"
#include "transport/shared_memory_registry.h"

namespace theseus::transport {

Result<void*> memAlloc(size_t size) {
  auto r = SharedMemoryRegistry::instance().allocate(size);
  if (!r.isOk()) return r.status().withContext("ncclMemAlloc");
  return r;
}

Status memFree(void* ptr) { return SharedMemoryRegistry::instance().free(ptr).withContext("ncclMemFree"); }

}  // namespace theseus::transport
