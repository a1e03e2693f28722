// Conversions between float and the narrow floating formats (IEEE half,
// bfloat16, fp8 e4m3 "fn" and fp8 e5m2), written once for scalars and for GCC
// vector types. Every function takes "lanes": either a scalar (uint32_t /
// float) or a vector of them (e.g. 8 x uint32_t); comparisons then yield
// masks and `c ? x : y` selects per lane, so the same text serves the scalar
// API (reduce_convert.cc) and the vectorised kernels (reduce_kernel_body.h).
// All functions are always_inline: each kernel translation unit compiles them
// for its own instruction set, and no out-of-line copy exists to be shared
// between translation units built for different ISAs.
//
// Encoding (float -> narrow), round to nearest, ties to even:
//  * normal results: add the bias difference to the exponent field, then add
//    half an ulp minus one plus the kept LSB ("round half to even" on the
//    integer representation) and shift; a carry correctly bumps the exponent.
//  * subnormal results (|x| below the narrow format's smallest normal): add
//    the float 2^(24-bias-M), whose ulp is exactly the narrow subnormal step;
//    the FPU rounds (ties to even) and the low mantissa bits are the result.
//    This is exact with FTZ/DAZ off (the default) and independent of them
//    for inputs, since the sum is a normal float.
//  * overflow: IEEE formats (half, e5m2, bf16) round to infinity; e4m3 "fn"
//    has no infinity and saturates to +-448 (also for an infinite input), as
//    CUDA's __NV_SATFINITE conversion does.
//  * NaN: always a quiet NaN with the input's sign; the leading payload bits
//    are kept where the format has room (e4m3 has the single NaN 0x7f).
//
// Decoding (narrow -> float) is exact; NaNs come out quiet (sign and payload
// kept), which is what the F16C instruction does, so both kernel paths agree
// bit for bit.
#pragma once

#include <cstdint>
#include <type_traits>

namespace theseus::exec::codec {

#define TH_CODEC_INLINE [[gnu::always_inline]] inline

// The float lanes matching uint32 lanes U (scalar or vector of the same width).
template <class U>
struct FloatLanes {
  typedef float type __attribute__((vector_size(sizeof(U))));
  typedef int32_t itype __attribute__((vector_size(sizeof(U))));
};
template <>
struct FloatLanes<uint32_t> {
  using type = float;
  using itype = int32_t;
};
template <class U>
using FloatOf = typename FloatLanes<U>::type;

// (Parameters are const references so that no 32-byte vector is ever passed
// by value through a function built for the baseline ABI.)

// The constant c in every lane of U.
template <class U>
TH_CODEC_INLINE U splat(uint32_t c) {
  return U{} + c;
}

// x < c per lane, for lanes and constants below 2^31: compared as signed
// int32, which every x86 vector ISA does in one instruction (unsigned
// compares need two or three).
template <class U>
TH_CODEC_INLINE auto lessThan(const U& x, uint32_t c) {
  using I = typename FloatLanes<U>::itype;
  if constexpr (std::is_same_v<U, uint32_t>) {
    return static_cast<int32_t>(x) < static_cast<int32_t>(c);
  } else {
    return reinterpret_cast<const I&>(x) < static_cast<int32_t>(c);
  }
}

template <class U>
TH_CODEC_INLINE FloatOf<U> asFloat(const U& u) {
  return __builtin_bit_cast(FloatOf<U>, u);
}
template <class F>
TH_CODEC_INLINE auto asBits(const F& f) {
  if constexpr (std::is_same_v<F, float>) {
    return __builtin_bit_cast(uint32_t, f);
  } else {
    typedef uint32_t U __attribute__((vector_size(sizeof(F))));
    return __builtin_bit_cast(U, f);
  }
}
// Exact int -> float for values below 2^24 (lanes hold small non-negative integers).
template <class U>
TH_CODEC_INLINE FloatOf<U> smallIntToFloat(const U& u) {
  if constexpr (std::is_same_v<U, uint32_t>) {
    return static_cast<float>(static_cast<int32_t>(u));
  } else {
    using I = typename FloatLanes<U>::itype;
    return __builtin_convertvector(reinterpret_cast<const I&>(u), FloatOf<U>);
  }
}

// A narrow binary floating format with kExp exponent and kMan mantissa bits.
// kIeee: top exponent encodes inf/NaN; otherwise ("fn") only all-ones is NaN
// and overflow saturates.
template <int kExp, int kMan, bool kIeee>
struct SmallFloat {
  static constexpr int kBias = (1 << (kExp - 1)) - 1;
  static constexpr int kShift = 23 - kMan;  // float mantissa bits dropped
  static constexpr uint32_t kMagMask = (1u << (kExp + kMan)) - 1;
  static constexpr uint32_t kManMask = (1u << kMan) - 1;
  static constexpr uint32_t kInfCode = ((1u << kExp) - 1) << kMan;
  static constexpr uint32_t kMaxFinite = kIeee ? kInfCode - 1 : kMagMask - 1;
  static constexpr uint32_t kRebias = static_cast<uint32_t>(127 - kBias) << 23;
  static constexpr uint32_t kMinNormalBits = static_cast<uint32_t>(127 - kBias + 1) << 23;
  // Float 2^(24 - bias - kMan): adding it rounds to the subnormal step.
  static constexpr uint32_t kSubnormalMagicBits = static_cast<uint32_t>(127 + 24 - kBias - kMan) << 23;

  // kQuiet: set the quiet bit of NaNs. The kernels skip it (kQuiet=false):
  // every value they store goes through encode(), which quiets NaNs anyway.
  template <bool kQuiet = true, class U>
  TH_CODEC_INLINE static FloatOf<U> decode(const U& v) {
    U sign = (v >> (kExp + kMan)) << 31;
    U em = v & kMagMask;
    U normal = (em << kShift) + kRebias;
    U sub = asBits(smallIntToFloat(em) * asFloat(static_cast<uint32_t>(127 + 1 - kBias - kMan) << 23));
    U r;
    if constexpr (kIeee) {
      U special = (em << kShift) | 0x7f800000u;
      if constexpr (kQuiet) special = special | (lessThan(em, kInfCode + 1) ? splat<U>(0) : splat<U>(0x00400000u));
      r = lessThan(em, 1u << kMan) ? sub : (lessThan(em, kInfCode) ? normal : special);
    } else {
      U nan = ((em & kManMask) << kShift) | 0x7fc00000u;
      r = lessThan(em, 1u << kMan) ? sub : (lessThan(em, kMagMask) ? normal : nan);
    }
    return asFloat(r | sign);
  }

  template <class F>
  TH_CODEC_INLINE static auto encode(const F& f) {
    auto u = asBits(f);
    using U = decltype(u);
    U sign = (u >> 31) << (kExp + kMan);
    U a = u & 0x7fffffffu;
    // Only selected when a >= kMinNormalBits, so it is below 2^31 there.
    U normal = (a - kRebias + ((1u << (kShift - 1)) - 1) + ((a >> kShift) & 1u)) >> kShift;
    normal = lessThan(normal, kMaxFinite + 1) ? normal : splat<U>(kIeee ? kInfCode : kMaxFinite);
    U sub = asBits(asFloat(a) + asFloat(kSubnormalMagicBits)) - kSubnormalMagicBits;
    U nan;
    if constexpr (kIeee) {
      nan = (a >> kShift & kManMask) | (kInfCode | (1u << (kMan - 1)));
    } else {
      nan = splat<U>(kMagMask);
    }
    U r = lessThan(a, kMinNormalBits) ? sub : (lessThan(a, 0x7f800001u) ? normal : nan);
    return U(r | sign);
  }
};

using Half = SmallFloat<5, 10, true>;
using Fp8E4M3 = SmallFloat<4, 3, false>;
using Fp8E5M2 = SmallFloat<5, 2, true>;

// bfloat16 is the top half of a float: decoding is a shift, encoding rounds
// the low 16 bits away (ties to even; overflow reaches infinity naturally).
struct Bf16 {
  template <bool kQuiet = true, class U>
  TH_CODEC_INLINE static FloatOf<U> decode(const U& v) {
    U u = v << 16;
    if constexpr (kQuiet) u = u | (lessThan(u & 0x7fffffffu, 0x7f800001u) ? splat<U>(0) : splat<U>(0x00400000u));
    return asFloat(u);
  }

  template <class F>
  TH_CODEC_INLINE static auto encode(const F& f) {
    return decltype(asBits(f))(encodeHigh(f) >> 16);
  }

  // The bfloat16 code in the high 16 bits of each lane (low bits zero): the
  // float itself rounded to bfloat16 precision, NaNs quiet.
  template <class F>
  TH_CODEC_INLINE static auto encodeHigh(const F& f) {
    auto u = asBits(f);
    using U = decltype(u);
    U rounded = u + (0x7fffu + ((u >> 16) & 1u));
    U nan = u | 0x00400000u;
    return U((lessThan(u & 0x7fffffffu, 0x7f800001u) ? rounded : nan) & 0xffff0000u);
  }
};

#undef TH_CODEC_INLINE

}  // namespace theseus::exec::codec
