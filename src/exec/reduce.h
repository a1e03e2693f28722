// Host reduction kernels for every NCCL datatype and operation.
//
// All kernels are elementwise over contiguous arrays and may be called with
// any alignment; dst may alias either input exactly (in-place accumulate),
// never partially. 16- and 8-bit floating types compute in float and round to
// nearest even on every store (float has at least 2p+2 bits for half,
// bfloat16 and both fp8 formats, so this equals native arithmetic with correct
// rounding). fp8 e4m3 ("fn") saturates to +-448 (it has no infinity; an
// infinite float also becomes +-448); e5m2 overflows to infinity. Note that
// CUDA's __nv_fp8_e5m2 constructors saturate instead; Theseus keeps IEEE
// overflow for e5m2. Conversions never flush subnormals; every NaN produced
// is quiet and keeps its sign.
//
// Operations:
//  * sum, prod: integers wrap (two's complement, as on the GPU); floating
//    types follow IEEE arithmetic.
//  * max, min on integers compare as the element type. On floating types they
//    are IEEE 754 maxNum/minNum, like the fmaxf/fminf NCCL's device code uses:
//    a NaN operand is ignored unless both operands are NaN (then the result is
//    a NaN); max(+0, -0) = +0 and min(+0, -0) = -0. These rules make max/min
//    commutative and associative, so every schedule yields identical bits.
//  * PreMulSum and floating avg are sums whose *inputs* are first multiplied by
//    a scalar (1/nranks for avg): the executor applies `scale` exactly once to
//    each rank's own input when it first reads it (scaleCopy, or reduce with
//    scaleA), so every contribution is scaled once whatever the schedule.
//    scale(x) = x * s computed in the compute type and rounded to the element
//    type, where s is `scalar` converted to the element type (through float for
//    the 16/8-bit types); for integers it is a wrapping multiply.
//  * integer avg is a sum followed by a division by nranks (divide()), which
//    truncates toward zero. divide() on floating types divides and rounds.
//
// Which machine code runs: kernels exist for baseline x86-64 and for
// AVX2+F16C, chosen once per process from cpuid (THESEUS_REDUCE_ISA=generic
// forces the baseline); both give bit-identical results.
//
// The kernels trust their Reduction (they run on every byte of every
// collective): build it with builtinReduction()/preMulSumReduction() or check
// it with checkReduction(). An out-of-range type or kind makes a kernel leave
// dst untouched and log a warning.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "device/memory_kind.h"
#include "nccl.h"

namespace theseus::exec {

enum class RedKind : uint8_t { kSum, kProd, kMax, kMin };

// A resolved reduction: what to combine and whether inputs are pre-scaled.
struct Reduction {
  RedKind kind = RedKind::kSum;
  ncclDataType_t type = ncclFloat32;
  bool preMul = false;     // inputs are multiplied by `scalar` when first read
  double scalar = 1.0;     // (float types: the scalar in double; converted per type)
  bool divideAtEnd = false;  // integer avg: divide results by `divisor`
  uint32_t divisor = 1;
  // A PreMulSum created with ncclScalarDevice: its scalar is read from here
  // when the operation runs (after the stream work queued before the call),
  // by the executor, with resolveScalar(); null once resolved or when unused.
  const void* scalarSource = nullptr;
  device::MemoryKind scalarMemory = device::MemoryKind::kHost;
};

size_t typeSize(ncclDataType_t type);        // 0 for an invalid type
bool isFloatType(ncclDataType_t type);
const char* typeName(ncclDataType_t type);   // "float", "half", "bfloat16", "f8e4m3", ...

// The Reduction for a builtin op (ncclSum..ncclAvg) over `nranks` ranks: avg
// is a PreMulSum by 1/nranks on floating types and a sum then divide() on
// integers. Errors: invalid op/type, nranks < 1.
Result<Reduction> builtinReduction(ncclRedOp_t op, ncclDataType_t type, int nranks);
// A PreMulSum whose scalar is one element of `type` in host memory at
// `scalar`. Integer scalars must be exactly representable as a double
// (|s| <= 2^53); any floating value is accepted (NCCL multiplies by whatever
// it is given, inf and NaN included).
Result<Reduction> preMulSumReduction(ncclDataType_t type, const void* scalar);
// A PreMulSum whose scalar lives at `scalar` (memory of kind `where`) and is
// read when the operation runs (ncclScalarDevice). Errors: invalid type, NULL.
Result<Reduction> deferredPreMulSum(ncclDataType_t type, const void* scalar, device::MemoryKind where);
// Resolves a deferred scalar from `value`, a host copy of its bytes, with the
// checks of preMulSumReduction (the 2^53 rule for integers).
Status resolveScalar(Reduction& r, const void* value);
// OK when the kernels accept `r`; otherwise a message naming the bad field.
Status checkReduction(const Reduction& r);
// The kernel set in use: "avx2+f16c" or "generic".
const char* reduceKernelIsa();

// dst[i] = a[i] (op) b[i] for n elements.
void reduce(const Reduction& r, void* dst, const void* a, const void* b, size_t n);
// dst[i] = scale(a[i]) (op) b[i]: `a` is this rank's raw input (pre-multiplied when r.preMul).
void reduceScaleA(const Reduction& r, void* dst, const void* a, const void* b, size_t n);
// dst[i] = scale(src[i]) (a copy when !r.preMul; dst may equal src).
void scaleCopy(const Reduction& r, void* dst, const void* src, size_t n);
// dst[i] = dst[i] / r.divisor (integer avg).
void divide(const Reduction& r, void* dst, size_t n);

// Conversions with round-to-nearest-even (exposed for tests and the harness).
uint16_t floatToHalf(float f);
float halfToFloat(uint16_t h);
uint16_t floatToBf16(float f);
float bf16ToFloat(uint16_t b);
uint8_t floatToFp8E4M3(float f);
float fp8E4M3ToFloat(uint8_t v);
uint8_t floatToFp8E5M2(float f);
float fp8E5M2ToFloat(uint8_t v);

}  // namespace theseus::exec
