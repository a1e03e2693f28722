// Host reduction kernels for every NCCL datatype and operation.
//
// All kernels are elementwise over contiguous arrays and may be called with
// any alignment; dst may alias either input exactly (in-place accumulate).
// 16- and 8-bit floating types compute in float and round to nearest even on
// every store (float has at least 2p+2 bits for half, bfloat16 and both fp8
// formats, so this equals native arithmetic with correct rounding). fp8 e4m3
// saturates to +-448 (it has no infinity); e5m2 overflows to infinity.
//
// Operations:
//  * sum, prod, max, min: as in NCCL; the NaN behaviour of max/min is
//    documented next to the kernels and tested.
//  * PreMulSum and floating avg are sums whose *inputs* are first multiplied by
//    a scalar (1/nranks for avg): the executor applies `scale` exactly once to
//    each rank's own input when it first reads it (scaleCopy, or reduce with
//    scaleA), so every contribution is scaled once whatever the schedule.
//  * integer avg is a sum followed by a division by nranks (divide()).
#pragma once

#include <cstddef>
#include <cstdint>

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
};

size_t typeSize(ncclDataType_t type);
bool isFloatType(ncclDataType_t type);
const char* typeName(ncclDataType_t type);   // "float", "half", "bfloat16", "f8e4m3", ...

// dst[i] = a[i] (op) b[i] for n elements.
void reduce(const Reduction& r, void* dst, const void* a, const void* b, size_t n);
// dst[i] = scale(a[i]) (op) b[i]: `a` is this rank's raw input (pre-multiplied when r.preMul).
void reduceScaleA(const Reduction& r, void* dst, const void* a, const void* b, size_t n);
// dst[i] = scale(src[i]) (a copy when !r.preMul).
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
