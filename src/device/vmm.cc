// Shareable device memory through the VMM API (vmm.h).
#include "device/vmm.h"

#include <map>
#include <mutex>
#include <vector>

#include "device/cuda_driver.h"

namespace theseus::device {
namespace {

// The driver's structures and constants for these calls (cuda.h; this leaf builds without it).
struct MemLocation {
  int type;  // CU_MEM_LOCATION_TYPE_DEVICE
  int id;
};
struct AllocationProp {
  int type;                  // CU_MEM_ALLOCATION_TYPE_PINNED
  int requestedHandleTypes;  // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
  MemLocation location;
  void* win32HandleMetaData;
  unsigned char compressionType, gpuDirectRDMACapable;
  unsigned short usage;
  unsigned char reserved[4];
};
static_assert(sizeof(AllocationProp) == 32, "CUmemAllocationProp's layout");
struct AccessDesc {
  MemLocation location;
  int flags;  // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
};
static_assert(sizeof(AccessDesc) == 12, "CUmemAccessDesc's layout");
enum : int {
  kLocationDevice = 1,
  kAllocationPinned = 1,
  kHandlePosixFd = 1,
  kAccessReadWrite = 3,
  kGranularityRecommended = 1,
  kAttrVmmSupported = 102,    // CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
  kAttrPosixFdSupported = 103,  // CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
  kPointerLegacyIpcCapable = 10,  // CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE
};
using Handle = unsigned long long;
using DevPtr = unsigned long long;

// What allocate() made, by address: free() needs the handle and size.
struct Made {
  Handle handle = 0;
  size_t bytes = 0;
};
std::mutex& madeMutex() {
  static auto* mu = new std::mutex();
  return *mu;
}
std::map<void*, Made>& made() {
  static auto* m = new std::map<void*, Made>();
  return *m;
}

}  // namespace

struct VmmLoader {
  static const Vmm* load(const CudaDriver& d) {
    auto* v = new Vmm();
    v->create_ = d.symbol("cuMemCreate");
    v->release_ = d.symbol("cuMemRelease");
    v->reserve_ = d.symbol("cuMemAddressReserve");
    v->addressFree_ = d.symbol("cuMemAddressFree");
    v->map_ = d.symbol("cuMemMap");
    v->unmap_ = d.symbol("cuMemUnmap");
    v->setAccess_ = d.symbol("cuMemSetAccess");
    v->retain_ = d.symbol("cuMemRetainAllocationHandle");
    v->exportTo_ = d.symbol("cuMemExportToShareableHandle");
    v->importFrom_ = d.symbol("cuMemImportFromShareableHandle");
    v->granularity_ = d.symbol("cuMemGetAllocationGranularity");
    v->deviceAttribute_ = d.symbol("cuDeviceGetAttribute");
    v->canAccessPeer_ = d.symbol("cuDeviceCanAccessPeer");
    v->pointerAttribute_ = d.symbol("cuPointerGetAttribute");
    if (!v->create_ || !v->release_ || !v->reserve_ || !v->addressFree_ || !v->map_ || !v->unmap_ ||
        !v->setAccess_ || !v->retain_ || !v->exportTo_ || !v->importFrom_ || !v->granularity_ ||
        !v->deviceAttribute_) {
      delete v;
      return nullptr;
    }
    return v;
  }
};

const Vmm* Vmm::get() {
  const CudaDriver* d = CudaDriver::get();
  if (d == nullptr) return nullptr;
  static const Vmm* vmm = VmmLoader::load(*d);  // kept for the life of the process
  return vmm;
}

bool Vmm::shareableOn(int dev) const {
  if (dev < 0) return false;
  auto attr = reinterpret_cast<int (*)(int*, int, int)>(deviceAttribute_);
  int vmm = 0, fd = 0;
  return attr(&vmm, kAttrVmmSupported, dev) == 0 && vmm != 0 && attr(&fd, kAttrPosixFdSupported, dev) == 0 && fd != 0;
}

Result<void*> Vmm::allocate(size_t bytes) const {
  const CudaDriver& d = *CudaDriver::get();
  const int dev = d.currentDevice();
  if (dev < 0) return invalidUsage("no CUDA context is current on this thread");
  AllocationProp prop{};
  prop.type = kAllocationPinned;
  prop.requestedHandleTypes = kHandlePosixFd;
  prop.location = MemLocation{kLocationDevice, dev};
  size_t granularity = 0;
  TH_CHECK(d.check(reinterpret_cast<int (*)(size_t*, const AllocationProp*, int)>(granularity_)(
                       &granularity, &prop, kGranularityRecommended),
                   "cuMemGetAllocationGranularity"));
  if (granularity == 0) granularity = 2 << 20;
  const size_t size = (bytes + granularity - 1) / granularity * granularity;
  Handle h = 0;
  TH_CHECK(d.check(reinterpret_cast<int (*)(Handle*, size_t, const AllocationProp*, unsigned long long)>(create_)(
                       &h, size, &prop, 0),
                   "cuMemCreate"));
  auto release = reinterpret_cast<int (*)(Handle)>(release_);
  DevPtr ptr = 0;
  Status s = d.check(reinterpret_cast<int (*)(DevPtr*, size_t, size_t, DevPtr, unsigned long long)>(reserve_)(
                         &ptr, size, granularity, 0, 0),
                     "cuMemAddressReserve");
  if (!s.isOk()) {
    release(h);
    return s;
  }
  s = d.check(reinterpret_cast<int (*)(DevPtr, size_t, size_t, Handle, unsigned long long)>(map_)(ptr, size, 0, h, 0),
              "cuMemMap");
  // This device and each device that can reach it as a peer.
  std::vector<AccessDesc> access{AccessDesc{{kLocationDevice, dev}, kAccessReadWrite}};
  const int n = d.deviceCount();
  for (int other = 0; other < n && canAccessPeer_ != nullptr; ++other) {
    int can = 0;
    if (other != dev && reinterpret_cast<int (*)(int*, int, int)>(canAccessPeer_)(&can, other, dev) == 0 && can)
      access.push_back(AccessDesc{{kLocationDevice, other}, kAccessReadWrite});
  }
  if (s.isOk())
    s = d.check(reinterpret_cast<int (*)(DevPtr, size_t, const AccessDesc*, size_t)>(setAccess_)(
                    ptr, size, access.data(), access.size()),
                "cuMemSetAccess");
  if (!s.isOk()) {
    reinterpret_cast<int (*)(DevPtr, size_t)>(unmap_)(ptr, size);  // fails harmlessly when not mapped
    reinterpret_cast<int (*)(DevPtr, size_t)>(addressFree_)(ptr, size);
    release(h);
    return s;
  }
  void* p = reinterpret_cast<void*>(ptr);
  std::lock_guard<std::mutex> lock(madeMutex());
  made()[p] = Made{h, size};
  return p;
}

Result<bool> Vmm::free(void* p) const {
  Made m;
  {
    std::lock_guard<std::mutex> lock(madeMutex());
    auto it = made().find(p);
    if (it == made().end()) return false;
    m = it->second;
    made().erase(it);
  }
  const CudaDriver& d = *CudaDriver::get();
  const auto ptr = reinterpret_cast<DevPtr>(p);
  Status s = d.check(reinterpret_cast<int (*)(DevPtr, size_t)>(unmap_)(ptr, m.bytes), "cuMemUnmap");
  Status a = d.check(reinterpret_cast<int (*)(DevPtr, size_t)>(addressFree_)(ptr, m.bytes), "cuMemAddressFree");
  Status r = d.check(reinterpret_cast<int (*)(Handle)>(release_)(m.handle), "cuMemRelease");
  TH_CHECK(s);
  TH_CHECK(a);
  TH_CHECK(r);
  return true;
}

bool Vmm::legacyIpcCapable(const void* p) const {
  auto query = reinterpret_cast<int (*)(void*, int, DevPtr)>(pointerAttribute_);
  int capable = 1;
  if (query == nullptr || query(&capable, kPointerLegacyIpcCapable, reinterpret_cast<DevPtr>(p)) != 0) return true;
  return capable != 0;
}

Result<int> Vmm::exportFd(void* base) const {
  const CudaDriver& d = *CudaDriver::get();
  Handle h = 0;
  TH_CHECK(d.check(reinterpret_cast<int (*)(Handle*, void*)>(retain_)(&h, base), "cuMemRetainAllocationHandle"));
  int fd = -1;
  Status s = d.check(reinterpret_cast<int (*)(void*, Handle, int, unsigned long long)>(exportTo_)(
                         &fd, h, kHandlePosixFd, 0),
                     "cuMemExportToShareableHandle (the allocation was not created shareable as a file descriptor)");
  reinterpret_cast<int (*)(Handle)>(release_)(h);  // the retain's reference
  TH_CHECK(s);
  return fd;
}

Result<Vmm::Mapping> Vmm::importFd(int fd, size_t bytes, int dev) const {
  const CudaDriver& d = *CudaDriver::get();
  Mapping m;
  m.bytes = bytes;
  TH_CHECK(d.check(reinterpret_cast<int (*)(Handle*, void*, int)>(importFrom_)(
                       &m.handle, reinterpret_cast<void*>(static_cast<intptr_t>(fd)), kHandlePosixFd),
                   "cuMemImportFromShareableHandle"));
  DevPtr ptr = 0;
  Status s = d.check(reinterpret_cast<int (*)(DevPtr*, size_t, size_t, DevPtr, unsigned long long)>(reserve_)(
                         &ptr, bytes, 0, 0, 0),
                     "cuMemAddressReserve");
  bool mapped = false;
  if (s.isOk()) {
    s = d.check(reinterpret_cast<int (*)(DevPtr, size_t, size_t, Handle, unsigned long long)>(map_)(
                    ptr, bytes, 0, m.handle, 0),
                "cuMemMap");
    mapped = s.isOk();
  }
  if (s.isOk()) {
    const AccessDesc access{{kLocationDevice, dev}, kAccessReadWrite};
    s = d.check(reinterpret_cast<int (*)(DevPtr, size_t, const AccessDesc*, size_t)>(setAccess_)(ptr, bytes,
                                                                                                 &access, 1),
                "cuMemSetAccess");
  }
  if (!s.isOk()) {
    if (mapped) reinterpret_cast<int (*)(DevPtr, size_t)>(unmap_)(ptr, bytes);
    if (ptr != 0) reinterpret_cast<int (*)(DevPtr, size_t)>(addressFree_)(ptr, bytes);
    reinterpret_cast<int (*)(Handle)>(release_)(m.handle);
    return s;
  }
  m.base = reinterpret_cast<void*>(ptr);
  return m;
}

Status Vmm::unmap(const Mapping& m) const {
  const CudaDriver& d = *CudaDriver::get();
  const auto ptr = reinterpret_cast<DevPtr>(m.base);
  Status s = d.check(reinterpret_cast<int (*)(DevPtr, size_t)>(unmap_)(ptr, m.bytes), "cuMemUnmap");
  Status a = d.check(reinterpret_cast<int (*)(DevPtr, size_t)>(addressFree_)(ptr, m.bytes), "cuMemAddressFree");
  Status r = d.check(reinterpret_cast<int (*)(Handle)>(release_)(m.handle), "cuMemRelease");
  TH_CHECK(s);
  TH_CHECK(a);
  return r;
}

}  // namespace theseus::device
