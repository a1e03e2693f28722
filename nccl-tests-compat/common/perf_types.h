// Datatypes and reduction operations as the harness sees them: nccl-tests'
// names, sizes, the numeric properties the data checker needs, and the
// harness' own conversions for the 16- and 8-bit floating formats.
//
// The conversions are written here on purpose instead of borrowed from the
// library under test: an independent reference is what makes `-c` a check.
// Every conversion rounds to nearest, ties to even. fp8 e4m3 (the "fn"
// variant: no infinity, 0x7f/0xff are NaN) saturates to +-448 like NCCL's
// host reduction; half, bfloat16 and fp8 e5m2 overflow to infinity.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "nccl.h"

namespace theseus::perf {

// The operations nccl-tests knows, in its order (`-o all`).
enum class OpKind : uint8_t { kSum, kProd, kMax, kMin, kAvg, kMulSum };

struct TypeInfo {
  ncclDataType_t type;
  const char* name;     // nccl-tests spelling: "float", "bfloat16", "f8e4m3", ...
  size_t size;          // bytes per element
  bool isFloat;
  bool isSigned;        // integers only
  // Floating formats: exponent and mantissa field widths (float/double too).
  int expBits;
  int mantBits;
};

const TypeInfo& typeInfo(ncclDataType_t type);
// nccl-tests names plus common aliases (char, int, half/fp16/float16, bf16, fp32, fp64, ...).
std::optional<ncclDataType_t> parseTypeName(std::string_view name);
// All 12 types in nccl-tests order (-d all).
const std::vector<ncclDataType_t>& allTypes();

const char* opName(OpKind op);
std::optional<OpKind> parseOpName(std::string_view name);
const std::vector<OpKind>& allOps();
// The builtin ncclRedOp_t (kMulSum has none: it is created per call).
ncclRedOp_t builtinOp(OpKind op);

// Significand precision in bits, including the implicit bit (half: 11).
int precisionBits(const TypeInfo& t);

// Round-to-nearest-even conversions between double and a floating type's bits.
// Works for every floating ncclDataType_t (float and double included).
uint64_t encodeFloat(ncclDataType_t type, double value);
double decodeFloat(ncclDataType_t type, uint64_t bits);
bool isNaNBits(ncclDataType_t type, uint64_t bits);

// Raw little-endian element access (the low `size` bytes of `bits`).
uint64_t loadBits(const void* base, size_t index, size_t size);
void storeBits(void* base, size_t index, size_t size, uint64_t bits);

// Distance in units in the last place between two finite values of a floating
// type (+0 and -0 are equal). Returns UINT64_MAX if either is NaN.
uint64_t ulpDistance(ncclDataType_t type, uint64_t a, uint64_t b);

}  // namespace theseus::perf
