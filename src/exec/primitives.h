// Primitives: the memory movement and reduction an executor's steps are made
// of. This table is the whole difference between executors for different
// memory kinds: the progress engine (progress.h), the plans, the step logic
// (step_ops.h) and the flag protocol are shared; only how bytes are copied
// and combined changes (host: memcpy and the reduction kernels of reduce.h;
// the CUDA executor: device copies and kernels).
//
// Every function works on contiguous ranges, dst may alias a source exactly,
// never partially, and counts are elements of the reduction's type (bytes
// for copy). `accessible` says which memory kinds the functions may touch:
// an executor refuses plans with buffers or connections outside it, so a
// host primitive never dereferences device memory.
#pragma once

#include <cstddef>

#include "device/memory_kind.h"
#include "exec/reduce.h"

namespace theseus::exec {

struct Primitives {
  const char* name = nullptr;             // "host"
  device::MemoryKindMask accessible = 0;  // memory kinds these functions may read and write
  void (*copy)(void* dst, const void* src, size_t bytes) = nullptr;
  // dst = a (op) b
  void (*reduce)(const Reduction& r, void* dst, const void* a, const void* b, size_t n) = nullptr;
  // dst = scale(a) (op) b, where a is this rank's raw input
  void (*reduceScaleA)(const Reduction& r, void* dst, const void* a, const void* b, size_t n) = nullptr;
  // dst = scale(src)
  void (*scaleCopy)(const Reduction& r, void* dst, const void* src, size_t n) = nullptr;
  // dst = dst / divisor (integer average)
  void (*divide)(const Reduction& r, void* dst, size_t n) = nullptr;
};

// memcpy and the host reduction kernels (reduce.h); host and pinned host memory.
const Primitives& hostPrimitives();

}  // namespace theseus::exec
