// Element arithmetic of the device executor for every NCCL datatype and
// operation, written for one element at a time so the same source runs in a
// CUDA thread and on a host thread (hd.h). It computes exactly what the host
// kernels of exec/reduce.h compute, bit for bit (a test compares them over
// every type and op, infinities, signed zeros and subnormals included; a NaN
// result is a NaN on both, but its payload is not part of the contract —
// which NaN operand survives depends on operand order, and GPUs return a
// canonical NaN):
//  * integers: sum and prod wrap (unsigned arithmetic), max/min as the type;
//  * float and double computed in their own type; half, bfloat16 and both fp8
//    formats decoded to float, computed, and rounded to nearest even on
//    every store (e4m3 saturates to +-448, e5m2 overflows to infinity, NaNs
//    come out quiet with their sign);
//  * floating max/min are IEEE maxNum/minNum with +0 > -0, so every order of
//    combination gives the same bits;
//  * a PreMulSum multiplies the raw input by the scalar in the compute type
//    and rounds to the element type before combining; integer average divides
//    (truncating, in 64 bits) at the end.
// Products are computed with round-to-nearest intrinsics on the device so that
// nvcc never contracts a multiply and an add into one FMA (which rounds once
// where the host rounds twice).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "exec/device/hd.h"

namespace theseus::exec::dev {

// The operations and datatypes by their nccl.h values.
enum : uint8_t { kOpSum = 0, kOpProd = 1, kOpMax = 2, kOpMin = 3 };
enum : uint8_t {
  kInt8 = 0, kUint8 = 1, kInt32 = 2, kUint32 = 3, kInt64 = 4, kUint64 = 5,
  kFloat16 = 6, kFloat32 = 7, kFloat64 = 8, kBfloat16 = 9, kFp8E4M3 = 10, kFp8E5M2 = 11, kNumTypes = 12
};

// A resolved reduction (exec::Reduction without host-only parts).
struct Reduction {
  uint8_t kind = kOpSum;
  uint8_t type = kFloat32;
  uint8_t preMul = 0;       // inputs are scaled when first read
  uint8_t divideAtEnd = 0;  // integer average
  uint32_t divisor = 1;
  float scaleF = 1.0f;      // the scalar rounded to the element type (float-computed types)
  double scaleD = 1.0;      // double
  uint64_t scaleU = 1;      // integers: two's complement bits
  // A PreMulSum scalar still to be read (ncclScalarDevice in device memory):
  // one element of `type` here, read by the interpreter when the plan starts.
  const void* scalarSource = nullptr;
};

TH_HD inline size_t typeBytes(uint8_t type) {
  switch (type) {
    case kInt8: case kUint8: case kFp8E4M3: case kFp8E5M2: return 1;
    case kFloat16: case kBfloat16: return 2;
    case kInt32: case kUint32: case kFloat32: return 4;
    default: return 8;
  }
}

TH_HD inline float mulRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
TH_HD inline double mulRn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

TH_HD inline float asFloat(uint32_t u) { return bitCast<float>(u); }
TH_HD inline uint32_t asBits(float f) { return bitCast<uint32_t>(f); }

// A narrow binary floating format (see exec/reduce_codec.h for the rounding argument).
template <int kExp, int kMan, bool kIeee>
struct Narrow {
  static constexpr int kBias = (1 << (kExp - 1)) - 1;
  static constexpr int kShift = 23 - kMan;
  static constexpr uint32_t kMagMask = (1u << (kExp + kMan)) - 1;
  static constexpr uint32_t kManMask = (1u << kMan) - 1;
  static constexpr uint32_t kInfCode = ((1u << kExp) - 1) << kMan;
  static constexpr uint32_t kMaxFinite = kIeee ? kInfCode - 1 : kMagMask - 1;
  static constexpr uint32_t kRebias = static_cast<uint32_t>(127 - kBias) << 23;
  static constexpr uint32_t kMinNormalBits = static_cast<uint32_t>(127 - kBias + 1) << 23;
  static constexpr uint32_t kSubnormalMagicBits = static_cast<uint32_t>(127 + 24 - kBias - kMan) << 23;

  TH_HD static float decode(uint32_t v) {
    uint32_t sign = (v >> (kExp + kMan)) << 31;
    uint32_t em = v & kMagMask;
    uint32_t r;
    if (em < (1u << kMan)) {
      r = asBits(mulRn(static_cast<float>(static_cast<int32_t>(em)),
                       asFloat(static_cast<uint32_t>(127 + 1 - kBias - kMan) << 23)));
    } else if (kIeee ? em < kInfCode : em < kMagMask) {
      r = (em << kShift) + kRebias;
    } else if (kIeee) {
      r = (em << kShift) | 0x7f800000u;  // inf, or a NaN (quieted by the next encode)
    } else {
      r = ((em & kManMask) << kShift) | 0x7fc00000u;
    }
    return asFloat(r | sign);
  }

  TH_HD static uint32_t encode(float f) {
    uint32_t u = asBits(f);
    uint32_t sign = (u >> 31) << (kExp + kMan);
    uint32_t a = u & 0x7fffffffu;
    uint32_t r;
    if (a < kMinNormalBits) {
      float sum = asFloat(a) + asFloat(kSubnormalMagicBits);  // rounds to the subnormal step
      r = asBits(sum) - kSubnormalMagicBits;
    } else if (a < 0x7f800001u) {
      r = (a - kRebias + ((1u << (kShift - 1)) - 1) + ((a >> kShift) & 1u)) >> kShift;
      if (r > kMaxFinite) r = kIeee ? kInfCode : kMaxFinite;
    } else {
      r = kIeee ? ((a >> kShift & kManMask) | (kInfCode | (1u << (kMan - 1)))) : kMagMask;
    }
    return r | sign;
  }
};

using Half = Narrow<5, 10, true>;
using Fp8E4M3 = Narrow<4, 3, false>;
using Fp8E5M2 = Narrow<5, 2, true>;

struct Bf16 {
  TH_HD static float decode(uint32_t v) { return asFloat(v << 16); }
  TH_HD static uint32_t encode(float f) {
    uint32_t u = asBits(f);
    uint32_t r = (u & 0x7fffffffu) < 0x7f800001u ? u + (0x7fffu + ((u >> 16) & 1u)) : (u | 0x00400000u);
    return r >> 16;
  }
};

// ---- per-type element access: load to the compute type, store from it ----

template <class T>
struct NativeElem {
  using Storage = T;
  using Compute = T;
  TH_HD static Compute load(const void* p, size_t i) { return static_cast<const T*>(p)[i]; }
  TH_HD static void store(void* p, size_t i, Compute v) { static_cast<T*>(p)[i] = v; }
  TH_HD static Compute round(Compute v) { return v; }
};

template <class Fmt, class S>
struct NarrowElem {
  using Storage = S;
  using Compute = float;
  TH_HD static float load(const void* p, size_t i) { return Fmt::decode(static_cast<const S*>(p)[i]); }
  TH_HD static void store(void* p, size_t i, float v) { static_cast<S*>(p)[i] = static_cast<S>(Fmt::encode(v)); }
  TH_HD static float round(float v) { return Fmt::decode(Fmt::encode(v)); }
};

// ---- operations in the compute type ----

template <class V>
constexpr bool kFloating = std::is_floating_point_v<V>;

// Integers wrap: computed in 64-bit unsigned and truncated to the type.
template <class V>
TH_HD inline V opSum(V x, V y) {
  if constexpr (kFloating<V>) {
    return x + y;
  } else {
    return static_cast<V>(static_cast<unsigned long long>(x) + static_cast<unsigned long long>(y));
  }
}

template <class V>
TH_HD inline V opProd(V x, V y) {
  if constexpr (kFloating<V>) {
    return mulRn(x, y);
  } else {
    return static_cast<V>(static_cast<unsigned long long>(x) * static_cast<unsigned long long>(y));
  }
}

// maxNum with +0 > -0 (for equal values the AND of the encodings picks +0).
template <class V>
TH_HD inline V opMax(V x, V y) {
  if constexpr (kFloating<V>) {
    using B = std::conditional_t<sizeof(V) == 4, uint32_t, uint64_t>;
    if (x != x) return y;
    if (y != y) return x;
    if (x == y) return bitCast<V>(static_cast<B>(bitCast<B>(x) & bitCast<B>(y)));
    return x > y ? x : y;
  } else {
    return x > y ? x : y;
  }
}

template <class V>
TH_HD inline V opMin(V x, V y) {
  if constexpr (kFloating<V>) {
    using B = std::conditional_t<sizeof(V) == 4, uint32_t, uint64_t>;
    if (x != x) return y;
    if (y != y) return x;
    if (x == y) return bitCast<V>(static_cast<B>(bitCast<B>(x) | bitCast<B>(y)));
    return x < y ? x : y;
  } else {
    return x < y ? x : y;
  }
}

template <uint8_t kKind, class V>
TH_HD inline V combine(V x, V y) {
  if constexpr (kKind == kOpSum) return opSum(x, y);
  else if constexpr (kKind == kOpProd) return opProd(x, y);
  else if constexpr (kKind == kOpMax) return opMax(x, y);
  else return opMin(x, y);
}

// x * scalar in the compute type (rounded to the element type when kRound).
template <class E, bool kRound>
TH_HD inline typename E::Compute scale(typename E::Compute x, const Reduction& r) {
  using V = typename E::Compute;
  if constexpr (std::is_same_v<V, double>) {
    return mulRn(x, r.scaleD);
  } else if constexpr (kFloating<V>) {
    float p = mulRn(x, r.scaleF);
    return kRound ? E::round(p) : p;
  } else {
    using S = typename E::Storage;
    return static_cast<V>(static_cast<S>(static_cast<unsigned long long>(x) * r.scaleU));
  }
}

// A slice of elements handled by one thread of a cooperating group: elements
// first, first + stride, ... below n.
struct Span {
  size_t first = 0;
  size_t stride = 1;
};

// How many of elements [0, n) a span takes.
TH_HD inline size_t spanCount(Span s, size_t n) { return s.first < n ? (n - s.first + s.stride - 1) / s.stride : 0; }

struct alignas(16) Word16 {
  unsigned long long lo, hi;
};

// The element loops below issue the loads of four elements (i, i + stride, ...) before their stores: a thread
// then has four memory requests in flight instead of one (the first GPU run measured a lane's block at a few GB/s
// with one). dst may be a or b (in place): each element is still read before it is written.
constexpr int kUnroll = 4;

template <class E, uint8_t kKind, bool kScaleA>
TH_HD void combineElemLoop(const Reduction& r, void* dst, const void* a, const void* b, size_t n, Span s) {
  using V = typename E::Compute;
  const size_t count = spanCount(s, n);
  size_t k = 0;
  for (; k + kUnroll <= count; k += kUnroll) {
    V x[kUnroll], y[kUnroll];
    for (int u = 0; u < kUnroll; ++u) {
      x[u] = E::load(a, s.first + (k + u) * s.stride);
      y[u] = E::load(b, s.first + (k + u) * s.stride);
    }
    for (int u = 0; u < kUnroll; ++u) {
      if constexpr (kScaleA) x[u] = scale<E, true>(x[u], r);
      E::store(dst, s.first + (k + u) * s.stride, combine<kKind>(x[u], y[u]));
    }
  }
  for (; k < count; ++k) {
    const size_t i = s.first + k * s.stride;
    auto x = E::load(a, i);
    auto y = E::load(b, i);
    if constexpr (kScaleA) x = scale<E, true>(x, r);
    E::store(dst, i, combine<kKind>(x, y));
  }
}

template <class E>
TH_HD void scaleElemLoop(const Reduction& r, void* dst, const void* src, size_t n, Span s) {
  using V = typename E::Compute;
  const size_t count = spanCount(s, n);
  size_t k = 0;
  for (; k + kUnroll <= count; k += kUnroll) {
    V x[kUnroll];
    for (int u = 0; u < kUnroll; ++u) x[u] = E::load(src, s.first + (k + u) * s.stride);
    for (int u = 0; u < kUnroll; ++u) E::store(dst, s.first + (k + u) * s.stride, scale<E, false>(x[u], r));
  }
  for (; k < count; ++k) {
    const size_t i = s.first + k * s.stride;
    E::store(dst, i, scale<E, false>(E::load(src, i), r));
  }
}

// Reductions over 16-byte packs. A thread loads whole packs (8 bf16 or fp16 elements, 4 floats, 16 fp8 ...) of
// both inputs with one 16-byte load each, and two packs at a time: 64 bytes in flight per thread instead of the
// element loop's 4 elements per input (16 bytes for bf16), which is what bounds one block's bandwidth on a GPU
// (bytes in flight over latency); NVIDIA's kernels move 16 bytes per load too. The elements of a pack are
// decoded, combined and encoded one by one in registers, exactly as the element loop does, so the results are
// the same bits. Only when dst, a and b agree modulo 16 bytes: the elements before the first 16-byte boundary
// and after the last whole pack take the element loop, each shared among the team as the packs are.
template <class E>
struct Pack {
  using S = typename E::Storage;
  static constexpr size_t kElems = 16 / sizeof(S);
  S v[kElems];
};
constexpr int kPackUnroll = 2;

// Calls body(first element, count, span) for the head and tail elements and pack(index span) for the packs,
// when the three addresses share their alignment; returns false (nothing done) when they do not.
template <class S, class ElemFn, class PackFn>
TH_HD inline bool splitIntoPacks(const void* dst, const void* a, const void* b, size_t n, ElemFn&& elems,
                                 PackFn&& packs) {
  const uintptr_t d = reinterpret_cast<uintptr_t>(dst);
  if ((d - reinterpret_cast<uintptr_t>(a)) % 16 != 0 || (d - reinterpret_cast<uintptr_t>(b)) % 16 != 0 ||
      d % sizeof(S) != 0)
    return false;
  constexpr size_t kPerPack = 16 / sizeof(S);
  size_t head = (16 - d % 16) % 16 / sizeof(S);
  if (head > n) head = n;
  const size_t npacks = (n - head) / kPerPack;
  elems(size_t{0}, head);
  packs(head, npacks);
  elems(head + npacks * kPerPack, n - head - npacks * kPerPack);
  return true;
}

template <class E, uint8_t kKind, bool kScaleA>
TH_HD void combineLoop(const Reduction& r, void* dst, const void* a, const void* b, size_t n, Span s) {
  using S = typename E::Storage;
  using P = Pack<E>;
  auto elems = [&](size_t first, size_t count) {
    if (count == 0) return;
    combineElemLoop<E, kKind, kScaleA>(r, static_cast<S*>(dst) + first, static_cast<const S*>(a) + first,
                                       static_cast<const S*>(b) + first, count, s);
  };
  auto packs = [&](size_t first, size_t npacks) {
    auto* pd = reinterpret_cast<Word16*>(static_cast<S*>(dst) + first);
    const auto* pa = reinterpret_cast<const Word16*>(static_cast<const S*>(a) + first);
    const auto* pb = reinterpret_cast<const Word16*>(static_cast<const S*>(b) + first);
    auto one = [&](const Word16& wa, const Word16& wb) {
      const P x = bitCast<P>(wa), y = bitCast<P>(wb);
      P out;
      for (size_t j = 0; j < P::kElems; ++j) {
        auto u = E::load(x.v, j);
        if constexpr (kScaleA) u = scale<E, true>(u, r);
        E::store(out.v, j, combine<kKind>(u, E::load(y.v, j)));
      }
      return bitCast<Word16>(out);
    };
    const size_t count = spanCount(s, npacks);
    size_t k = 0;
    for (; k + kPackUnroll <= count; k += kPackUnroll) {
      Word16 wa[kPackUnroll], wb[kPackUnroll];
      for (int u = 0; u < kPackUnroll; ++u) {
        wa[u] = pa[s.first + (k + u) * s.stride];
        wb[u] = pb[s.first + (k + u) * s.stride];
      }
      for (int u = 0; u < kPackUnroll; ++u) pd[s.first + (k + u) * s.stride] = one(wa[u], wb[u]);
    }
    for (; k < count; ++k) {
      const size_t i = s.first + k * s.stride;
      pd[i] = one(pa[i], pb[i]);
    }
  };
  if (!splitIntoPacks<S>(dst, a, b, n, elems, packs)) combineElemLoop<E, kKind, kScaleA>(r, dst, a, b, n, s);
}

// dst = scale(src), in packs as combineLoop.
template <class E>
TH_HD void scaleLoop(const Reduction& r, void* dst, const void* src, size_t n, Span s) {
  using S = typename E::Storage;
  using P = Pack<E>;
  auto elems = [&](size_t first, size_t count) {
    if (count != 0) scaleElemLoop<E>(r, static_cast<S*>(dst) + first, static_cast<const S*>(src) + first, count, s);
  };
  auto packs = [&](size_t first, size_t npacks) {
    auto* pd = reinterpret_cast<Word16*>(static_cast<S*>(dst) + first);
    const auto* pa = reinterpret_cast<const Word16*>(static_cast<const S*>(src) + first);
    auto one = [&](const Word16& w) {
      const P x = bitCast<P>(w);
      P out;
      for (size_t j = 0; j < P::kElems; ++j) E::store(out.v, j, scale<E, false>(E::load(x.v, j), r));
      return bitCast<Word16>(out);
    };
    const size_t count = spanCount(s, npacks);
    size_t k = 0;
    for (; k + kPackUnroll <= count; k += kPackUnroll) {
      Word16 w[kPackUnroll];
      for (int u = 0; u < kPackUnroll; ++u) w[u] = pa[s.first + (k + u) * s.stride];
      for (int u = 0; u < kPackUnroll; ++u) pd[s.first + (k + u) * s.stride] = one(w[u]);
    }
    for (; k < count; ++k) pd[s.first + k * s.stride] = one(pa[s.first + k * s.stride]);
  };
  if (!splitIntoPacks<S>(dst, src, src, n, elems, packs)) scaleElemLoop<E>(r, dst, src, n, s);
}

template <class E, bool kScaleA>
TH_HD void combineKinds(const Reduction& r, void* dst, const void* a, const void* b, size_t n, Span s) {
  switch (r.kind) {
    case kOpSum: return combineLoop<E, kOpSum, kScaleA>(r, dst, a, b, n, s);
    case kOpProd: return combineLoop<E, kOpProd, kScaleA>(r, dst, a, b, n, s);
    case kOpMax: return combineLoop<E, kOpMax, kScaleA>(r, dst, a, b, n, s);
    default: return combineLoop<E, kOpMin, kScaleA>(r, dst, a, b, n, s);
  }
}

// A byte copy split among a team's threads: words of W where both addresses agree modulo sizeof(W), bytes for
// the unaligned head and the tail. Each thread takes words first, first + stride, ... (coalesced on a GPU).
template <class W>
TH_HD void copyWords(char* d, const char* a, size_t n, Span s) {
  const size_t head = (sizeof(W) - reinterpret_cast<uintptr_t>(d) % sizeof(W)) % sizeof(W);
  if (head >= n) {
    for (size_t i = s.first; i < n; i += s.stride) d[i] = a[i];
    return;
  }
  for (size_t i = s.first; i < head; i += s.stride) d[i] = a[i];
  const size_t words = (n - head) / sizeof(W);
  W* dw = reinterpret_cast<W*>(d + head);
  const W* aw = reinterpret_cast<const W*>(a + head);
  const size_t count = spanCount(s, words);
  size_t k = 0;
  for (; k + kUnroll <= count; k += kUnroll) {
    W w[kUnroll];
    for (int u = 0; u < kUnroll; ++u) w[u] = aw[s.first + (k + u) * s.stride];
    for (int u = 0; u < kUnroll; ++u) dw[s.first + (k + u) * s.stride] = w[u];
  }
  for (; k < count; ++k) dw[s.first + k * s.stride] = aw[s.first + k * s.stride];
  for (size_t k = head + words * sizeof(W) + s.first; k < n; k += s.stride) d[k] = a[k];
}

TH_HD inline void copyBytes(char* d, const char* a, size_t n, Span s) {
  const uintptr_t skew = reinterpret_cast<uintptr_t>(d) ^ reinterpret_cast<uintptr_t>(a);
  if (skew % 16 == 0) copyWords<Word16>(d, a, n, s);
  else if (skew % 8 == 0) copyWords<unsigned long long>(d, a, n, s);
  else if (skew % 4 == 0) copyWords<unsigned int>(d, a, n, s);
  else copyWords<unsigned char>(d, a, n, s);
}

template <class E>
TH_HD void divideLoop(const Reduction& r, void* dst, size_t n, Span s) {
  using V = typename E::Compute;
  for (size_t i = s.first; i < n; i += s.stride) {
    V x = E::load(dst, i);
    if constexpr (kFloating<V>) {
      E::store(dst, i, x / static_cast<V>(r.divisor));
    } else if constexpr (std::is_signed_v<V>) {
      E::store(dst, i, static_cast<V>(static_cast<long long>(x) / static_cast<long long>(r.divisor)));
    } else {
      E::store(dst, i, static_cast<V>(static_cast<unsigned long long>(x) / static_cast<unsigned long long>(r.divisor)));
    }
  }
}

// Calls f.template operator()<Elem>() for the element access of `type`.
template <class F>
TH_HD inline void withType(uint8_t type, F&& f) {
  switch (type) {
    case kInt8: return f.template operator()<NativeElem<int8_t>>();
    case kUint8: return f.template operator()<NativeElem<uint8_t>>();
    case kInt32: return f.template operator()<NativeElem<int32_t>>();
    case kUint32: return f.template operator()<NativeElem<uint32_t>>();
    case kInt64: return f.template operator()<NativeElem<int64_t>>();
    case kUint64: return f.template operator()<NativeElem<uint64_t>>();
    case kFloat16: return f.template operator()<NarrowElem<Half, uint16_t>>();
    case kFloat32: return f.template operator()<NativeElem<float>>();
    case kFloat64: return f.template operator()<NativeElem<double>>();
    case kBfloat16: return f.template operator()<NarrowElem<Bf16, uint16_t>>();
    case kFp8E4M3: return f.template operator()<NarrowElem<Fp8E4M3, uint8_t>>();
    default: return f.template operator()<NarrowElem<Fp8E5M2, uint8_t>>();
  }
}

// dst = a (op) b, or scale(a) (op) b with scaleA; n elements of r.type.
TH_HD inline void reduceElems(const Reduction& r, void* dst, const void* a, const void* b, size_t n, bool scaleA,
                              Span s = {}) {
  withType(r.type, [&]<class E>() {
    if (scaleA && r.preMul) combineKinds<E, true>(r, dst, a, b, n, s);
    else combineKinds<E, false>(r, dst, a, b, n, s);
  });
}

// dst = scale(src) (a copy without a PreMulSum).
TH_HD inline void scaleElems(const Reduction& r, void* dst, const void* src, size_t n, Span s = {}) {
  withType(r.type, [&]<class E>() { scaleLoop<E>(r, dst, src, n, s); });
}

// dst = dst / divisor (integer average; floating types divide and round).
TH_HD inline void divideElems(const Reduction& r, void* dst, size_t n, Span s = {}) {
  if (r.divisor == 1) return;
  withType(r.type, [&]<class E>() { divideLoop<E>(r, dst, n, s); });
}

// Reads a pending scalar into the scale fields (the host's conversion, see
// exec::kernels::scaleArgFor). False for an integer beyond 2^53 in magnitude,
// which the host path refuses too.
TH_HD inline bool resolveScalar(Reduction& r) {
  if (r.scalarSource == nullptr) return true;
  const void* p = r.scalarSource;
  r.scalarSource = nullptr;
  r.preMul = 1;
  long long i = 0;
  unsigned long long u = 0;
  switch (r.type) {
    case kFloat32: r.scaleF = *static_cast<const float*>(p); return true;
    case kFloat64: r.scaleD = *static_cast<const double*>(p); return true;
    case kFloat16: r.scaleF = Half::decode(*static_cast<const uint16_t*>(p)); return true;
    case kBfloat16: r.scaleF = Bf16::decode(*static_cast<const uint16_t*>(p)); return true;
    case kFp8E4M3: r.scaleF = Fp8E4M3::decode(*static_cast<const uint8_t*>(p)); return true;
    case kFp8E5M2: r.scaleF = Fp8E5M2::decode(*static_cast<const uint8_t*>(p)); return true;
    case kInt8: i = *static_cast<const int8_t*>(p); break;
    case kUint8: i = *static_cast<const uint8_t*>(p); break;
    case kInt32: i = *static_cast<const int32_t*>(p); break;
    case kUint32: i = *static_cast<const uint32_t*>(p); break;
    case kInt64: i = *static_cast<const int64_t*>(p); break;
    default:
      u = *static_cast<const uint64_t*>(p);
      if (u > (1ull << 53)) return false;
      r.scaleU = u;
      return true;
  }
  if (i > (1ll << 53) || i < -(1ll << 53)) return false;
  r.scaleU = static_cast<unsigned long long>(i);
  return true;
}

}  // namespace theseus::exec::dev
