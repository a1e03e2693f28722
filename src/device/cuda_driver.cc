#include "device/cuda_driver.h"

#include <dlfcn.h>
#include <link.h>

#include <cstddef>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "device/memory_kind.h"

namespace theseus::device {

// Driver types, as plain integers and pointers (CUresult is an int enum).
using CuResult = int;
using CuDevicePtr = unsigned long long;
enum : int { kAttrMemoryType = 2, kAttrDeviceOrdinal = 9 };  // CU_POINTER_ATTRIBUTE_MEMORY_TYPE, _DEVICE_ORDINAL
constexpr int kMaxDevices = 64;
enum : unsigned { kMemTypeHost = 1, kMemTypeDevice = 2, kMemTypeArray = 3, kMemTypeUnified = 4 };

struct DriverLoader {
  static const CudaDriver* load() {
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (h == nullptr) return nullptr;
    auto* d = new CudaDriver();
    d->library_ = h;
    d->init_ = dlsym(h, "cuInit");
    d->pointerGetAttribute_ = dlsym(h, "cuPointerGetAttribute");
    d->pointerGetAttributes_ = dlsym(h, "cuPointerGetAttributes");
    d->memcpyDtoH_ = dlsym(h, "cuMemcpyDtoH_v2");
    d->memcpyHtoDAsync_ = dlsym(h, "cuMemcpyHtoDAsync_v2");
    d->streamSynchronize_ = dlsym(h, "cuStreamSynchronize");
    d->streamIsCapturing_ = dlsym(h, "cuStreamIsCapturing");
    d->streamGetCaptureInfo_ = dlsym(h, "cuStreamGetCaptureInfo_v2");
    d->memAlloc_ = dlsym(h, "cuMemAlloc_v2");
    d->memFree_ = dlsym(h, "cuMemFree_v2");
    d->getErrorName_ = dlsym(h, "cuGetErrorName");
    d->ctxGetCurrent_ = dlsym(h, "cuCtxGetCurrent");
    d->ctxGetDevice_ = dlsym(h, "cuCtxGetDevice");
    d->deviceGetCount_ = dlsym(h, "cuDeviceGetCount");
    d->streamGetCtx_ = dlsym(h, "cuStreamGetCtx");
    d->deviceGet_ = dlsym(h, "cuDeviceGet");
    d->primaryCtxRetain_ = dlsym(h, "cuDevicePrimaryCtxRetain");
    d->ctxSetCurrent_ = dlsym(h, "cuCtxSetCurrent");
    d->ipcGetMemHandle_ = dlsym(h, "cuIpcGetMemHandle");
    d->ipcOpenMemHandle_ = dlsym(h, "cuIpcOpenMemHandle_v2");
    d->ipcCloseMemHandle_ = dlsym(h, "cuIpcCloseMemHandle");
    d->memGetAddressRange_ = dlsym(h, "cuMemGetAddressRange_v2");
    d->streamGetDevice_ = dlsym(h, "cuStreamGetDevice");
    d->deviceCanAccessPeer_ = dlsym(h, "cuDeviceCanAccessPeer");
    d->ctxEnablePeerAccess_ = dlsym(h, "cuCtxEnablePeerAccess");
    d->memHostRegister_ = dlsym(h, "cuMemHostRegister_v2");
    d->memHostUnregister_ = dlsym(h, "cuMemHostUnregister");
    bool complete = d->init_ && d->pointerGetAttribute_ && d->memcpyDtoH_ && d->memcpyHtoDAsync_ &&
                    d->streamSynchronize_ &&
                    d->memAlloc_ && d->memFree_ && d->ctxGetCurrent_ && d->ctxGetDevice_;
    if (!complete || reinterpret_cast<CuResult (*)(unsigned)>(d->init_)(0) != 0) {
      delete d;
      return nullptr;
    }
    return d;
  }
};

// How many shared objects the process has loaded so far (dl_iterate_phdr's
// dlpi_adds, read from the first object; the walk stops there).
unsigned long long loadCount() {
  unsigned long long adds = 0;
  dl_iterate_phdr(
      [](struct dl_phdr_info* info, size_t size, void* out) -> int {
        if (size >= offsetof(struct dl_phdr_info, dlpi_subs)) *static_cast<unsigned long long*>(out) = info->dlpi_adds;
        return 1;
      },
      &adds);
  return adds;
}

// The driver is looked up once it is loaded, and not again while nothing new
// was loaded since the last miss: a dlopen(RTLD_NOLOAD) searches the library
// path and costs microseconds, which host-only jobs must not pay per
// collective. A device buffer cannot exist before libcuda is loaded, so a miss
// with no new object loaded since is still a miss.
const CudaDriver* CudaDriver::get() {
  static std::atomic<const CudaDriver*> driver{nullptr};
  static std::atomic<unsigned long long> missedAt{~0ull};  // load count at the last miss
  static std::mutex mu;
  const CudaDriver* d = driver.load(std::memory_order_acquire);
  if (d != nullptr) return d;
  const unsigned long long loads = loadCount();
  if (loads != 0 && loads == missedAt.load(std::memory_order_relaxed)) return nullptr;
  std::lock_guard<std::mutex> lock(mu);
  d = driver.load();
  if (d == nullptr) {
    d = DriverLoader::load();  // kept for the life of the process once found
    driver.store(d, std::memory_order_release);
    if (d == nullptr) missedAt.store(loads, std::memory_order_relaxed);
  }
  return d;
}

Status CudaDriver::check(int rc, const char* what) const {
  if (rc == 0) return Status::ok();
  const char* name = "unknown";
  if (getErrorName_) reinterpret_cast<CuResult (*)(int, const char**)>(getErrorName_)(rc, &name);
  return Status(ncclUnhandledCudaError, std::string(what) + " failed: " + name + " (" + std::to_string(rc) + ")");
}

void* CudaDriver::symbol(const char* name) const { return dlsym(library_, name); }

int CudaDriver::callerDevice() {
  const CudaDriver* d = get();
  return d != nullptr ? d->currentDevice() : -1;
}

int CudaDriver::visibleDevices() {
  const CudaDriver* d = get();
  return d != nullptr ? d->deviceCount() : -1;
}

MemoryKind CudaDriver::memoryKind(const void* p) const {
  if (p == nullptr) return MemoryKind::kHost;
  unsigned type = 0;
  auto fn = reinterpret_cast<CuResult (*)(void*, int, CuDevicePtr)>(pointerGetAttribute_);
  if (fn(&type, kAttrMemoryType, reinterpret_cast<CuDevicePtr>(p)) != 0) return MemoryKind::kHost;  // unknown to CUDA
  if (type == kMemTypeDevice || type == kMemTypeArray) return MemoryKind::kDevice;
  // Managed (unified) memory is host-accessible; page-locked host memory is what the driver reports as host.
  return type == kMemTypeHost ? MemoryKind::kHostPinned : MemoryKind::kHost;
}

// MEMORY_TYPE 0 (what cuPointerGetAttributes reports for memory CUDA does not know, where the singular query
// fails) and managed memory are host memory; page-locked memory is what the driver reports as host.
CudaDriver::MemoryInfo CudaDriver::memoryInfo(const void* p) const {
  MemoryInfo info;
  if (p == nullptr) return info;
  if (pointerGetAttributes_ == nullptr) {
    info.kind = memoryKind(p);
    if (info.kind == MemoryKind::kDevice) info.device = deviceOf(p);
    return info;
  }
  unsigned type = 0;
  int ordinal = -1;
  int attributes[] = {kAttrMemoryType, kAttrDeviceOrdinal};
  void* data[] = {&type, &ordinal};
  auto fn = reinterpret_cast<CuResult (*)(unsigned, int*, void**, CuDevicePtr)>(pointerGetAttributes_);
  if (fn(2, attributes, data, reinterpret_cast<CuDevicePtr>(p)) != 0) return info;
  if (type == kMemTypeDevice || type == kMemTypeArray) {
    info.kind = MemoryKind::kDevice;
    info.device = ordinal;
  } else if (type == kMemTypeHost) {
    info.kind = MemoryKind::kHostPinned;
  }
  return info;
}

int CudaDriver::deviceOf(const void* p) const {
  if (memoryKind(p) != MemoryKind::kDevice) return -1;
  int ordinal = -1;
  auto fn = reinterpret_cast<CuResult (*)(void*, int, CuDevicePtr)>(pointerGetAttribute_);
  if (fn(&ordinal, kAttrDeviceOrdinal, reinterpret_cast<CuDevicePtr>(p)) != 0) return -1;
  return ordinal;
}

bool CudaDriver::streamInCurrentContext(cudaStream_t stream) const {
  // NULL, cudaStreamLegacy (1) and cudaStreamPerThread (2) are valid in any context.
  if (stream == nullptr || reinterpret_cast<uintptr_t>(stream) <= 2 || streamGetCtx_ == nullptr) return true;
  void* streamCtx = nullptr;
  void* current = nullptr;
  if (reinterpret_cast<CuResult (*)(void*, void**)>(streamGetCtx_)(stream, &streamCtx) != 0) return false;
  if (reinterpret_cast<CuResult (*)(void**)>(ctxGetCurrent_)(&current) != 0) return true;  // cannot tell
  return current == nullptr || streamCtx == current;
}

int CudaDriver::streamDevice(cudaStream_t stream) const {
  if (stream == nullptr || reinterpret_cast<uintptr_t>(stream) <= 2) return -1;
  if (streamGetDevice_ == nullptr) return -2;
  int dev = -1;
  if (reinterpret_cast<CuResult (*)(void*, int*)>(streamGetDevice_)(stream, &dev) != 0) return -2;
  return dev;
}

Status CudaDriver::copyToHost(void* dst, const void* src, size_t bytes) const {
  auto fn = reinterpret_cast<CuResult (*)(void*, CuDevicePtr, size_t)>(memcpyDtoH_);
  return check(fn(dst, reinterpret_cast<CuDevicePtr>(src), bytes), "cuMemcpyDtoH");
}

Status CudaDriver::copyToDeviceOn(void* dst, const void* src, size_t bytes, cudaStream_t stream) const {
  auto fn = reinterpret_cast<CuResult (*)(CuDevicePtr, const void*, size_t, void*)>(memcpyHtoDAsync_);
  return check(fn(reinterpret_cast<CuDevicePtr>(dst), src, bytes, stream), "cuMemcpyHtoDAsync");
}

Result<cudaStream_t> CudaDriver::createStream() const {
  static auto* fn = reinterpret_cast<CuResult (*)(void**, unsigned)>(symbol("cuStreamCreate"));
  if (fn == nullptr) return internalError("the CUDA driver has no cuStreamCreate");
  void* stream = nullptr;
  TH_CHECK(check(fn(&stream, 1 /* CU_STREAM_NON_BLOCKING */), "cuStreamCreate"));
  return static_cast<cudaStream_t>(stream);
}

Status CudaDriver::destroyStream(cudaStream_t stream) const {
  static auto* fn = reinterpret_cast<CuResult (*)(void*)>(symbol("cuStreamDestroy_v2"));
  if (fn == nullptr) return internalError("the CUDA driver has no cuStreamDestroy_v2");
  return check(fn(stream), "cuStreamDestroy");
}

Status CudaDriver::copyToHostOn(void* dst, const void* src, size_t bytes, cudaStream_t stream) const {
  static auto* fn = reinterpret_cast<CuResult (*)(void*, CuDevicePtr, size_t, void*)>(symbol("cuMemcpyDtoHAsync_v2"));
  if (fn == nullptr) return internalError("the CUDA driver has no cuMemcpyDtoHAsync_v2");
  return check(fn(dst, reinterpret_cast<CuDevicePtr>(src), bytes, stream), "cuMemcpyDtoHAsync");
}

Status CudaDriver::synchronize(cudaStream_t stream) const {
  auto fn = reinterpret_cast<CuResult (*)(void*)>(streamSynchronize_);
  return check(fn(stream), "cuStreamSynchronize");
}

bool CudaDriver::isCapturing(cudaStream_t stream) const {
  if (streamIsCapturing_ == nullptr) return false;
  int status = 0;  // CU_STREAM_CAPTURE_STATUS_NONE
  auto fn = reinterpret_cast<CuResult (*)(void*, int*)>(streamIsCapturing_);
  if (fn(stream, &status) != 0) return false;
  return status != 0;
}

StreamCapture CudaDriver::captureState(cudaStream_t stream) const {
  StreamCapture c;
  c.stream = stream;
  int status = 0;  // CU_STREAM_CAPTURE_STATUS_NONE, _ACTIVE (1), _INVALIDATED (2)
  if (streamGetCaptureInfo_ != nullptr) {
    unsigned long long id = 0;
    void* graph = nullptr;
    auto fn = reinterpret_cast<CuResult (*)(void*, int*, unsigned long long*, void**, const void**, size_t*)>(
        streamGetCaptureInfo_);
    if (fn(stream, &status, &id, &graph, nullptr, nullptr) != 0) return c;
    c.id = id;
    c.graph = graph;
  } else if (streamIsCapturing_ != nullptr) {
    if (reinterpret_cast<CuResult (*)(void*, int*)>(streamIsCapturing_)(stream, &status) != 0) return c;
  }
  c.status = status == 1   ? StreamCapture::Status::kActive
             : status == 2 ? StreamCapture::Status::kInvalidated
                           : StreamCapture::Status::kNone;
  return c;
}

Result<void*> CudaDriver::alloc(size_t bytes) const {
  CuDevicePtr p = 0;
  auto fn = reinterpret_cast<CuResult (*)(CuDevicePtr*, size_t)>(memAlloc_);
  TH_CHECK(check(fn(&p, bytes), "cuMemAlloc"));
  return reinterpret_cast<void*>(p);
}

Status CudaDriver::withDevice(int dev, const std::function<Status()>& fn) const {
  if (dev < 0 || currentDevice() == dev) return fn();
  void* saved = nullptr;
  (void)reinterpret_cast<CuResult (*)(void**)>(ctxGetCurrent_)(&saved);
  TH_CHECK(useDevice(dev));
  Status s = fn();
  (void)reinterpret_cast<CuResult (*)(void*)>(ctxSetCurrent_)(saved);
  return s;
}

Result<void*> CudaDriver::allocOn(int dev, size_t bytes) const {
  void* p = nullptr;
  TH_CHECK(withDevice(dev, [&]() -> Status {
    TH_ASSIGN(p, alloc(bytes));
    return Status::ok();
  }));
  return p;
}

int CudaDriver::computeCapability(int dev) const {
  enum : int { kMajor = 75, kMinor = 76 };  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR/MINOR (cuda.h)
  auto fn = reinterpret_cast<CuResult (*)(int*, int, int)>(symbol("cuDeviceGetAttribute"));
  int major = 0, minor = 0;
  if (fn == nullptr || dev < 0 || fn(&major, kMajor, dev) != 0 || fn(&minor, kMinor, dev) != 0 || major <= 0)
    return -1;
  return major * 10 + minor;
}

std::string CudaDriver::pciBusId(int dev) const {
  auto fn = reinterpret_cast<CuResult (*)(char*, int, int)>(symbol("cuDeviceGetPCIBusId"));
  char id[64] = {0};
  if (fn == nullptr || dev < 0 || fn(id, sizeof(id) - 1, dev) != 0) return "";
  return id;
}

Status CudaDriver::free(void* p) const {
  auto fn = reinterpret_cast<CuResult (*)(CuDevicePtr)>(memFree_);
  return check(fn(reinterpret_cast<CuDevicePtr>(p)), "cuMemFree");
}

Result<CudaDriver::IpcHandle> CudaDriver::ipcExport(void* base) const {
  if (!hasIpc()) return Status(ncclUnhandledCudaError, "this CUDA driver has no IPC entry points");
  IpcHandle h{};
  auto fn = reinterpret_cast<CuResult (*)(IpcHandle*, CuDevicePtr)>(ipcGetMemHandle_);
  TH_CHECK(check(fn(&h, reinterpret_cast<CuDevicePtr>(base)), "cuIpcGetMemHandle"));
  return h;
}

Status CudaDriver::allocationRange(const void* p, void** base, size_t* bytes) const {
  if (memGetAddressRange_ == nullptr)
    return Status(ncclUnhandledCudaError, "this CUDA driver has no cuMemGetAddressRange");
  CuDevicePtr b = 0;
  size_t n = 0;
  auto fn = reinterpret_cast<CuResult (*)(CuDevicePtr*, size_t*, CuDevicePtr)>(memGetAddressRange_);
  TH_CHECK(check(fn(&b, &n, reinterpret_cast<CuDevicePtr>(p)), "cuMemGetAddressRange"));
  *base = reinterpret_cast<void*>(b);
  *bytes = n;
  return Status::ok();
}

Result<void*> CudaDriver::ipcOpen(const IpcHandle& handle) const {
  if (!hasIpc()) return Status(ncclUnhandledCudaError, "this CUDA driver has no IPC entry points");
  CuDevicePtr p = 0;
  constexpr unsigned kLazyEnablePeerAccess = 1;  // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
  auto fn = reinterpret_cast<CuResult (*)(CuDevicePtr*, IpcHandle, unsigned)>(ipcOpenMemHandle_);
  TH_CHECK(check(fn(&p, handle, kLazyEnablePeerAccess), "cuIpcOpenMemHandle"));
  return reinterpret_cast<void*>(p);
}

Status CudaDriver::ipcClose(void* mapped) const {
  if (!hasIpc()) return Status(ncclUnhandledCudaError, "this CUDA driver has no IPC entry points");
  auto fn = reinterpret_cast<CuResult (*)(CuDevicePtr)>(ipcCloseMemHandle_);
  return check(fn(reinterpret_cast<CuDevicePtr>(mapped)), "cuIpcCloseMemHandle");
}

Result<bool> CudaDriver::hostRegister(void* p, size_t bytes) const {
  if (memHostRegister_ == nullptr || memHostUnregister_ == nullptr)
    return Status(ncclUnhandledCudaError, "this CUDA driver has no cuMemHostRegister/cuMemHostUnregister");
  constexpr unsigned kPortable = 0x1, kDeviceMap = 0x2;  // CU_MEMHOSTREGISTER_PORTABLE, _DEVICEMAP
  constexpr int kAlreadyRegistered = 712;                // CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
  int rc = reinterpret_cast<CuResult (*)(void*, size_t, unsigned)>(memHostRegister_)(p, bytes, kPortable | kDeviceMap);
  if (rc == kAlreadyRegistered) return false;
  TH_CHECK(check(rc, "cuMemHostRegister"));
  return true;
}

Status CudaDriver::hostUnregister(void* p) const {
  if (memHostUnregister_ == nullptr) return Status(ncclUnhandledCudaError, "this CUDA driver has no cuMemHostUnregister");
  constexpr int kDeinitialized = 4;  // CUDA_ERROR_DEINITIALIZED: the process is exiting; nothing is pinned any more
  int rc = reinterpret_cast<CuResult (*)(void*)>(memHostUnregister_)(p);
  return check(rc == kDeinitialized ? 0 : rc, "cuMemHostUnregister");
}

// The primary context of `dev`, retained once per device for the life of the
// process (as the CUDA runtime keeps it).
Result<void*> CudaDriver::primaryContext(int dev) const {
  if (deviceGet_ == nullptr || primaryCtxRetain_ == nullptr)
    return Status(ncclUnhandledCudaError, "the CUDA driver has no cuDevicePrimaryCtxRetain");
  static std::mutex mu;
  static void* retained[kMaxDevices] = {};
  if (dev < 0 || dev >= kMaxDevices) return invalidArgument("CUDA device %d is out of range", dev);
  std::lock_guard<std::mutex> lock(mu);
  if (retained[dev] == nullptr) {
    int handle = 0;
    TH_CHECK(check(reinterpret_cast<CuResult (*)(int*, int)>(deviceGet_)(&handle, dev), "cuDeviceGet"));
    TH_CHECK(check(reinterpret_cast<CuResult (*)(void**, int)>(primaryCtxRetain_)(&retained[dev], handle),
                   "cuDevicePrimaryCtxRetain"));
  }
  return retained[dev];
}

Status CudaDriver::useDevice(int dev) const {
  if (currentDevice() == dev) return Status::ok();
  if (ctxSetCurrent_ == nullptr)
    return Status(ncclUnhandledCudaError, "the CUDA driver has no cuDevicePrimaryCtxRetain/cuCtxSetCurrent");
  void* ctx = nullptr;
  TH_ASSIGN(ctx, primaryContext(dev));
  return check(reinterpret_cast<CuResult (*)(void*)>(ctxSetCurrent_)(ctx), "cuCtxSetCurrent");
}

Status CudaDriver::enablePeerAccess(int peer) const {
  const int self = currentDevice();
  if (self < 0) return invalidUsage("no CUDA context is current on the calling thread");
  if (self == peer) return Status::ok();
  if (deviceCanAccessPeer_ == nullptr || ctxEnablePeerAccess_ == nullptr)
    return Status(ncclUnhandledCudaError, "the CUDA driver has no cuDeviceCanAccessPeer/cuCtxEnablePeerAccess");
  int can = 0;
  TH_CHECK(check(reinterpret_cast<CuResult (*)(int*, int, int)>(deviceCanAccessPeer_)(&can, self, peer),
                 "cuDeviceCanAccessPeer"));
  if (can == 0) return invalidUsage("CUDA device %d cannot access device %d's memory (no peer access)", self, peer);
  void* ctx = nullptr;
  TH_ASSIGN(ctx, primaryContext(peer));
  constexpr int kAlreadyEnabled = 704;  // CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
  int rc = reinterpret_cast<CuResult (*)(void*, unsigned)>(ctxEnablePeerAccess_)(ctx, 0);
  if (rc == kAlreadyEnabled) return Status::ok();
  return check(rc, "cuCtxEnablePeerAccess");
}

int CudaDriver::deviceCount() const {
  int n = 0;
  if (deviceGetCount_ == nullptr || reinterpret_cast<CuResult (*)(int*)>(deviceGetCount_)(&n) != 0) return -1;
  return n;
}

int CudaDriver::currentDevice() const {
  void* ctx = nullptr;
  if (reinterpret_cast<CuResult (*)(void**)>(ctxGetCurrent_)(&ctx) != 0 || ctx == nullptr) return -1;
  int dev = -1;
  if (reinterpret_cast<CuResult (*)(int*)>(ctxGetDevice_)(&dev) != 0) return -1;
  return dev;
}

const char* memoryKindName(MemoryKind k) {
  switch (k) {
    case MemoryKind::kHost: return "host";
    case MemoryKind::kHostPinned: return "pinned host";
    case MemoryKind::kDevice: return "device";
  }
  return "unknown";
}

}  // namespace theseus::device
