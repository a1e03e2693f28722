#include "perf_types.h"

#include <cmath>
#include <cstring>
#include <string>

namespace theseus::perf {
namespace {

// Order matches ncclDataType_t values 0..11.
const TypeInfo kTypes[] = {
    {ncclInt8, "int8", 1, false, true, 0, 0},
    {ncclUint8, "uint8", 1, false, false, 0, 0},
    {ncclInt32, "int32", 4, false, true, 0, 0},
    {ncclUint32, "uint32", 4, false, false, 0, 0},
    {ncclInt64, "int64", 8, false, true, 0, 0},
    {ncclUint64, "uint64", 8, false, false, 0, 0},
    {ncclFloat16, "half", 2, true, true, 5, 10},
    {ncclFloat32, "float", 4, true, true, 8, 23},
    {ncclFloat64, "double", 8, true, true, 11, 52},
    {ncclBfloat16, "bfloat16", 2, true, true, 8, 7},
    {ncclFloat8e4m3, "f8e4m3", 1, true, true, 4, 3},
    {ncclFloat8e5m2, "f8e5m2", 1, true, true, 5, 2},
};

struct Alias {
  const char* name;
  ncclDataType_t type;
};
const Alias kTypeAliases[] = {
    {"char", ncclInt8},        {"int", ncclInt32},        {"float16", ncclFloat16}, {"fp16", ncclFloat16},
    {"float32", ncclFloat32},  {"fp32", ncclFloat32},     {"float64", ncclFloat64}, {"fp64", ncclFloat64},
    {"bf16", ncclBfloat16},    {"e4m3", ncclFloat8e4m3},  {"fp8e4m3", ncclFloat8e4m3},
    {"e5m2", ncclFloat8e5m2},  {"fp8e5m2", ncclFloat8e5m2},
};

const char* const kOpNames[] = {"sum", "prod", "max", "min", "avg", "mulsum"};

bool equalsIgnoreCase(std::string_view a, const char* b) {
  size_t n = strlen(b);
  if (a.size() != n) return false;
  for (size_t i = 0; i < n; ++i)
    if (tolower(static_cast<unsigned char>(a[i])) != tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

bool isE4M3(ncclDataType_t t) { return t == ncclFloat8e4m3; }

// Encodes |value| (finite, > 0) into a sign-less (exponent|mantissa) field of a
// binary format with `eb` exponent and `mb` mantissa bits, rounding to nearest
// even. Subnormals fall out naturally: their mantissa integer may round up to
// 2^mb, which is exactly the encoding of the smallest normal.
uint64_t encodeMagnitude(double a, int eb, int mb, bool e4m3) {
  const int bias = (1 << (eb - 1)) - 1;
  const int minExp = 1 - bias;
  const uint64_t expAllOnes = (uint64_t{1} << eb) - 1;
  int e2 = 0;
  (void)std::frexp(a, &e2);  // a = f * 2^e2, f in [0.5, 1)
  int e = e2 - 1;            // a in [2^e, 2^(e+1))
  uint64_t bits;
  if (e < minExp) {
    double m = std::nearbyint(std::ldexp(a, mb - minExp));
    bits = static_cast<uint64_t>(m);  // exponent field 0 (or 1 after rounding up)
  } else {
    double m = std::nearbyint(std::ldexp(a, mb - e));  // in [2^mb, 2^(mb+1)]
    uint64_t mi = static_cast<uint64_t>(m);
    if (mi == (uint64_t{1} << (mb + 1))) {
      mi >>= 1;
      ++e;
    }
    uint64_t field = static_cast<uint64_t>(e + bias);
    if (!e4m3 && field >= expAllOnes) return expAllOnes << mb;  // infinity
    if (e4m3 && field > expAllOnes) return 0x7e;                 // saturate
    bits = (field << mb) | (mi - (uint64_t{1} << mb));
  }
  if (e4m3 && bits > 0x7e) bits = 0x7e;  // 0x7f is NaN: saturate to 448
  return bits;
}

}  // namespace

const TypeInfo& typeInfo(ncclDataType_t type) {
  int i = static_cast<int>(type);
  if (i < 0 || i >= static_cast<int>(sizeof(kTypes) / sizeof(kTypes[0]))) return kTypes[ncclFloat32];
  return kTypes[i];
}

std::optional<ncclDataType_t> parseTypeName(std::string_view name) {
  for (const TypeInfo& t : kTypes)
    if (equalsIgnoreCase(name, t.name)) return t.type;
  for (const Alias& a : kTypeAliases)
    if (equalsIgnoreCase(name, a.name)) return a.type;
  return std::nullopt;
}

const std::vector<ncclDataType_t>& allTypes() {
  static const std::vector<ncclDataType_t> all = [] {
    std::vector<ncclDataType_t> v;
    for (const TypeInfo& t : kTypes) v.push_back(t.type);
    return v;
  }();
  return all;
}

const char* opName(OpKind op) { return kOpNames[static_cast<int>(op)]; }

std::optional<OpKind> parseOpName(std::string_view name) {
  for (int i = 0; i < 6; ++i)
    if (equalsIgnoreCase(name, kOpNames[i])) return static_cast<OpKind>(i);
  return std::nullopt;
}

const std::vector<OpKind>& allOps() {
  static const std::vector<OpKind> all = {OpKind::kSum, OpKind::kProd, OpKind::kMax,
                                          OpKind::kMin, OpKind::kAvg,  OpKind::kMulSum};
  return all;
}

ncclRedOp_t builtinOp(OpKind op) {
  switch (op) {
    case OpKind::kSum: return ncclSum;
    case OpKind::kProd: return ncclProd;
    case OpKind::kMax: return ncclMax;
    case OpKind::kMin: return ncclMin;
    case OpKind::kAvg: return ncclAvg;
    case OpKind::kMulSum: break;
  }
  return ncclSum;
}

int precisionBits(const TypeInfo& t) { return t.isFloat ? t.mantBits + 1 : static_cast<int>(t.size * 8); }

uint64_t encodeFloat(ncclDataType_t type, double value) {
  if (type == ncclFloat64) {
    uint64_t b;
    memcpy(&b, &value, 8);
    return b;
  }
  if (type == ncclFloat32) {
    float f = static_cast<float>(value);  // round to nearest even (default FP environment)
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
  }
  const TypeInfo& t = typeInfo(type);
  const uint64_t sign = uint64_t{1} << (t.expBits + t.mantBits);
  const uint64_t expAllOnes = (uint64_t{1} << t.expBits) - 1;
  if (std::isnan(value)) return isE4M3(type) ? 0x7f : (expAllOnes << t.mantBits) | 1;
  uint64_t s = std::signbit(value) ? sign : 0;
  double a = std::fabs(value);
  if (a == 0) return s;
  if (std::isinf(a)) return s | (isE4M3(type) ? 0x7e : expAllOnes << t.mantBits);
  return s | encodeMagnitude(a, t.expBits, t.mantBits, isE4M3(type));
}

double decodeFloat(ncclDataType_t type, uint64_t bits) {
  if (type == ncclFloat64) {
    double d;
    memcpy(&d, &bits, 8);
    return d;
  }
  if (type == ncclFloat32) {
    uint32_t b = static_cast<uint32_t>(bits);
    float f;
    memcpy(&f, &b, 4);
    return f;
  }
  const TypeInfo& t = typeInfo(type);
  const int mb = t.mantBits;
  const int bias = (1 << (t.expBits - 1)) - 1;
  const uint64_t expAllOnes = (uint64_t{1} << t.expBits) - 1;
  bool neg = (bits >> (t.expBits + mb)) & 1;
  uint64_t field = (bits >> mb) & expAllOnes;
  uint64_t mant = bits & ((uint64_t{1} << mb) - 1);
  double v;
  if (isNaNBits(type, bits)) return std::nan("");
  if (field == expAllOnes && !isE4M3(type)) {
    v = HUGE_VAL;
  } else if (field == 0) {
    v = std::ldexp(static_cast<double>(mant), 1 - bias - mb);
  } else {
    v = std::ldexp(static_cast<double>(mant | (uint64_t{1} << mb)), static_cast<int>(field) - bias - mb);
  }
  return neg ? -v : v;
}

bool isNaNBits(ncclDataType_t type, uint64_t bits) {
  const TypeInfo& t = typeInfo(type);
  if (!t.isFloat) return false;
  const int mb = t.mantBits;
  const uint64_t expAllOnes = (uint64_t{1} << t.expBits) - 1;
  uint64_t field = (bits >> mb) & expAllOnes;
  uint64_t mant = bits & ((uint64_t{1} << mb) - 1);
  if (isE4M3(type)) return field == expAllOnes && mant == 7;
  return field == expAllOnes && mant != 0;
}

uint64_t loadBits(const void* base, size_t index, size_t size) {
  uint64_t v = 0;
  memcpy(&v, static_cast<const char*>(base) + index * size, size);  // little-endian host
  return v;
}

void storeBits(void* base, size_t index, size_t size, uint64_t bits) {
  memcpy(static_cast<char*>(base) + index * size, &bits, size);
}

uint64_t ulpDistance(ncclDataType_t type, uint64_t a, uint64_t b) {
  if (isNaNBits(type, a) || isNaNBits(type, b)) return UINT64_MAX;
  const TypeInfo& t = typeInfo(type);
  const int signBit = t.expBits + t.mantBits;
  const uint64_t magMask = (uint64_t{1} << signBit) - 1;
  // Sign-magnitude to a monotonic signed integer line (+0 and -0 both map to 0).
  auto ordered = [&](uint64_t v) {
    int64_t mag = static_cast<int64_t>(v & magMask);
    return ((v >> signBit) & 1) ? -mag : mag;
  };
  int64_t x = ordered(a), y = ordered(b);
  return x > y ? static_cast<uint64_t>(x) - static_cast<uint64_t>(y)
               : static_cast<uint64_t>(y) - static_cast<uint64_t>(x);
}

}  // namespace theseus::perf
