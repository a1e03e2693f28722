// Kernel tables behind exec/reduce.h (internal to exec/ and its tests).
//
// The reduction kernels are compiled once per instruction set from the same
// source (reduce_kernel_body.h): a baseline x86-64/SSE2 ("generic") set, and
// an AVX2+F16C set used when the CPU supports it. Each set is a table indexed
// by (operation, datatype), built once; reduce.cc picks one table at first use
// (THESEUS_REDUCE_ISA can force "generic") so a call costs one indirect jump,
// never a switch per element. Both sets compute bit-identical results (the
// tests run every kernel of every available set against one reference).
#pragma once

#include <cstddef>
#include <cstdint>

#include "exec/reduce.h"

namespace theseus::exec::kernels {

// The pre-multiplier of a PreMulSum, already converted to the element type:
// `f` for float, half, bfloat16 and fp8 (rounded to that type), `d` for
// double, `u` (two's complement bits) for the integer types.
struct ScaleArg {
  float f = 1.0f;
  double d = 1.0;
  uint64_t u = 1;
};

// dst[i] = a[i] op b[i], or scale(a[i]) op b[i] in the *ScaleA tables.
using BinaryFn = void (*)(void* dst, const void* a, const void* b, size_t n, const ScaleArg& s);
// dst[i] = scale(src[i]).
using UnaryFn = void (*)(void* dst, const void* src, size_t n, const ScaleArg& s);
// dst[i] = dst[i] / divisor (divisor >= 1).
using DivideFn = void (*)(void* dst, size_t n, uint32_t divisor);

constexpr int kNumKinds = 4;  // RedKind::kSum .. kMin

struct KernelTable {
  const char* isa = nullptr;  // "generic" or "avx2+f16c"
  BinaryFn combine[kNumKinds][ncclNumTypes] = {};
  BinaryFn combineScaleA[kNumKinds][ncclNumTypes] = {};
  UnaryFn scale[ncclNumTypes] = {};
  DivideFn divide[ncclNumTypes] = {};
};

// Baseline kernels: always available.
const KernelTable& genericKernels();
// AVX2+F16C kernels, or nullptr when this CPU (or OS) does not support them.
const KernelTable* avx2Kernels();
// The table reduce.h's functions use, chosen once per process.
const KernelTable& activeKernels();

// The scale argument for `r` (1 when !r.preMul), converted to r.type.
ScaleArg scaleArgFor(const Reduction& r);

}  // namespace theseus::exec::kernels
