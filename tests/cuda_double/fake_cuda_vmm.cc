// The CUDA virtual memory management API of the test double (cuMemCreate and
// friends), enough for what Theseus does with it: ncclMemAlloc's shareable
// allocations, and exporting such memory to local peers through POSIX file
// descriptors.
//
// A physical allocation (a CUmemGenericAllocationHandle) is a memfd of its
// own; a reserved address range is an inaccessible anonymous mapping; cuMemMap
// maps the memfd over the reservation, still inaccessible, and cuMemSetAccess
// makes it readable and writable, so code that forgets to grant access faults
// here as it would on a GPU. cuMemExportToShareableHandle(POSIX_FD) returns a
// duplicate of the memfd, which another process receives (SCM_RIGHTS) and
// imports with cuMemImportFromShareableHandle: the same pages, as with CUDA.
// Handles are reference counted: cuMemCreate, cuMemImport and
// cuMemRetainAllocationHandle take a reference, cuMemRelease drops one, and a
// mapping keeps its pages alive after the last release, as CUDA documents.
#include <cuda.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "fake_cuda_core.h"

#define FAKE_API extern "C" __attribute__((visibility("default")))

namespace {

constexpr size_t kGranularity = 2 << 20;  // what an H100/H200 recommends

struct Handle {
  int fd = -1;
  size_t bytes = 0;
  int device = 0;
  unsigned handleTypes = 0;  // CUmemAllocationHandleType bits it may be exported as
  int refs = 1;
};

std::mutex& vmmMutex() {
  static auto* mu = new std::mutex();
  return *mu;
}
std::map<uint64_t, Handle>& handles() {
  static auto* m = new std::map<uint64_t, Handle>();
  return *m;
}
uint64_t nextHandle() {
  static uint64_t next = 0x7000;
  return ++next;
}

// Drops one reference (the caller holds vmmMutex).
void dropLocked(std::map<uint64_t, Handle>::iterator it) {
  if (--it->second.refs > 0) return;
  close(it->second.fd);
  handles().erase(it);
}

}  // namespace

FAKE_API CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                                CUmemAllocationGranularity_flags) {
  FAKE_API_CALL();
  if (granularity == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *granularity = kGranularity;
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                              unsigned long long) {
  FAKE_API_CALL();
  if (handle == nullptr || prop == nullptr || size == 0 || size % kGranularity != 0 ||
      prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
      prop->location.id < 0 || prop->location.id >= fakecuda::deviceCount())
    return CUDA_ERROR_INVALID_VALUE;
  if (fakecuda::checkUnsafeCall() != cudaSuccess) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  const int fd = memfd_create("fake-cuda-vmm", MFD_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  std::lock_guard<std::mutex> lock(vmmMutex());
  const uint64_t h = nextHandle();
  handles()[h] = Handle{fd, size, prop->location.id, static_cast<unsigned>(prop->requestedHandleTypes), 1};
  *handle = h;
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  FAKE_API_CALL();
  std::lock_guard<std::mutex> lock(vmmMutex());
  auto it = handles().find(handle);
  if (it == handles().end()) return CUDA_ERROR_INVALID_VALUE;
  dropLocked(it);
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                      unsigned long long) {
  FAKE_API_CALL();
  if (ptr == nullptr || size == 0 || size % kGranularity != 0 || addr != 0) return CUDA_ERROR_INVALID_VALUE;
  const size_t align = alignment == 0 ? kGranularity : alignment;
  // Over-reserve, then trim to an aligned range.
  void* p = mmap(nullptr, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  const uintptr_t raw = reinterpret_cast<uintptr_t>(p);
  const uintptr_t at = (raw + align - 1) / align * align;
  if (at > raw) munmap(p, at - raw);
  if (raw + size + align > at + size) munmap(reinterpret_cast<void*>(at + size), raw + size + align - (at + size));
  *ptr = at;
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  FAKE_API_CALL();
  if (ptr == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  fakecuda::Allocation a;
  if (fakecuda::findAllocation(reinterpret_cast<void*>(ptr), &a)) return CUDA_ERROR_INVALID_VALUE;  // still mapped
  munmap(reinterpret_cast<void*>(ptr), size);
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                           unsigned long long) {
  FAKE_API_CALL();
  std::lock_guard<std::mutex> lock(vmmMutex());
  auto it = handles().find(handle);
  if (it == handles().end() || offset + size > it->second.bytes || size % kGranularity != 0)
    return CUDA_ERROR_INVALID_VALUE;
  void* p = mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED, it->second.fd,
                 static_cast<off_t>(offset));
  if (p == MAP_FAILED) return CUDA_ERROR_INVALID_VALUE;
  ++it->second.refs;  // the mapping holds the pages
  fakecuda::recordMapping(ptr, size, it->second.device, handle);
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  FAKE_API_CALL();
  fakecuda::Allocation a;
  if (!fakecuda::findAllocation(reinterpret_cast<void*>(ptr), &a) || !a.vmm || a.base != ptr || a.bytes != size)
    return CUDA_ERROR_INVALID_VALUE;
  fakecuda::drainAll();  // unmapping waits for work that may use the memory
  fakecuda::forgetMapping(ptr, size);
  // Back to a reservation: inaccessible, no pages.
  mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  std::lock_guard<std::mutex> lock(vmmMutex());
  auto it = handles().find(a.handle);
  if (it != handles().end()) dropLocked(it);
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  FAKE_API_CALL();
  fakecuda::Allocation a;
  if (desc == nullptr || count == 0 || !fakecuda::findAllocation(reinterpret_cast<void*>(ptr), &a) || !a.vmm ||
      ptr + size > a.base + a.bytes)
    return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i)
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || desc[i].location.id < 0 ||
        desc[i].location.id >= fakecuda::deviceCount())
      return CUDA_ERROR_INVALID_DEVICE;
  const int prot = desc[0].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE
                   : desc[0].flags == CU_MEM_ACCESS_FLAGS_PROT_READ    ? PROT_READ
                                                                       : PROT_NONE;
  return mprotect(reinterpret_cast<void*>(ptr), size, prot) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FAKE_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  FAKE_API_CALL();
  fakecuda::Allocation a;
  if (handle == nullptr || !fakecuda::findAllocation(addr, &a) || !a.vmm) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(vmmMutex());
  auto it = handles().find(a.handle);
  if (it == handles().end()) return CUDA_ERROR_INVALID_VALUE;
  ++it->second.refs;
  *handle = a.handle;
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemExportToShareableHandle(void* shareableHandle, CUmemGenericAllocationHandle handle,
                                               CUmemAllocationHandleType type, unsigned long long) {
  FAKE_API_CALL();
  std::lock_guard<std::mutex> lock(vmmMutex());
  auto it = handles().find(handle);
  if (it == handles().end() || shareableHandle == nullptr || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
      (it->second.handleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == 0)
    return CUDA_ERROR_INVALID_VALUE;  // not created exportable as a file descriptor
  const int fd = fcntl(it->second.fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *static_cast<int*>(shareableHandle) = fd;
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* osHandle,
                                                 CUmemAllocationHandleType type) {
  FAKE_API_CALL();
  const int theirs = static_cast<int>(reinterpret_cast<intptr_t>(osHandle));
  struct stat st;
  if (handle == nullptr || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || fstat(theirs, &st) != 0 ||
      st.st_size <= 0)
    return CUDA_ERROR_INVALID_VALUE;
  const int fd = fcntl(theirs, F_DUPFD_CLOEXEC, 0);  // the caller may close its descriptor
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lock(vmmMutex());
  const uint64_t h = nextHandle();
  handles()[h] = Handle{fd, static_cast<size_t>(st.st_size), fakecuda::currentDevice(),
                        static_cast<unsigned>(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), 1};
  *handle = h;
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice device) {
  FAKE_API_CALL();
  if (value == nullptr || device < 0 || device >= fakecuda::deviceCount()) return CUDA_ERROR_INVALID_VALUE;
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
      *value = getenv("THESEUS_FAKE_CUDA_NO_VMM") == nullptr ? 1 : 0;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED:
      *value = getenv("THESEUS_FAKE_CUDA_NO_DMABUF") == nullptr ? 1 : 0;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: {
      // sm_90 (an H100/H200) unless THESEUS_FAKE_CUDA_CC says otherwise (e.g. 80 for an A100).
      const char* cc = getenv("THESEUS_FAKE_CUDA_CC");
      const int v = cc != nullptr ? atoi(cc) : 90;
      *value = attribute == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? v / 10 : v % 10;
      return CUDA_SUCCESS;
    }
    default:
      *value = 0;
      return CUDA_SUCCESS;
  }
}

// dma-buf export of device memory (GPUDirect RDMA): a new open file of the
// allocation's memfd (its own file position), positioned at the range's first
// byte, so that offset 0 of "the dma-buf" is that byte, as with CUDA. The IB
// double's ibv_reg_dmabuf_mr maps the descriptor from its position: a NIC
// reaches the pages through the descriptor, never through the CPU address.
// Whole host pages inside one device allocation (cuMemAlloc or a VMM mapping),
// as CUDA requires; THESEUS_FAKE_CUDA_NO_DMABUF=1 makes the device say it has
// no dma-buf support and the call fail.
FAKE_API CUresult cuMemGetHandleForAddressRange(void* handle, CUdeviceptr dptr, size_t size,
                                                CUmemRangeHandleType handleType, unsigned long long flags) {
  FAKE_API_CALL();
  if (getenv("THESEUS_FAKE_CUDA_NO_DMABUF") != nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (handle == nullptr || handleType != CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD || flags > 1 || size == 0 ||
      dptr % page != 0 || size % page != 0)
    return CUDA_ERROR_INVALID_VALUE;
  fakecuda::Allocation a;
  if (!fakecuda::findAllocation(reinterpret_cast<const void*>(dptr), &a) || a.kind != fakecuda::Kind::kDevice ||
      dptr + size > a.base + a.bytes)
    return CUDA_ERROR_INVALID_VALUE;
  int backing = a.fd;
  if (a.vmm) {
    std::lock_guard<std::mutex> lock(vmmMutex());
    auto it = handles().find(a.handle);
    if (it == handles().end()) return CUDA_ERROR_INVALID_VALUE;
    backing = it->second.fd;
  }
  if (backing < 0) return CUDA_ERROR_INVALID_VALUE;
  const std::string path = "/proc/self/fd/" + std::to_string(backing);
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  if (lseek(fd, static_cast<off_t>(dptr - a.base), SEEK_SET) < 0) {
    close(fd);
    return CUDA_ERROR_INVALID_VALUE;
  }
  *static_cast<int*>(handle) = fd;
  return CUDA_SUCCESS;
}
