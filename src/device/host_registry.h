// Host memory the GPU reaches: ranges of shared or private host memory
// registered with the CUDA driver (page-locked and mapped, cuMemHostRegister),
// process-wide, each until the owner of the memory releases it.
//
// Why owners release: the driver knows a registration by its virtual address.
// Memory unmapped or freed while registered stays pinned for the rest of the
// process, and a new mapping that reuses the address (the next communicator's
// shared-memory segment, the next proxy ring) would be taken as registered:
// its kernels would reach the old pages, hang on them or read stale data. So
// the executor registers through registerHostRange, and every owner of memory
// an executor may register (transport/shm_segment.h's segments, the FIFO
// proxy's rings) calls releaseHostRange before it unmaps or frees that memory.
// A release costs one atomic load while nothing is registered, so host-only
// processes pay nothing.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace theseus::device {

// Makes [base, base + bytes) reachable by the GPU, with `cudaDev`'s primary context current
// (cudaDev < 0: the calling thread's context). Registered once from `base`: a later call for more
// of the same memory (a FIFO with host slots in a segment first registered for its control area)
// registers only the rest, never again what kernels may be using. No-op for a null or empty range.
Status registerHostRange(int cudaDev, void* base, size_t bytes);

// Before [base, base + bytes) is unmapped or freed: unregisters every range registered through
// registerHostRange that overlaps it. No GPU work may use the memory any more.
void releaseHostRange(const void* base, size_t bytes);

// How many registered ranges were released so far: while it stays the same, every range a caller saw
// registered still is (the CUDA executor skips registering what it registered before).
uint64_t hostRegistryReleases();

// Bytes registered through registerHostRange and not yet released (tests, diagnostics).
size_t registeredHostBytes();

}  // namespace theseus::device
