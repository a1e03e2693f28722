// Where a buffer lives, as the executors and transports see it.
//
// Every buffer the collective path touches carries one of these instead of
// being an implicit host pointer: the engine classifies the user's buffers
// once per group (CudaDriver::memoryKind), transports say what their slots
// are, and each executor states which kinds its primitives can read and
// write (exec/primitives.h).
#pragma once

#include <cstdint>

namespace theseus::device {

enum class MemoryKind : uint8_t {
  kHost,        // pageable or shared host memory: the CPU reads and writes it directly
  kHostPinned,  // page-locked host memory mapped into a device's address space (cudaHostAlloc, cudaHostRegister)
  kDevice,      // device memory (cudaMalloc, cuMem*, ncclMemAlloc on a GPU): the CPU cannot dereference it
};

const char* memoryKindName(MemoryKind k);  // "host", "pinned host", "device"

// True when the CPU may dereference memory of this kind.
inline bool hostAccessible(MemoryKind k) { return k != MemoryKind::kDevice; }

// A set of kinds (bit per kind), e.g. what a set of primitives can access.
using MemoryKindMask = uint8_t;
inline constexpr MemoryKindMask maskOf(MemoryKind k) { return static_cast<MemoryKindMask>(1u << static_cast<int>(k)); }
inline constexpr MemoryKindMask kHostAccessibleKinds = maskOf(MemoryKind::kHost) | maskOf(MemoryKind::kHostPinned);

}  // namespace theseus::device
