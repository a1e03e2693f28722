// The CUDA driver: the one place Theseus talks to libcuda, a leaf every other
// module may use (it depends on common/ only).
//
// It is used through dlopen so that Theseus builds and runs without CUDA and
// never loads the driver into a CPU-only process: the driver is used only when
// the application already loaded it (PyTorch, nccl-tests). Symbols are looked
// up once, when the driver is first found; every call returns a Status with
// the driver's error name.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "common/status.h"
#include "device/memory_kind.h"
#include "device/stream_capture.h"
#include "nccl.h"

namespace theseus::device {

class CudaDriver {
 public:
  // The driver when the process has loaded it and it initialises, else nullptr.
  // A miss is remembered until the process loads another shared object, so a
  // process that loads CUDA later is seen then, and CPU-only processes pay one
  // cheap check per call.
  static const CudaDriver* get();

  // The calling thread's current CUDA device, or -1 when CUDA is not in use
  // (driver not loaded, or no current context). What NCCL records at init.
  static int callerDevice();
  // Devices visible to the process, or -1 when CUDA is not in use.
  static int visibleDevices();

  // Where `p` lives. Memory the driver does not know (plain malloc, shared
  // segments) is kHost; NULL is kHost.
  MemoryKind memoryKind(const void* p) const;
  // The CUDA device whose memory `p` is, or -1 when it is not device memory.
  int deviceOf(const void* p) const;
  // Both at once (one cuPointerGetAttributes on the enqueue path instead of three singular queries).
  struct MemoryInfo {
    MemoryKind kind = MemoryKind::kHost;
    int device = -1;  // for kDevice
  };
  MemoryInfo memoryInfo(const void* p) const;
  // True when `stream` belongs to the calling thread's current context (the
  // legacy and per-thread default streams always do).
  bool streamInCurrentContext(cudaStream_t stream) const;
  // The CUDA device `stream` belongs to (cuStreamGetDevice); -1 for the NULL,
  // legacy and per-thread streams (the current device's), -2 when the driver
  // cannot tell (older than CUDA 12.8).
  int streamDevice(cudaStream_t stream) const;
  // Lets the calling thread's context (this rank's device) reach device
  // `peer`'s memory (cuCtxEnablePeerAccess on `peer`'s primary context); an
  // error when the hardware cannot. Already enabled is fine.
  Status enablePeerAccess(int peer) const;
  // True when `p` is device memory the host cannot dereference directly.
  bool isDevicePointer(const void* p) const { return memoryKind(p) == MemoryKind::kDevice; }
  Status copyToHost(void* dst, const void* src, size_t bytes) const;
  // Host-to-device copy queued on `stream` (cuMemcpyHtoDAsync): ordered with the stream's work, complete once the
  // stream is synchronised. A plain cuMemcpyHtoD from pageable memory may return before its DMA lands, on the
  // legacy stream, which a non-blocking stream does not wait for.
  Status copyToDeviceOn(void* dst, const void* src, size_t bytes, cudaStream_t stream) const;
  // A stream of Theseus' own in the calling thread's current context that waits for no other stream
  // (CU_STREAM_NON_BLOCKING): a copy there never waits for the application's kernels, as one on the
  // legacy stream (cuMemcpyDtoH) may, and a kernel that waits for Theseus would then never finish.
  Result<cudaStream_t> createStream() const;
  Status destroyStream(cudaStream_t stream) const;
  // Device-to-host copy queued on `stream` (cuMemcpyDtoHAsync), complete once the stream is synchronised.
  Status copyToHostOn(void* dst, const void* src, size_t bytes, cudaStream_t stream) const;
  // Waits for the work queued on `stream` (the legacy default stream for NULL).
  Status synchronize(cudaStream_t stream) const;
  // True when `stream` is being captured into a CUDA graph.
  bool isCapturing(cudaStream_t stream) const;
  // Whether and into what `stream` is being captured, in one driver call
  // (cuStreamGetCaptureInfo; a driver without it: cuStreamIsCapturing, and no graph).
  StreamCapture captureState(cudaStream_t stream) const;
  Result<void*> alloc(size_t bytes) const;
  // Runs `fn` with device `dev`'s primary context current, whatever the calling thread has current,
  // and restores the thread's context after; dev < 0: as is. Memory allocated or IPC handles opened
  // there belong to that device's context.
  Status withDevice(int dev, const std::function<Status()>& fn) const;
  Result<void*> allocOn(int dev, size_t bytes) const;  // alloc() within withDevice(dev)
  // Device `dev`'s compute capability as major * 10 + minor (90: Hopper); -1 when the driver does not say.
  int computeCapability(int dev) const;
  // Device `dev`'s PCI bus id ("0000:4a:00.0": the same GPU in every process, whatever each one's device
  // numbering), or "" when the driver does not say.
  std::string pciBusId(int dev) const;
  Status free(void* p) const;
  // CUDA IPC for memory from alloc() (cuIpcGetMemHandle): a handle another
  // process opens (cuIpcOpenMemHandle, peer access enabled lazily) to reach the
  // same memory at an address of its own, until it closes it. Never within one
  // process (the driver refuses): ranks as threads share addresses anyway.
  struct IpcHandle {
    unsigned char bytes[64];
  };
  bool hasIpc() const { return ipcGetMemHandle_ != nullptr && ipcOpenMemHandle_ != nullptr && ipcCloseMemHandle_; }
  Result<IpcHandle> ipcExport(void* base) const;
  // The allocation (cuMemAlloc/cudaMalloc) that holds `p`: its base and size,
  // what an IPC handle names (cuMemGetAddressRange).
  Status allocationRange(const void* p, void** base, size_t* bytes) const;
  Result<void*> ipcOpen(const IpcHandle& handle) const;
  Status ipcClose(void* mapped) const;
  // Page-locks host memory [p, p + bytes) and maps it for the devices of every context
  // (cuMemHostRegister, portable and mapped), in the calling thread's current context. False when
  // the driver already had it registered: then it is not the caller's to unregister. Use
  // device/host_registry.h, which pairs every registration with its release.
  Result<bool> hostRegister(void* p, size_t bytes) const;
  // Undoes hostRegister from its base (cuMemHostUnregister), in the calling thread's context.
  Status hostUnregister(void* p) const;
  int currentDevice() const;  // -1 without a current context
  // Makes device `dev`'s primary context current on the calling thread (what
  // cudaSetDevice does), for Theseus's own threads that set up a communicator
  // recorded on `dev` (grouped initialisation runs each rank on a thread of its
  // own, as NCCL does). The primary context is retained once per device for the
  // life of the process, as the CUDA runtime keeps it. No-op when already current.
  Status useDevice(int dev) const;
  int deviceCount() const;    // -1 when the driver cannot tell

  // For the driver leaf's other files (vmm.cc): an entry point of the loaded driver (null when it has
  // none), and a driver result as a Status naming `what` and the driver's error name.
  void* symbol(const char* name) const;
  Status check(int rc, const char* what) const;

 private:
  CudaDriver() = default;
  using Fn = void*;
  Fn init_ = nullptr, pointerGetAttribute_ = nullptr, memcpyDtoH_ = nullptr, memcpyHtoDAsync_ = nullptr,
     streamSynchronize_ = nullptr, streamIsCapturing_ = nullptr, memAlloc_ = nullptr, memFree_ = nullptr,
     getErrorName_ = nullptr, ctxGetCurrent_ = nullptr, ctxGetDevice_ = nullptr, deviceGetCount_ = nullptr,
     streamGetCtx_ = nullptr, deviceGet_ = nullptr, primaryCtxRetain_ = nullptr,
     ctxSetCurrent_ = nullptr, ipcGetMemHandle_ = nullptr, ipcOpenMemHandle_ = nullptr, ipcCloseMemHandle_ = nullptr,
     memGetAddressRange_ = nullptr, streamGetDevice_ = nullptr, deviceCanAccessPeer_ = nullptr,
     ctxEnablePeerAccess_ = nullptr, pointerGetAttributes_ = nullptr, memHostRegister_ = nullptr,
     memHostUnregister_ = nullptr, streamGetCaptureInfo_ = nullptr;
  Result<void*> primaryContext(int dev) const;
  void* library_ = nullptr;  // the dlopen handle
  friend struct DriverLoader;
};

}  // namespace theseus::device
