// The reduction kernels, written once and compiled once per instruction set.
//
// This file is included *textually* by reduce_kernels_generic.cc and
// reduce_kernels_avx2.cc, inside an anonymous namespace and after that file's
// `#pragma GCC target` (if any), so every function here has internal linkage
// and is generated for that file's ISA: no inline function built for AVX2 can
// be shared with (and picked by the linker for) the baseline build. The
// including file must first include <cstring>, <cstdint>, <type_traits>,
// <utility>, exec/reduce_codec.h and exec/reduce_kernels.h, and define:
//   kVecBytes                    bytes per vector register (16 or 32)
//   THESEUS_REDUCE_HAVE_F16C     1 to convert half with the F16C instructions
//
// How the kernels work. Elements are moved in GCC vectors (`vector_size`) of
// kVecBytes ("registers"; for the narrow floats a register is several float
// vectors, see Packed). Loads and stores go through memcpy, so any alignment
// is fine, and every iteration loads all its inputs before it stores, so dst may alias
// a or b exactly (not partially). The compute type of a vector lane is the
// element type itself for integers, float and double, and float for half,
// bfloat16 and fp8, which are decoded on load and rounded (to nearest even)
// on store. The main loop moves 4 registers per iteration (fewer for the
// software conversions, whose registers are wider and whose constants need
// space), then single registers, then the remainder goes through a
// zero-padded stack copy of one register, so the tail runs exactly the same
// arithmetic as the body.
//
// Semantics of the operations (see exec/reduce.h):
//  * integers: sum and prod wrap (computed in the unsigned type); max/min
//    compare as the signed or unsigned element type.
//  * floating max/min are IEEE maxNum/minNum: a NaN operand is ignored unless
//    both are NaN; between +0 and -0 max returns +0 and min returns -0. Both
//    are therefore commutative and associative, so any reduction order gives
//    the same bits.
//  * pre-multiplication (scale) multiplies in the compute type and rounds the
//    product to the element type before it is combined, as NCCL's PreMulSum
//    does with a scalar of the element type.

#ifndef THESEUS_REDUCE_HAVE_F16C
#error "reduce_kernel_body.h is included by the reduce_kernels_*.cc files only"
#endif

// (A typedef inside a class: GCC drops vector_size from dependent alias templates.)
template <class T, size_t N>
struct VecType {
  typedef T type __attribute__((vector_size(N)));
};
template <class T, size_t N>
using Vec = typename VecType<T, N>::type;

template <class V>
using LaneOf = std::remove_cvref_t<decltype(std::declval<V>()[0])>;

template <size_t kBytes>
struct UIntOfSize;
template <>
struct UIntOfSize<1> { using type = uint8_t; };
template <>
struct UIntOfSize<2> { using type = uint16_t; };
template <>
struct UIntOfSize<4> { using type = uint32_t; };
template <>
struct UIntOfSize<8> { using type = uint64_t; };

// The unsigned integer vector with the lane size and count of V.
template <class V>
using UVecOf = Vec<typename UIntOfSize<sizeof(LaneOf<V>)>::type, sizeof(V)>;

template <class V>
inline V loadVec(const char* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}
template <class V>
inline void storeVec(char* p, V v) {
  std::memcpy(p, &v, sizeof(V));
}

// ---- element codecs: load/store one vector of elements, compute type V ----

// Integers, float and double: the element is the compute type.
template <class T>
struct Native {
  static constexpr size_t kElemBytes = sizeof(T);
  static constexpr size_t kLanes = kVecBytes / sizeof(T);
  static constexpr size_t kUnroll = 4;
  using V = Vec<T, kVecBytes>;
  using Reg = V;
  static V load(const char* p) { return loadVec<V>(p); }
  static void store(char* p, V v) { storeVec(p, v); }
  template <class F>
  static V map(F f, V x, V y) {
    return f(x, y);
  }
  static V round(V v) { return v; }
};

using VU32 = Vec<uint32_t, kVecBytes>;

// Narrow floats computed in float (Fmt is a codec from reduce_codec.h),
// without moving any lane: a 32-bit word holds kPerWord codes (2 half or
// bfloat16, 4 fp8), and code k of every word is shifted down and masked into
// its own float vector, combined, then encoded and ORed back into place. So a
// register (Reg) carries kPerWord float vectors and no shuffles are needed.
// Loads do not quiet NaNs (stores do), see codec::SmallFloat::decode.
template <class Fmt, class Storage>
struct Packed {
  static constexpr size_t kPerWord = sizeof(uint32_t) / sizeof(Storage);
  static constexpr uint32_t kBits = 8 * sizeof(Storage);
  static constexpr uint32_t kMask = (1u << kBits) - 1;
  static constexpr size_t kElemBytes = sizeof(Storage);
  static constexpr size_t kLanes = kVecBytes / sizeof(Storage);
  static constexpr size_t kUnroll = kPerWord == 2 ? 2 : 1;
  using V = Vec<float, kVecBytes>;
  struct Reg {
    V part[kPerWord];
  };
  using Parts = std::make_index_sequence<kPerWord>;

  static Reg load(const char* p) { return split(loadVec<VU32>(p), Parts{}); }
  static void store(char* p, const Reg& r) { storeVec(p, join(r, Parts{})); }
  template <class F>
  static Reg map(F f, const Reg& x, const Reg& y) {
    return mapParts(f, x, y, Parts{});
  }
  static V round(V v) {
    if constexpr (kBf16) {
      return codec::asFloat(VU32(Fmt::encodeHigh(v)));
    } else {
      return Fmt::template decode<false>(Fmt::encode(v));
    }
  }

 private:
  // bfloat16 is the high half of a float: its parts need one AND or shift each.
  static constexpr bool kBf16 = std::is_same_v<Fmt, codec::Bf16>;

  template <size_t... K>
  static Reg split(VU32 w, std::index_sequence<K...>) {
    if constexpr (kBf16) {
      return Reg{{codec::asFloat(VU32(w << 16)), codec::asFloat(VU32(w & 0xffff0000u))}};
    } else {
      return Reg{{Fmt::template decode<false>(VU32((w >> (kBits * K)) & kMask))...}};
    }
  }
  template <size_t... K>
  static VU32 join(const Reg& r, std::index_sequence<K...>) {
    if constexpr (kBf16) {
      return VU32(Fmt::encodeHigh(r.part[0]) >> 16) | VU32(Fmt::encodeHigh(r.part[1]));
    } else {
      return (VU32(Fmt::encode(r.part[K]) << (kBits * K)) | ...);
    }
  }
  template <class F, size_t... K>
  static Reg mapParts(F f, const Reg& x, const Reg& y, std::index_sequence<K...>) {
    return Reg{{f(x.part[K], y.part[K])...}};
  }
};

#if THESEUS_REDUCE_HAVE_F16C
// Half through the F16C conversions (round to nearest even in the immediate,
// independent of MXCSR). Bit-identical to codec::Half, which the tests check.
struct HalfF16c {
  static constexpr size_t kElemBytes = 2;
  static constexpr size_t kLanes = 8;
  static constexpr size_t kUnroll = 4;
  using V = Vec<float, 32>;
  using Reg = V;
  static_assert(kVecBytes == 32, "F16C kernels use 256-bit vectors");
  template <class F>
  static V map(F f, V x, V y) {
    return f(x, y);
  }
  static V load(const char* p) { return V(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))); }
  static void store(char* p, V v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(__m256(v), _MM_FROUND_TO_NEAREST_INT));
  }
  static V round(V v) { return V(_mm256_cvtph_ps(_mm256_cvtps_ph(__m256(v), _MM_FROUND_TO_NEAREST_INT))); }
};
using HalfElem = HalfF16c;
#else
using HalfElem = Packed<codec::Half, uint16_t>;
#endif
using Bf16Elem = Packed<codec::Bf16, uint16_t>;
using E4M3Elem = Packed<codec::Fp8E4M3, uint8_t>;
using E5M2Elem = Packed<codec::Fp8E5M2, uint8_t>;

// ---- operations on compute vectors ----

template <class V>
constexpr bool kFloatLanes = std::is_floating_point_v<LaneOf<V>>;

template <class V>
inline V opSum(V x, V y) {
  if constexpr (kFloatLanes<V>) {
    return x + y;
  } else {
    using U = UVecOf<V>;
    return V(U(x) + U(y));
  }
}

template <class V>
inline V opProd(V x, V y) {
  if constexpr (kFloatLanes<V>) {
    return x * y;
  } else {
    using U = UVecOf<V>;
    return V(U(x) * U(y));
  }
}

// maxNum with +0 > -0 (see the file comment). For equal lanes the bitwise AND
// of the two encodings picks +0 over -0 and is the value itself otherwise.
template <class V>
inline V opMax(V x, V y) {
  if constexpr (kFloatLanes<V>) {
    using U = UVecOf<V>;
    V r = x > y ? x : y;
    r = x == y ? V(U(x) & U(y)) : r;
    r = y != y ? x : r;
    return x != x ? y : r;
  } else {
    return x > y ? x : y;
  }
}

// minNum with -0 < +0: for equal lanes the bitwise OR picks -0.
template <class V>
inline V opMin(V x, V y) {
  if constexpr (kFloatLanes<V>) {
    using U = UVecOf<V>;
    V r = x < y ? x : y;
    r = x == y ? V(U(x) | U(y)) : r;
    r = y != y ? x : r;
    return x != x ? y : r;
  } else {
    return x < y ? x : y;
  }
}

template <RedKind K, class V>
inline V combineOp(V x, V y) {
  if constexpr (K == RedKind::kSum) return opSum(x, y);
  if constexpr (K == RedKind::kProd) return opProd(x, y);
  if constexpr (K == RedKind::kMax) return opMax(x, y);
  if constexpr (K == RedKind::kMin) return opMin(x, y);
}

// x * scale, rounded to the element type (kRound=false when the value is
// stored right away: the store rounds, and rounding twice changes nothing).
template <class E, bool kRound = true>
inline typename E::V scaleOp(typename E::V x, const ScaleArg& s) {
  using V = typename E::V;
  using Lane = LaneOf<V>;
  if constexpr (std::is_same_v<Lane, double>) {
    return x * s.d;
  } else if constexpr (std::is_same_v<Lane, float>) {
    if constexpr (kRound) return E::round(x * s.f);
    return x * s.f;
  } else {
    using U = UVecOf<V>;
    using ULane = LaneOf<U>;
    return V(U(x) * static_cast<ULane>(s.u));
  }
}

// ---- loops ----

// Applies `f(x, y) -> V` to n elements of a and (when kBinary) b, writing
// dst; unary kernels get y == x. See the file comment for the loop shape.
template <class E, bool kBinary, class F>
inline void forEachVector(char* d, const char* a, const char* b, size_t n, F f) {
  using Reg = typename E::Reg;
  constexpr size_t kL = E::kLanes;
  constexpr size_t kStep = kL * E::kElemBytes;
  size_t i = 0;
  if constexpr (E::kUnroll == 4) {
    for (; i + 4 * kL <= n; i += 4 * kL) {
      const size_t o = i * E::kElemBytes;
      Reg x0 = E::load(a + o), x1 = E::load(a + o + kStep);
      Reg x2 = E::load(a + o + 2 * kStep), x3 = E::load(a + o + 3 * kStep);
      Reg y0 = x0, y1 = x1, y2 = x2, y3 = x3;
      if constexpr (kBinary) {
        y0 = E::load(b + o);
        y1 = E::load(b + o + kStep);
        y2 = E::load(b + o + 2 * kStep);
        y3 = E::load(b + o + 3 * kStep);
      }
      E::store(d + o, E::map(f, x0, y0));
      E::store(d + o + kStep, E::map(f, x1, y1));
      E::store(d + o + 2 * kStep, E::map(f, x2, y2));
      E::store(d + o + 3 * kStep, E::map(f, x3, y3));
    }
  } else if constexpr (E::kUnroll == 2) {
    for (; i + 2 * kL <= n; i += 2 * kL) {
      const size_t o = i * E::kElemBytes;
      Reg x0 = E::load(a + o), x1 = E::load(a + o + kStep);
      Reg y0 = x0, y1 = x1;
      if constexpr (kBinary) {
        y0 = E::load(b + o);
        y1 = E::load(b + o + kStep);
      }
      E::store(d + o, E::map(f, x0, y0));
      E::store(d + o + kStep, E::map(f, x1, y1));
    }
  }
  for (; i + kL <= n; i += kL) {
    const size_t o = i * E::kElemBytes;
    Reg x = E::load(a + o);
    Reg y = x;
    if constexpr (kBinary) y = E::load(b + o);
    E::store(d + o, E::map(f, x, y));
  }
  if (i < n) {
    // The tail: one zero-padded register, read completely before dst is written.
    const size_t o = i * E::kElemBytes, bytes = (n - i) * E::kElemBytes;
    alignas(64) char ta[kStep] = {}, tb[kStep] = {}, td[kStep];
    std::memcpy(ta, a + o, bytes);
    Reg x = E::load(ta);
    Reg y = x;
    if constexpr (kBinary) {
      std::memcpy(tb, b + o, bytes);
      y = E::load(tb);
    }
    E::store(td, E::map(f, x, y));
    std::memcpy(d + o, td, bytes);
  }
}

template <class E, RedKind K, bool kScaleA>
void binaryKernel(void* dst, const void* a, const void* b, size_t n, const ScaleArg& s) {
  using V = typename E::V;
  forEachVector<E, true>(static_cast<char*>(dst), static_cast<const char*>(a), static_cast<const char*>(b), n,
                         [&](V x, V y) {  // s is used only when scaling (clang warns about [&s])
                           if constexpr (kScaleA) x = scaleOp<E>(x, s);
                           return combineOp<K>(x, y);
                         });
}

template <class E>
void scaleKernel(void* dst, const void* src, size_t n, const ScaleArg& s) {
  using V = typename E::V;
  forEachVector<E, false>(static_cast<char*>(dst), static_cast<const char*>(src), nullptr, n,
                          [&s](V x, V) { return scaleOp<E, false>(x, s); });
}

// Integer division truncates toward zero, computed in 64 bits so that any
// divisor works for every element width (NCCL's integer avg does the same).
// Floating types divide in their compute type and round.
template <class E>
void divideKernel(void* dst, size_t n, uint32_t divisor) {
  using V = typename E::V;
  using Lane = LaneOf<V>;
  char* d = static_cast<char*>(dst);
  if constexpr (std::is_floating_point_v<Lane>) {
    const Lane div = static_cast<Lane>(divisor);
    forEachVector<E, false>(d, d, nullptr, n, [div](V x, V) { return x / div; });
  } else {
    using Wide = std::conditional_t<std::is_signed_v<Lane>, int64_t, uint64_t>;
    for (size_t i = 0; i < n; ++i) {
      Lane x;
      std::memcpy(&x, d + i * sizeof(Lane), sizeof(Lane));
      x = static_cast<Lane>(static_cast<Wide>(x) / static_cast<Wide>(divisor));
      std::memcpy(d + i * sizeof(Lane), &x, sizeof(Lane));
    }
  }
}

template <class E>
void fillType(KernelTable& t, ncclDataType_t type) {
  t.combine[0][type] = &binaryKernel<E, RedKind::kSum, false>;
  t.combine[1][type] = &binaryKernel<E, RedKind::kProd, false>;
  t.combine[2][type] = &binaryKernel<E, RedKind::kMax, false>;
  t.combine[3][type] = &binaryKernel<E, RedKind::kMin, false>;
  t.combineScaleA[0][type] = &binaryKernel<E, RedKind::kSum, true>;
  t.combineScaleA[1][type] = &binaryKernel<E, RedKind::kProd, true>;
  t.combineScaleA[2][type] = &binaryKernel<E, RedKind::kMax, true>;
  t.combineScaleA[3][type] = &binaryKernel<E, RedKind::kMin, true>;
  t.scale[type] = &scaleKernel<E>;
  t.divide[type] = &divideKernel<E>;
}

KernelTable buildTable(const char* isa) {
  static_assert(static_cast<int>(RedKind::kSum) == 0 && static_cast<int>(RedKind::kMin) == kNumKinds - 1);
  KernelTable t;
  t.isa = isa;
  fillType<Native<int8_t>>(t, ncclInt8);
  fillType<Native<uint8_t>>(t, ncclUint8);
  fillType<Native<int32_t>>(t, ncclInt32);
  fillType<Native<uint32_t>>(t, ncclUint32);
  fillType<Native<int64_t>>(t, ncclInt64);
  fillType<Native<uint64_t>>(t, ncclUint64);
  fillType<HalfElem>(t, ncclFloat16);
  fillType<Native<float>>(t, ncclFloat32);
  fillType<Native<double>>(t, ncclFloat64);
  fillType<Bf16Elem>(t, ncclBfloat16);
  fillType<E4M3Elem>(t, ncclFloat8e4m3);
  fillType<E5M2Elem>(t, ncclFloat8e5m2);
  return t;
}
