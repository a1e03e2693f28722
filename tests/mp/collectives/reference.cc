#include "reference.h"

#include <cmath>

namespace theseus::test {
namespace {

// A small floating format: `eb` exponent bits, `mb` mantissa bits. IEEE-like
// formats reserve the top exponent for inf/NaN; e4m3 ("fn") only uses the
// all-ones pattern for NaN and saturates at 448.
struct MiniFormat {
  int eb, mb;
  bool ieee;
};
constexpr MiniFormat kHalf{5, 10, true}, kBf16{8, 7, true}, kE4M3{4, 3, false}, kE5M2{5, 2, true};

double rne(double x) {  // round half to even
  double f = std::floor(x), d = x - f;
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return std::fmod(f, 2.0) == 0 ? f : f + 1;
}

uint32_t encode(const MiniFormat& fmt, double v) {
  uint32_t sign = std::signbit(v) ? 1u << (fmt.eb + fmt.mb) : 0u;
  int bias = (1 << (fmt.eb - 1)) - 1;
  uint32_t expMask = (1u << fmt.eb) - 1;
  if (std::isnan(v)) return sign | (expMask << fmt.mb) | ((1u << fmt.mb) - 1);
  double a = std::fabs(v);
  int maxExp = fmt.ieee ? (int)expMask - 1 - bias : (int)expMask - bias;
  double maxMant = fmt.ieee ? (2.0 - std::ldexp(1.0, -fmt.mb)) : (2.0 - std::ldexp(2.0, -fmt.mb));
  double maxFinite = std::ldexp(maxMant, maxExp);
  auto overflow = [&]() -> uint32_t {
    if (fmt.ieee) return sign | (expMask << fmt.mb);          // infinity
    return sign | (expMask << fmt.mb) | ((1u << fmt.mb) - 2);  // saturate to max finite
  };
  if (std::isinf(a)) return overflow();
  if (a == 0) return sign;
  int e;
  std::frexp(a, &e);
  e -= 1;  // a = m * 2^e, m in [1, 2)
  int minExp = 1 - bias;
  if (e < minExp) {
    double q = rne(a / std::ldexp(1.0, minExp - fmt.mb));
    return sign | static_cast<uint32_t>(q);  // q == 2^mb rolls into the smallest normal
  }
  double q = rne(a / std::ldexp(1.0, e - fmt.mb));
  if (q >= std::ldexp(1.0, fmt.mb + 1)) {
    q /= 2;
    e += 1;
  }
  double rounded = std::ldexp(q, e - fmt.mb);
  if (rounded > maxFinite) return overflow();
  return sign | (static_cast<uint32_t>(e + bias) << fmt.mb) | (static_cast<uint32_t>(q) - (1u << fmt.mb));
}

double decode(const MiniFormat& fmt, uint32_t bits) {
  int bias = (1 << (fmt.eb - 1)) - 1;
  uint32_t expMask = (1u << fmt.eb) - 1;
  bool neg = (bits >> (fmt.eb + fmt.mb)) & 1;
  uint32_t ex = (bits >> fmt.mb) & expMask, man = bits & ((1u << fmt.mb) - 1);
  double v;
  if (fmt.ieee && ex == expMask) v = man ? NAN : INFINITY;
  else if (!fmt.ieee && ex == expMask && man == (1u << fmt.mb) - 1) v = NAN;
  else if (ex == 0) v = std::ldexp(double(man), 1 - bias - fmt.mb);
  else v = std::ldexp(1.0 + std::ldexp(double(man), -fmt.mb), int(ex) - bias);
  return neg ? -v : v;
}

}  // namespace

uint16_t toHalf(double v) { return static_cast<uint16_t>(encode(kHalf, v)); }
double fromHalf(uint16_t h) { return decode(kHalf, h); }
uint16_t toBf16(double v) { return static_cast<uint16_t>(encode(kBf16, v)); }
double fromBf16(uint16_t b) { return decode(kBf16, b); }
uint8_t toE4M3(double v) { return static_cast<uint8_t>(encode(kE4M3, v)); }
double fromE4M3(uint8_t v) { return decode(kE4M3, v); }
uint8_t toE5M2(double v) { return static_cast<uint8_t>(encode(kE5M2, v)); }
double fromE5M2(uint8_t v) { return decode(kE5M2, v); }

size_t typeBytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}

const char* typeLabel(ncclDataType_t t) {
  static const char* names[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64", "half",
                                "float", "double", "bfloat16", "f8e4m3", "f8e5m2"};
  return t >= 0 && t < ncclNumTypes ? names[t] : "?";
}

const char* opLabel(ncclRedOp_t op) {
  static const char* names[] = {"sum", "prod", "max", "min", "avg"};
  return op >= 0 && op < ncclNumOps ? names[op] : "mulsum";
}

bool isFloating(ncclDataType_t t) {
  return t == ncclFloat16 || t == ncclFloat32 || t == ncclFloat64 || t == ncclBfloat16 || t == ncclFloat8e4m3 ||
         t == ncclFloat8e5m2;
}

static bool isUnsigned(ncclDataType_t t) { return t == ncclUint8 || t == ncclUint32 || t == ncclUint64; }

double inputValue(ncclDataType_t t, ncclRedOp_t op, int rank, size_t i, int salt) {
  uint64_t h = (uint64_t(rank) * 1000003u + i * 7919u + uint64_t(salt) * 104729u) % 1000033u;
  if (op == ncclProd) {
    if (h % 7 == 0) return 2;                   // rare 2s keep products small
    return (!isUnsigned(t) && h % 3 == 0) ? -1 : 1;
  }
  if (t == ncclFloat8e5m2 || t == ncclFloat8e4m3) return double(h % 2);   // {0,1}: all partial sums exact
  if (isUnsigned(t)) return double(h % 5);                                  // 0..4
  return double(h % 5) - 2;                                                 // -2..2
}

void storeValue(ncclDataType_t t, void* base, size_t i, double v) {
  switch (t) {
    case ncclInt8: static_cast<int8_t*>(base)[i] = static_cast<int8_t>(v); break;
    case ncclUint8: static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v); break;
    case ncclInt32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v); break;
    case ncclUint32: static_cast<uint32_t*>(base)[i] = static_cast<uint32_t>(v); break;
    case ncclInt64: static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v); break;
    case ncclUint64: static_cast<uint64_t*>(base)[i] = static_cast<uint64_t>(v); break;
    case ncclFloat16: static_cast<uint16_t*>(base)[i] = toHalf(v); break;
    case ncclFloat32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case ncclFloat64: static_cast<double*>(base)[i] = v; break;
    case ncclBfloat16: static_cast<uint16_t*>(base)[i] = toBf16(v); break;
    case ncclFloat8e4m3: static_cast<uint8_t*>(base)[i] = toE4M3(v); break;
    case ncclFloat8e5m2: static_cast<uint8_t*>(base)[i] = toE5M2(v); break;
    default: break;
  }
}

double loadValue(ncclDataType_t t, const void* base, size_t i) {
  switch (t) {
    case ncclInt8: return static_cast<const int8_t*>(base)[i];
    case ncclUint8: return static_cast<const uint8_t*>(base)[i];
    case ncclInt32: return static_cast<const int32_t*>(base)[i];
    case ncclUint32: return static_cast<const uint32_t*>(base)[i];
    case ncclInt64: return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case ncclUint64: return static_cast<double>(static_cast<const uint64_t*>(base)[i]);
    case ncclFloat16: return fromHalf(static_cast<const uint16_t*>(base)[i]);
    case ncclFloat32: return static_cast<const float*>(base)[i];
    case ncclFloat64: return static_cast<const double*>(base)[i];
    case ncclBfloat16: return fromBf16(static_cast<const uint16_t*>(base)[i]);
    case ncclFloat8e4m3: return fromE4M3(static_cast<const uint8_t*>(base)[i]);
    case ncclFloat8e5m2: return fromE5M2(static_cast<const uint8_t*>(base)[i]);
    default: return 0;
  }
}

double reduceRef(ncclDataType_t t, const RefOp& op, const std::vector<double>& values,
                 const std::vector<double>& scalars) {
  double acc = 0;
  switch (op.op) {
    case ncclSum: case ncclAvg:
      for (double v : values) acc += v;
      if (op.op == ncclAvg) {
        if (isFloating(t)) return acc / op.nranks;
        return std::trunc(acc / op.nranks);  // integer average truncates like C division
      }
      return acc;
    case ncclProd:
      acc = 1;
      for (double v : values) acc *= v;
      return acc;
    case ncclMax:
      acc = values[0];
      for (double v : values) acc = v > acc ? v : acc;
      return acc;
    case ncclMin:
      acc = values[0];
      for (double v : values) acc = v < acc ? v : acc;
      return acc;
    default:  // PreMulSum: sum of x_r * s_r
      for (size_t r = 0; r < values.size(); ++r) acc += values[r] * scalars[r];
      return acc;
  }
}

double tolerance(ncclDataType_t t, ncclRedOp_t op, double want, int nranks) {
  // Inputs make every other case exact. PreMulSum on fp8 can reach sums (9, 11)
  // that e5m2/e4m3 cannot hold, so partial sums round there too.
  bool fp8 = t == ncclFloat8e4m3 || t == ncclFloat8e5m2;
  if (op != ncclAvg && !(fp8 && op == ncclNumOps)) return 0;
  if (!isFloating(t)) return 0;
  double rel;
  switch (t) {
    case ncclFloat16: rel = 2e-3; break;
    case ncclBfloat16: rel = 1.6e-2; break;
    case ncclFloat8e4m3: rel = 0.13; break;
    case ncclFloat8e5m2: rel = 0.26; break;
    case ncclFloat32: rel = 1e-6; break;
    default: rel = 1e-12; break;
  }
  // Each of the n pre-multiplied terms and each partial sum may round once.
  return rel * (std::fabs(want) + 1.0) * (nranks + 1);
}

}  // namespace theseus::test
