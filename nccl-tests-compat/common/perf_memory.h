// Communication buffers of one rank.
//
// Host mode (no GPU, or --host): ncclMemAlloc, which in Theseus' host mode
// returns shareable host memory that peers can map; --malloc (or a GPU being
// visible with --host, where ncclMemAlloc would return device memory) uses
// page-aligned malloc instead. CUDA mode: ncclMemAlloc (device memory) or
// cudaMalloc with --malloc. Host buffers are touched once at allocation so
// first-touch page faults stay out of the timings.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nccl.h"
#include "perf_status.h"

namespace theseus::perf {

enum class BufferKind : uint8_t { kHostNccl, kHostMalloc, kDeviceNccl, kDeviceCuda };

const char* bufferKindName(BufferKind kind);
bool isDeviceKind(BufferKind kind);

class Buffer {
 public:
  Buffer() = default;
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  // May be called inside ncclGroupStart/End (nccl-tests allocates in a group).
  static Status allocate(BufferKind kind, size_t bytes, Buffer* out);
  Status release();

  char* data() const { return static_cast<char*>(ptr_); }
  size_t size() const { return bytes_; }
  bool onDevice() const { return isDeviceKind(kind_); }

  // Device buffers copy in `stream`'s order and are complete on return.
  Status upload(size_t offset, const void* src, size_t bytes, cudaStream_t stream);
  Status download(size_t offset, void* dst, size_t bytes, cudaStream_t stream) const;

 private:
  BufferKind kind_ = BufferKind::kHostMalloc;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace theseus::perf
