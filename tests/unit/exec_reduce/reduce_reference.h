// An independent reference model of the reduction kernels for the tests. It
// shares no code with src/exec: formats are decoded from their definition with
// ldexp, encoded by searching the sorted table of representable values (ties
// to the even code), and arithmetic is done in double, which has at least
// 2p+2 bits for every type but double itself, so one rounding of the double
// result is the correctly rounded answer.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "nccl.h"

namespace theseus::exec::ref {

// A binary floating format with exp/man bits; ieee: top exponent is inf/NaN,
// otherwise only the all-ones code is NaN and overflow saturates.
struct Format {
  int exp, man;
  bool ieee;
  int bias() const { return (1 << (exp - 1)) - 1; }
  uint32_t magMask() const { return (1u << (exp + man)) - 1; }
  uint32_t signBit() const { return 1u << (exp + man); }
};

constexpr Format kHalf{5, 10, true};
constexpr Format kBf16{8, 7, true};
constexpr Format kE4M3{4, 3, false};
constexpr Format kE5M2{5, 2, true};

inline bool isNanCode(const Format& f, uint32_t c) {
  uint32_t m = c & f.magMask();
  uint32_t expAll = ((1u << f.exp) - 1) << f.man;
  if (f.ieee) return (m & expAll) == expAll && (m & ((1u << f.man) - 1)) != 0;
  return m == f.magMask();
}

inline double decode(const Format& f, uint32_t c) {
  const bool neg = (c & f.signBit()) != 0;
  const uint32_t e = (c >> f.man) & ((1u << f.exp) - 1);
  const uint32_t m = c & ((1u << f.man) - 1);
  double v;
  if (isNanCode(f, c)) return std::numeric_limits<double>::quiet_NaN();
  if (f.ieee && e == (1u << f.exp) - 1) {
    v = std::numeric_limits<double>::infinity();
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - f.bias() - f.man);
  } else {
    v = std::ldexp(static_cast<double>((1u << f.man) + m), static_cast<int>(e) - f.bias() - f.man);
  }
  return neg ? -v : v;
}

// The non-negative finite values of a format, indexed by code (increasing).
class Encoder {
 public:
  explicit Encoder(const Format& f) : f_(f) {
    for (uint32_t c = 0; c <= f.magMask(); ++c) {
      double v = decode(f, c);
      if (std::isnan(v) || std::isinf(v)) break;
      values_.push_back(v);
    }
    // The value just past the largest finite one (what "rounds to infinity" compares with).
    maxFinite_ = values_.back();
    double ulp = maxFinite_ - values_[values_.size() - 2];
    beyond_ = maxFinite_ + ulp;
  }

  uint32_t encode(double x) const {
    const uint32_t sign = std::signbit(x) ? f_.signBit() : 0;
    if (std::isnan(x)) return sign | (f_.ieee ? (((1u << f_.exp) - 1) << f_.man) | (1u << (f_.man - 1)) : f_.magMask());
    const double a = std::fabs(x);
    const uint32_t top = static_cast<uint32_t>(values_.size() - 1);
    if (a >= maxFinite_) {
      if (!f_.ieee) return sign | top;  // saturate (inf too)
      const double mid = (maxFinite_ + beyond_) / 2;
      if (a < mid) return sign | top;
      return sign | (top + 1);  // the max finite code is odd: ties go up, to infinity
    }
    // Largest code with value <= a, then nearest of it and the next, ties to even.
    auto it = std::upper_bound(values_.begin(), values_.end(), a);
    uint32_t lo = static_cast<uint32_t>(it - values_.begin()) - 1;
    double dlo = a - values_[lo], dhi = values_[lo + 1] - a;
    uint32_t c = dlo < dhi ? lo : dhi < dlo ? lo + 1 : ((lo & 1) ? lo + 1 : lo);
    return sign | c;
  }

  const std::vector<double>& values() const { return values_; }

 private:
  Format f_;
  std::vector<double> values_;
  double maxFinite_ = 0, beyond_ = 0;
};

inline const Encoder& encoderFor(const Format& f) {
  static const Encoder half(kHalf), bf16(kBf16), e4m3(kE4M3), e5m2(kE5M2);
  if (f.exp == 5 && f.man == 10) return half;
  if (f.exp == 8) return bf16;
  if (f.exp == 4) return e4m3;
  return e5m2;
}

inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---- element-level model of every datatype ----

inline const Format* narrowFormat(ncclDataType_t t) {
  switch (t) {
    case ncclFloat16: return &kHalf;
    case ncclBfloat16: return &kBf16;
    case ncclFloat8e4m3: return &kE4M3;
    case ncclFloat8e5m2: return &kE5M2;
    default: return nullptr;
  }
}

inline size_t elemSize(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}

inline bool isFloating(ncclDataType_t t) {
  return t == ncclFloat16 || t == ncclFloat32 || t == ncclFloat64 || t == ncclBfloat16 || t == ncclFloat8e4m3 ||
         t == ncclFloat8e5m2;
}

// Raw element bits (zero-extended) at p.
inline uint64_t loadRaw(ncclDataType_t t, const unsigned char* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, elemSize(t));
  return v;
}
inline void storeRaw(ncclDataType_t t, unsigned char* p, uint64_t v) { std::memcpy(p, &v, elemSize(t)); }

inline double toDouble(ncclDataType_t t, uint64_t raw) {
  if (const Format* f = narrowFormat(t)) return decode(*f, static_cast<uint32_t>(raw));
  if (t == ncclFloat32) return bitsFloat(static_cast<uint32_t>(raw));
  double d;
  std::memcpy(&d, &raw, 8);
  return d;
}

// Rounds a double to the floating type t (one rounding, ties to even).
inline uint64_t fromDouble(ncclDataType_t t, double x) {
  if (const Format* f = narrowFormat(t)) return encoderFor(*f).encode(x);
  if (t == ncclFloat32) return floatBits(static_cast<float>(x));
  uint64_t r;
  std::memcpy(&r, &x, 8);
  return r;
}

// Integers as signed 64-bit values of their type, and back (wrapping).
inline int64_t toInt(ncclDataType_t t, uint64_t raw) {
  switch (t) {
    case ncclInt8: return static_cast<int8_t>(raw);
    case ncclInt32: return static_cast<int32_t>(raw);
    case ncclInt64: return static_cast<int64_t>(raw);
    default: return static_cast<int64_t>(raw);  // unsigned types: raw is the value (mod 2^64)
  }
}
inline bool isSigned(ncclDataType_t t) { return t == ncclInt8 || t == ncclInt32 || t == ncclInt64; }
inline uint64_t truncRaw(ncclDataType_t t, uint64_t v) {
  size_t n = elemSize(t);
  return n == 8 ? v : v & ((uint64_t{1} << (8 * n)) - 1);
}

enum class Kind { kSum, kProd, kMax, kMin };

// IEEE maxNum/minNum with +0 > -0, as documented in exec/reduce.h.
inline double floatingOp(Kind k, double x, double y) {
  switch (k) {
    case Kind::kSum: return x + y;
    case Kind::kProd: return x * y;
    default: break;
  }
  if (std::isnan(x)) return y;
  if (std::isnan(y)) return x;
  if (x == y) {
    bool negResult = k == Kind::kMax ? (std::signbit(x) && std::signbit(y)) : (std::signbit(x) || std::signbit(y));
    return negResult ? -std::fabs(x) : std::fabs(x);
  }
  if (k == Kind::kMax) return x > y ? x : y;
  return x < y ? x : y;
}

inline uint64_t intOp(ncclDataType_t t, Kind k, uint64_t xr, uint64_t yr) {
  switch (k) {
    case Kind::kSum: return truncRaw(t, xr + yr);
    case Kind::kProd: return truncRaw(t, xr * yr);
    default: break;
  }
  bool xGreater = isSigned(t) ? toInt(t, xr) > toInt(t, yr) : xr > yr;
  bool pickX = k == Kind::kMax ? xGreater : !xGreater;
  return pickX ? xr : yr;
}

// x * scalar rounded to the type (the scalar already is a value of the type).
inline uint64_t scaleRaw(ncclDataType_t t, uint64_t xr, double scalar) {
  if (isFloating(t)) return fromDouble(t, toDouble(t, xr) * scalar);
  return truncRaw(t, xr * static_cast<uint64_t>(static_cast<int64_t>(scalar)));
}

inline uint64_t combineRaw(ncclDataType_t t, Kind k, uint64_t xr, uint64_t yr) {
  if (isFloating(t)) return fromDouble(t, floatingOp(k, toDouble(t, xr), toDouble(t, yr)));
  return intOp(t, k, xr, yr);
}

// Truncating division, written on magnitudes.
inline uint64_t divideRaw(ncclDataType_t t, uint64_t xr, uint32_t d) {
  if (isFloating(t)) return fromDouble(t, toDouble(t, xr) / d);
  if (!isSigned(t)) return xr / d;
  int64_t v = toInt(t, xr);
  uint64_t mag = v < 0 ? uint64_t{0} - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  uint64_t q = mag / d;
  return truncRaw(t, v < 0 ? uint64_t{0} - q : q);
}

// Equal results: identical bits, or both NaN for floating types.
inline bool sameResult(ncclDataType_t t, uint64_t got, uint64_t want) {
  if (got == want) return true;
  return isFloating(t) && std::isnan(toDouble(t, got)) && std::isnan(toDouble(t, want));
}

}  // namespace theseus::exec::ref
