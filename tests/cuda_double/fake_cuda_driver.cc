// The CUDA driver API of the test double: what Theseus' driver leaf
// (src/device/cuda_driver.cc) looks up with dlsym, over the same state as the
// runtime half (fake_cuda_core.h). CUresult values are plain ints here.
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "fake_cuda_core.h"

#define FAKE_API extern "C" __attribute__((visibility("default")))

namespace {
enum : int { kSuccess = 0, kInvalidValue = 1, kNotInitialized = 3, kStreamCaptureUnsupported = 900 };
enum : int { kAttrMemoryType = 2, kAttrDeviceOrdinal = 9, kAttrLegacyIpcCapable = 10 };
enum : unsigned { kMemTypeHost = 1, kMemTypeDevice = 2 };

int unsafe() { return fakecuda::checkUnsafeCall() == cudaSuccess ? kSuccess : kStreamCaptureUnsupported; }
}  // namespace

FAKE_API int cuInit(unsigned int) { FAKE_API_CALL(); return kSuccess; }

FAKE_API int cuGetErrorName(int rc, const char** name) {
  FAKE_API_CALL();
  switch (rc) {
    case kSuccess: *name = "CUDA_SUCCESS"; break;
    case kInvalidValue: *name = "CUDA_ERROR_INVALID_VALUE"; break;
    case kStreamCaptureUnsupported: *name = "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"; break;
    default: *name = "CUDA_ERROR_UNKNOWN (test double)";
  }
  return kSuccess;
}

FAKE_API int cuPointerGetAttribute(void* data, int attribute, unsigned long long ptr) {
  FAKE_API_CALL();
  fakecuda::Allocation a;
  if (!fakecuda::findAllocation(reinterpret_cast<const void*>(ptr), &a)) return kInvalidValue;
  switch (attribute) {
    case kAttrMemoryType:
      *static_cast<unsigned*>(data) = a.kind == fakecuda::Kind::kDevice ? kMemTypeDevice : kMemTypeHost;
      return kSuccess;
    case kAttrDeviceOrdinal:
      *static_cast<int*>(data) = a.device;
      return kSuccess;
    case kAttrLegacyIpcCapable:  // cudaMalloc/cuMemAlloc memory; not VMM mappings or IPC imports
      *static_cast<int*>(data) = a.kind == fakecuda::Kind::kDevice && !a.vmm && !a.imported ? 1 : 0;
      return kSuccess;
    default:
      return kInvalidValue;
  }
}

// Unlike the singular query, memory CUDA does not know is no error: its attributes read as zero (MEMORY_TYPE 0)
// and -2 for the device ordinal, as the driver documents.
FAKE_API int cuPointerGetAttributes(unsigned count, int* attributes, void** data, unsigned long long ptr) {
  FAKE_API_CALL();
  fakecuda::Allocation a;
  const bool known = fakecuda::findAllocation(reinterpret_cast<const void*>(ptr), &a);
  for (unsigned i = 0; i < count; ++i) {
    switch (attributes[i]) {
      case kAttrMemoryType:
        *static_cast<unsigned*>(data[i]) =
            !known ? 0u : static_cast<unsigned>(a.kind == fakecuda::Kind::kDevice ? kMemTypeDevice : kMemTypeHost);
        break;
      case kAttrDeviceOrdinal:
        *static_cast<int*>(data[i]) = known ? a.device : -2;
        break;
      default:
        return kInvalidValue;
    }
  }
  return kSuccess;
}

FAKE_API int cuMemcpyDtoH_v2(void* dst, unsigned long long src, size_t bytes) {
  FAKE_API_CALL();
  if (int e = unsafe(); e != kSuccess) return e;
  fakecuda::drainAll();
  memcpy(dst, reinterpret_cast<const void*>(src), bytes);
  return kSuccess;
}

// Queued on the stream like CUDA's: from pageable memory the source is staged when called (the caller may reuse
// it at once) and lands in device memory when the stream gets there, i.e. after the caller's earlier work on it.
FAKE_API int cuMemcpyHtoDAsync_v2(unsigned long long dst, const void* src, size_t bytes, void* stream) {
  FAKE_API_CALL();
  CUstream_st* s = fakecuda::streamOf(static_cast<cudaStream_t>(stream));
  {
    std::lock_guard<std::mutex> lock(s->mu);  // the staged copy runs once: not for a graph (Theseus never captures it)
    if (s->capture != cudaStreamCaptureStatusNone) return kStreamCaptureUnsupported;
  }
  struct Staged {
    void* dst;
    std::vector<char> data;
  };
  auto* staged = new Staged{reinterpret_cast<void*>(dst), std::vector<char>(static_cast<const char*>(src),
                                                                             static_cast<const char*>(src) + bytes)};
  fakecuda::Work w{.kind = fakecuda::Work::kHostFn, .dst = staged};
  w.hostFn = [](void* arg) {
    auto* st = static_cast<Staged*>(arg);
    memcpy(st->dst, st->data.data(), st->data.size());
    delete st;
  };
  int rc = static_cast<int>(fakecuda::enqueue(s, w));
  if (rc != kSuccess) delete staged;
  return rc;
}

// Queued on the stream; the caller synchronises it before it reads `dst` (Theseus' proxy does).
FAKE_API int cuMemcpyDtoHAsync_v2(void* dst, unsigned long long src, size_t bytes, void* stream) {
  FAKE_API_CALL();
  CUstream_st* s = fakecuda::streamOf(static_cast<cudaStream_t>(stream));
  {
    std::lock_guard<std::mutex> lock(s->mu);
    if (s->capture != cudaStreamCaptureStatusNone) return kStreamCaptureUnsupported;
  }
  struct Copy {
    void* dst;
    const void* src;
    size_t bytes;
  };
  auto* c = new Copy{dst, reinterpret_cast<const void*>(src), bytes};
  fakecuda::Work w{.kind = fakecuda::Work::kHostFn, .dst = c};
  w.hostFn = [](void* arg) {
    auto* cp = static_cast<Copy*>(arg);
    memcpy(cp->dst, cp->src, cp->bytes);
    delete cp;
  };
  int rc = static_cast<int>(fakecuda::enqueue(s, w));
  if (rc != kSuccess) delete c;
  return rc;
}

// The driver's twins of cudaStreamCreateWithFlags and cudaStreamDestroy.
FAKE_API int cuStreamCreate(void** stream, unsigned flags) {
  FAKE_API_CALL();
  return static_cast<int>(cudaStreamCreateWithFlags(reinterpret_cast<cudaStream_t*>(stream), flags));
}

FAKE_API int cuStreamDestroy_v2(void* stream) {
  FAKE_API_CALL();
  return static_cast<int>(cudaStreamDestroy(static_cast<cudaStream_t>(stream)));
}

FAKE_API int cuStreamSynchronize(void* stream) {
  FAKE_API_CALL();
  if (int e = unsafe(); e != kSuccess) return e;
  fakecuda::drain(fakecuda::streamOf(static_cast<cudaStream_t>(stream)));
  return kSuccess;
}

FAKE_API int cuStreamIsCapturing(void* stream, int* status) {
  FAKE_API_CALL();
  CUstream_st* s = fakecuda::streamOf(static_cast<cudaStream_t>(stream));
  std::lock_guard<std::mutex> lock(s->mu);
  *status = static_cast<int>(s->capture);  // CU_STREAM_CAPTURE_STATUS_* have the runtime's values
  return kSuccess;
}

FAKE_API int cuStreamGetCaptureInfo_v2(void* stream, int* status, unsigned long long* id, void** graph,
                                       const void** deps, size_t* ndeps) {
  FAKE_API_CALL();
  CUstream_st* s = fakecuda::streamOf(static_cast<cudaStream_t>(stream));
  std::lock_guard<std::mutex> lock(s->mu);
  const bool active = s->capture == cudaStreamCaptureStatusActive;
  *status = static_cast<int>(s->capture);
  if (id != nullptr) *id = active ? s->captureId : 0;
  if (graph != nullptr) *graph = active ? s->graph : nullptr;
  if (deps != nullptr) *deps = nullptr;
  if (ndeps != nullptr) *ndeps = 0;
  return kSuccess;
}

FAKE_API int cuStreamGetCtx(void* stream, void** ctx) {
  FAKE_API_CALL();
  *ctx = fakecuda::contextOf(fakecuda::streamOf(static_cast<cudaStream_t>(stream))->device);
  return kSuccess;
}

// As on an H200 with driver 580 (tests/gpu/capture_probe.cu): a capturing stream is refused and its capture
// invalidated.
FAKE_API int cuStreamGetDevice(void* stream, int* device) {
  FAKE_API_CALL();
  auto s = static_cast<cudaStream_t>(stream);
  if (fakecuda::isExplicitStream(s)) {
    CUstream_st* st = fakecuda::streamOf(s);
    std::lock_guard<std::mutex> lock(st->mu);
    if (st->capture == cudaStreamCaptureStatusActive) {
      st->capture = cudaStreamCaptureStatusInvalidated;
      return kStreamCaptureUnsupported;
    }
  }
  *device = fakecuda::isExplicitStream(s) ? s->device : fakecuda::currentDevice();
  return kSuccess;
}

// Every pair of distinct devices can reach each other; access is enabled per (current device, peer).
FAKE_API int cuDeviceCanAccessPeer(int* can, int device, int peer) {
  FAKE_API_CALL();
  if (device < 0 || peer < 0 || device >= fakecuda::deviceCount() || peer >= fakecuda::deviceCount()) return 101;
  *can = device != peer ? 1 : 0;
  return kSuccess;
}

FAKE_API int cuCtxEnablePeerAccess(void* peerCtx, unsigned int) {
  FAKE_API_CALL();
  if (!fakecuda::contextCurrent()) return 201;  // CUDA_ERROR_INVALID_CONTEXT
  int peer = -1;
  for (int d = 0; d < fakecuda::deviceCount(); ++d)
    if (fakecuda::contextOf(d) == peerCtx) peer = d;
  if (peer < 0) return 201;
  if (peer == fakecuda::currentDevice()) return 1;  // CUDA_ERROR_INVALID_VALUE
  static std::mutex mu;
  static std::set<std::pair<int, int>> enabled;
  std::lock_guard<std::mutex> lock(mu);
  if (!enabled.insert({fakecuda::currentDevice(), peer}).second) return 704;  // CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
  return kSuccess;
}

FAKE_API int cuMemAlloc_v2(unsigned long long* p, size_t bytes) {
  FAKE_API_CALL();
  if (int e = unsafe(); e != kSuccess) return e;
  void* m = fakecuda::allocate(bytes, fakecuda::Kind::kDevice, fakecuda::currentDevice());
  if (m == nullptr) return 2;  // CUDA_ERROR_OUT_OF_MEMORY
  *p = reinterpret_cast<unsigned long long>(m);
  return kSuccess;
}

FAKE_API int cuMemFree_v2(unsigned long long p) {
  FAKE_API_CALL();
  if (int e = unsafe(); e != kSuccess) return e;
  fakecuda::drainAll();
  return fakecuda::release(reinterpret_cast<void*>(p), fakecuda::Kind::kDevice) == cudaSuccess ? kSuccess
                                                                                                  : kInvalidValue;
}

// Host memory registered for the device (page-locked, mapped): needs a current context, as the driver does.
FAKE_API int cuMemHostRegister_v2(void* p, size_t bytes, unsigned int) {
  FAKE_API_CALL();
  if (int e = unsafe(); e != kSuccess) return e;
  if (!fakecuda::contextCurrent()) return 201;  // CUDA_ERROR_INVALID_CONTEXT
  cudaError_t e = fakecuda::registerHost(p, bytes);
  if (e == cudaErrorHostMemoryAlreadyRegistered) return 712;
  return e == cudaSuccess ? kSuccess : kInvalidValue;
}

FAKE_API int cuMemHostUnregister(void* p) {
  FAKE_API_CALL();
  if (int e = unsafe(); e != kSuccess) return e;
  if (!fakecuda::contextCurrent()) return 201;
  return fakecuda::unregisterHost(p) == cudaSuccess ? kSuccess : 713;  // CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED
}

FAKE_API int cuMemGetAddressRange_v2(unsigned long long* base, size_t* bytes, unsigned long long p) {
  FAKE_API_CALL();
  fakecuda::Allocation a;
  if (!fakecuda::findAllocation(reinterpret_cast<const void*>(p), &a) || a.kind != fakecuda::Kind::kDevice)
    return kInvalidValue;
  if (base != nullptr) *base = a.base;
  if (bytes != nullptr) *bytes = a.bytes;
  return kSuccess;
}

FAKE_API int cuIpcGetMemHandle(void* handle, unsigned long long p) {
  FAKE_API_CALL();
  if (int e = unsafe(); e != kSuccess) return e;
  return fakecuda::ipcExport(reinterpret_cast<const void*>(p), static_cast<unsigned char*>(handle)) ? kSuccess
                                                                                                    : kInvalidValue;
}

// CUipcMemHandle is passed by value: 64 bytes.
struct FakeIpcHandle {
  unsigned char bytes[64];
};
FAKE_API int cuIpcOpenMemHandle_v2(unsigned long long* p, FakeIpcHandle handle, unsigned int) {
  FAKE_API_CALL();
  if (int e = unsafe(); e != kSuccess) return e;
  void* m = fakecuda::ipcOpen(handle.bytes, fakecuda::currentDevice());
  if (m == nullptr) return kInvalidValue;
  *p = reinterpret_cast<unsigned long long>(m);
  return kSuccess;
}

FAKE_API int cuIpcCloseMemHandle(unsigned long long p) {
  FAKE_API_CALL();
  if (int e = unsafe(); e != kSuccess) return e;
  return fakecuda::ipcClose(reinterpret_cast<void*>(p)) ? kSuccess : kInvalidValue;
}

FAKE_API int cuCtxGetCurrent(void** ctx) {
  FAKE_API_CALL();
  *ctx = fakecuda::contextCurrent() ? fakecuda::contextOf(fakecuda::currentDevice()) : nullptr;
  return kSuccess;
}

FAKE_API int cuCtxGetDevice(int* device) {
  FAKE_API_CALL();
  if (!fakecuda::contextCurrent()) return 201;  // CUDA_ERROR_INVALID_CONTEXT
  *device = fakecuda::currentDevice();
  return kSuccess;
}

// Devices are their ordinals; a device's primary context is contextOf(device).
FAKE_API int cuDeviceGet(int* device, int ordinal) {
  FAKE_API_CALL();
  if (ordinal < 0 || ordinal >= fakecuda::deviceCount()) return 101;  // CUDA_ERROR_INVALID_DEVICE
  *device = ordinal;
  return kSuccess;
}

// Every process sees the same devices at the same (made-up) PCI addresses: device d is 0000:(0x10 + d):00.0.
FAKE_API int cuDeviceGetPCIBusId(char* id, int len, int device) {
  FAKE_API_CALL();
  if (device < 0 || device >= fakecuda::deviceCount()) return 101;
  if (id == nullptr || len < 13) return 1;  // CUDA_ERROR_INVALID_VALUE
  snprintf(id, static_cast<size_t>(len), "0000:%02x:00.0", 0x10 + device);
  return kSuccess;
}

FAKE_API int cuDevicePrimaryCtxRetain(void** ctx, int device) {
  FAKE_API_CALL();
  if (device < 0 || device >= fakecuda::deviceCount()) return 101;
  *ctx = fakecuda::contextOf(device);
  return kSuccess;
}

FAKE_API int cuCtxSetCurrent(void* ctx) {
  FAKE_API_CALL();
  if (ctx == nullptr) {
    fakecuda::contextCurrent() = false;
    return kSuccess;
  }
  for (int d = 0; d < fakecuda::deviceCount(); ++d)
    if (fakecuda::contextOf(d) == ctx) {
      fakecuda::currentDevice() = d;
      fakecuda::contextCurrent() = true;
      return kSuccess;
    }
  return 201;  // CUDA_ERROR_INVALID_CONTEXT
}

FAKE_API int cuDeviceGetCount(int* n) {
  FAKE_API_CALL();
  *n = fakecuda::deviceCount();
  return kSuccess;
}
