// Every kernel of every kernel set this CPU can run (generic, avx2+f16c), for
// every datatype and operation, against the reference model: lengths around
// the vector and unroll boundaries, misaligned pointers, in place (dst == a,
// dst == b), inputs full of NaN/inf/zero/subnormal/extreme values, and guard
// bytes around dst that must stay untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "exec/reduce_kernels.h"
#include "reduce_reference.h"

namespace theseus::exec {
namespace {

using kernels::KernelTable;
using kernels::ScaleArg;

constexpr size_t kLengths[] = {0, 1, 7, 8, 15, 16, 17, 1000, 4097};
constexpr ncclDataType_t kTypes[] = {ncclInt8,   ncclUint8,   ncclInt32,   ncclUint32,     ncclInt64,     ncclUint64,
                                     ncclFloat16, ncclFloat32, ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
constexpr const char* kTypeNames[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                                      "half", "float", "double", "bf16", "e4m3", "e5m2"};
constexpr const char* kKindNames[] = {"sum", "prod", "max", "min"};
constexpr uint32_t kDivisor = 7;
constexpr size_t kGuard = 64;
constexpr unsigned char kCanary = 0xa5;

std::vector<const KernelTable*> kernelSets() {
  std::vector<const KernelTable*> sets = {&kernels::genericKernels()};
  if (const KernelTable* avx2 = kernels::avx2Kernels()) sets.push_back(avx2);
  return sets;
}

// A value that stresses the type: specials, extremes, moderate values whose
// sums and products round, and raw random bit patterns.
uint64_t randomElem(ncclDataType_t t, std::mt19937_64& rng) {
  const uint64_t bits = rng();
  const int pick = static_cast<int>(rng() % 16);
  if (!ref::isFloating(t)) {
    if (pick == 0) return 0;
    if (pick == 1) return ref::truncRaw(t, ~uint64_t{0});                  // -1 / max unsigned
    if (pick == 2) return ref::truncRaw(t, uint64_t{1} << (8 * ref::elemSize(t) - 1));  // min signed
    if (pick < 8) return ref::truncRaw(t, bits % 64);                      // small: products stay exact
    return ref::truncRaw(t, bits);
  }
  static const double kSpecials[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, -NAN, 1e-45, -1e-300, 65504.0, 448.0};
  if (pick == 0) return ref::fromDouble(t, kSpecials[bits % 10]);
  if (pick < 4) return ref::truncRaw(t, bits);  // any code: NaN payloads, subnormals, huge values
  // Moderate: a random 24-bit significand scaled into [2^-8, 2^8).
  double v = std::ldexp(static_cast<double>(bits & 0xffffff), static_cast<int>((bits >> 24) % 16) - 32);
  if ((bits >> 40) & 1) v = -v;
  return ref::fromDouble(t, v);
}

// The PreMulSum scalar used by the tests, as the kernels receive it and as the reference sees it.
struct TestScale {
  ScaleArg arg;
  double value;
};
TestScale testScale(ncclDataType_t t) {
  TestScale s;
  if (ref::isFloating(t)) {
    s.value = ref::toDouble(t, ref::fromDouble(t, 1.0 / 3.0));  // 1/3 rounded to the type
    s.arg.f = static_cast<float>(s.value);
    s.arg.d = s.value;
  } else {
    s.value = -3.0;  // a negative multiplier exercises wrapping on unsigned types too
    s.arg.u = static_cast<uint64_t>(int64_t{-3});
  }
  return s;
}

enum class Variant { kCombine, kScaleA, kScale, kDivide };
enum class Alias { kNone, kDstIsA, kDstIsB };

struct Case {
  const KernelTable* table;
  ncclDataType_t type;
  Variant variant;
  int kind;  // for kCombine / kScaleA
};

std::string describe(const Case& c, size_t n, Alias alias, size_t misalign) {
  static const char* variants[] = {"combine", "combineScaleA", "scale", "divide"};
  std::string s = std::string(c.table->isa) + " " + kTypeNames[c.type] + " " + variants[static_cast<int>(c.variant)];
  if (c.variant == Variant::kCombine || c.variant == Variant::kScaleA) s += std::string(" ") + kKindNames[c.kind];
  s += " n=" + std::to_string(n) + " alias=" + std::to_string(static_cast<int>(alias)) +
       " misalign=" + std::to_string(misalign);
  return s;
}

uint64_t expected(const Case& c, uint64_t x, uint64_t y, const TestScale& s) {
  const auto kind = static_cast<ref::Kind>(c.kind);
  switch (c.variant) {
    case Variant::kCombine: return ref::combineRaw(c.type, kind, x, y);
    case Variant::kScaleA: return ref::combineRaw(c.type, kind, ref::scaleRaw(c.type, x, s.value), y);
    case Variant::kScale: return ref::scaleRaw(c.type, x, s.value);
    case Variant::kDivide: return ref::divideRaw(c.type, x, kDivisor);
  }
  return 0;
}

void runKernel(const Case& c, unsigned char* d, const unsigned char* a, const unsigned char* b, size_t n,
               const TestScale& s) {
  switch (c.variant) {
    case Variant::kCombine: c.table->combine[c.kind][c.type](d, a, b, n, s.arg); break;
    case Variant::kScaleA: c.table->combineScaleA[c.kind][c.type](d, a, b, n, s.arg); break;
    case Variant::kScale: c.table->scale[c.type](d, a, n, s.arg); break;
    case Variant::kDivide: c.table->divide[c.type](d, n, kDivisor); break;
  }
}

// Runs one case for one length, aliasing and misalignment; returns the number of wrong elements.
int checkOne(const Case& c, size_t n, Alias alias, size_t misalign, std::mt19937_64& rng) {
  const size_t es = ref::elemSize(c.type);
  const size_t bytes = n * es;
  // Three separate arenas with guard zones; data starts `misalign` bytes past a 64-byte boundary.
  std::vector<unsigned char> arena[3];
  unsigned char* p[3];
  for (int k = 0; k < 3; ++k) {
    arena[k].assign(bytes + 2 * kGuard + 128, kCanary);
    uintptr_t base = reinterpret_cast<uintptr_t>(arena[k].data()) + kGuard;
    base = (base + 63) & ~uintptr_t{63};
    p[k] = reinterpret_cast<unsigned char*>(base) + (misalign * (k + 1)) % 8;
  }
  std::vector<uint64_t> xa(n), xb(n);
  for (size_t i = 0; i < n; ++i) {
    xa[i] = randomElem(c.type, rng);
    xb[i] = randomElem(c.type, rng);
    ref::storeRaw(c.type, p[0] + i * es, xa[i]);
    ref::storeRaw(c.type, p[1] + i * es, xb[i]);
  }
  unsigned char* dst = alias == Alias::kDstIsA ? p[0] : alias == Alias::kDstIsB ? p[1] : p[2];
  // divide() works in place on dst: give it a's values.
  if (c.variant == Variant::kDivide && dst != p[0]) std::memcpy(dst, p[0], bytes);
  const TestScale s = testScale(c.type);
  runKernel(c, dst, p[0], p[1], n, s);

  int wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    uint64_t got = ref::loadRaw(c.type, dst + i * es);
    uint64_t want = expected(c, xa[i], xb[i], s);
    if (!ref::sameResult(c.type, got, want)) {
      if (++wrong <= 3)
        ADD_FAILURE() << describe(c, n, alias, misalign) << ": element " << i << " a=0x" << std::hex << xa[i]
                      << " b=0x" << xb[i] << " got 0x" << got << " want 0x" << want;
    }
  }
  for (size_t k = 1; k <= kGuard && !wrong; ++k) {
    if (dst[-static_cast<ptrdiff_t>(k)] != kCanary || dst[bytes + k - 1] != kCanary) {
      ADD_FAILURE() << describe(c, n, alias, misalign) << ": wrote outside dst";
      ++wrong;
      break;
    }
  }
  // Inputs that are not dst must be unchanged.
  for (size_t i = 0; i < n && !wrong; ++i) {
    if ((dst != p[0] && ref::loadRaw(c.type, p[0] + i * es) != xa[i]) ||
        (dst != p[1] && ref::loadRaw(c.type, p[1] + i * es) != xb[i])) {
      ADD_FAILURE() << describe(c, n, alias, misalign) << ": modified an input";
      ++wrong;
    }
  }
  return wrong;
}

void sweep(const Case& c) {
  std::mt19937_64 rng(0x5eed + c.type * 131 + static_cast<int>(c.variant) * 17 + c.kind);
  const bool binary = c.variant == Variant::kCombine || c.variant == Variant::kScaleA;
  for (size_t n : kLengths) {
    for (size_t misalign : {size_t{0}, size_t{3}}) {
      for (Alias alias : {Alias::kNone, Alias::kDstIsA, Alias::kDstIsB}) {
        if (!binary && alias == Alias::kDstIsB) continue;
        if (c.variant == Variant::kDivide && alias == Alias::kNone) continue;
        ASSERT_EQ(checkOne(c, n, alias, misalign, rng), 0);
      }
    }
  }
}

class KernelSweep : public ::testing::TestWithParam<ncclDataType_t> {};

TEST_P(KernelSweep, CombineEveryOperation) {
  for (const KernelTable* t : kernelSets())
    for (int kind = 0; kind < kernels::kNumKinds; ++kind) sweep({t, GetParam(), Variant::kCombine, kind});
}

TEST_P(KernelSweep, CombineWithScaledFirstOperand) {
  for (const KernelTable* t : kernelSets())
    for (int kind = 0; kind < kernels::kNumKinds; ++kind) sweep({t, GetParam(), Variant::kScaleA, kind});
}

TEST_P(KernelSweep, ScaleCopy) {
  for (const KernelTable* t : kernelSets()) sweep({t, GetParam(), Variant::kScale, 0});
}

TEST_P(KernelSweep, DivideInPlace) {
  for (const KernelTable* t : kernelSets()) sweep({t, GetParam(), Variant::kDivide, 0});
}

INSTANTIATE_TEST_SUITE_P(Types, KernelSweep, ::testing::ValuesIn(kTypes),
                         [](const auto& info) { return std::string(kTypeNames[info.param]); });

// The kernel sets agree on a long random input (bit for bit, except that
// which NaN comes out of a NaN operation is not specified), so results never
// depend on the CPU a rank runs on.
TEST(KernelSets, AvxAndGenericGiveIdenticalBits) {
  const KernelTable* avx2 = kernels::avx2Kernels();
  if (avx2 == nullptr) GTEST_SKIP() << "this CPU cannot run the avx2+f16c kernels";
  const KernelTable& generic = kernels::genericKernels();
  std::mt19937_64 rng(7);
  const size_t n = 10007;
  for (ncclDataType_t t : kTypes) {
    const size_t es = ref::elemSize(t);
    std::vector<unsigned char> a(n * es), b(n * es), d1(n * es), d2(n * es);
    for (size_t i = 0; i < n; ++i) {
      ref::storeRaw(t, &a[i * es], randomElem(t, rng));
      ref::storeRaw(t, &b[i * es], randomElem(t, rng));
    }
    const TestScale s = testScale(t);
    for (int kind = 0; kind < kernels::kNumKinds; ++kind) {
      generic.combine[kind][t](d1.data(), a.data(), b.data(), n, s.arg);
      avx2->combine[kind][t](d2.data(), a.data(), b.data(), n, s.arg);
      if (ref::isFloating(t)) {
        for (size_t i = 0; i < n; ++i)
          ASSERT_TRUE(ref::sameResult(t, ref::loadRaw(t, &d1[i * es]), ref::loadRaw(t, &d2[i * es])))
              << kTypeNames[t] << " " << kKindNames[kind] << " element " << i;
      } else {
        ASSERT_EQ(d1, d2) << kTypeNames[t] << " " << kKindNames[kind];
      }
    }
    generic.scale[t](d1.data(), a.data(), n, s.arg);
    avx2->scale[t](d2.data(), a.data(), n, s.arg);
    for (size_t i = 0; i < n; ++i)
      ASSERT_TRUE(ref::sameResult(t, ref::loadRaw(t, &d1[i * es]), ref::loadRaw(t, &d2[i * es])))
          << kTypeNames[t] << " scale element " << i;
  }
}

}  // namespace
}  // namespace theseus::exec
