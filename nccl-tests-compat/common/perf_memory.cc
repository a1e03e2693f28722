#include "perf_memory.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "nccl.h"
#include "perf_cuda.h"

namespace theseus::perf {

const char* bufferKindName(BufferKind kind) {
  switch (kind) {
    case BufferKind::kHostNccl: return "host memory (ncclMemAlloc)";
    case BufferKind::kHostMalloc: return "host memory (malloc)";
    case BufferKind::kDeviceNccl: return "device memory (ncclMemAlloc)";
    case BufferKind::kDeviceCuda: return "device memory (cudaMalloc)";
  }
  return "?";
}

bool isDeviceKind(BufferKind kind) { return kind == BufferKind::kDeviceNccl || kind == BufferKind::kDeviceCuda; }

Buffer::~Buffer() {
  Status s = release();
  if (!s.isOk()) fprintf(stderr, "warning: freeing a buffer: %s\n", s.message().c_str());
}

Buffer::Buffer(Buffer&& other) noexcept { *this = std::move(other); }

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    (void)release();
    kind_ = other.kind_;
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

Status Buffer::allocate(BufferKind kind, size_t bytes, Buffer* out) {
  Buffer b;
  b.kind_ = kind;
  b.bytes_ = bytes;
  const size_t allocBytes = bytes == 0 ? 1 : bytes;  // always a real, distinct pointer
  switch (kind) {
    case BufferKind::kHostNccl:
    case BufferKind::kDeviceNccl:
      PERF_NCCL(ncclMemAlloc(&b.ptr_, allocBytes));
      if (b.ptr_ == nullptr) return errorf(kExitError, "ncclMemAlloc(%zu) returned NULL", allocBytes);
      break;
    case BufferKind::kHostMalloc: {
      size_t rounded = (allocBytes + 4095) / 4096 * 4096;
      b.ptr_ = aligned_alloc(4096, rounded);
      if (b.ptr_ == nullptr) return errorf(kExitError, "cannot allocate %zu bytes of host memory", rounded);
      break;
    }
    case BufferKind::kDeviceCuda:
      PERF_CHECK(cuda::deviceAlloc(&b.ptr_, allocBytes));
      break;
  }
  if (!b.onDevice()) memset(b.ptr_, 0, allocBytes);
  *out = std::move(b);
  return Status::ok();
}

Status Buffer::release() {
  if (ptr_ == nullptr) return Status::ok();
  void* p = std::exchange(ptr_, nullptr);
  bytes_ = 0;
  switch (kind_) {
    case BufferKind::kHostNccl:
    case BufferKind::kDeviceNccl: PERF_NCCL(ncclMemFree(p)); break;
    case BufferKind::kHostMalloc: free(p); break;
    case BufferKind::kDeviceCuda: PERF_CHECK(cuda::deviceFree(p)); break;
  }
  return Status::ok();
}

Status Buffer::upload(size_t offset, const void* src, size_t bytes, cudaStream_t stream) {
  if (offset + bytes > bytes_)
    return errorf(kExitError, "upload of %zu bytes at %zu overflows a %zu-byte buffer", bytes, offset, bytes_);
  if (bytes == 0) return Status::ok();
  if (onDevice()) return cuda::copyToDevice(data() + offset, src, bytes, stream);
  memcpy(data() + offset, src, bytes);
  return Status::ok();
}

Status Buffer::download(size_t offset, void* dst, size_t bytes, cudaStream_t stream) const {
  if (offset + bytes > bytes_)
    return errorf(kExitError, "download of %zu bytes at %zu overflows a %zu-byte buffer", bytes, offset, bytes_);
  if (bytes == 0) return Status::ok();
  if (onDevice()) return cuda::copyToHost(dst, data() + offset, bytes, stream);
  memcpy(dst, data() + offset, bytes);
  return Status::ok();
}

}  // namespace theseus::perf
