// The -c reference values: for every datatype, operation and rank count, a
// simulated library that reduces in different orders (ring, reversed, random,
// tree) and rounds to the type at every step must match the InputModel's
// expected result within its stated tolerance, and a corrupted element must
// be caught. This is what makes the harness' "exact regardless of order" claim
// a tested fact rather than a hope.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "perf_verify.h"

namespace theseus::perf {
namespace {

using Bits = std::vector<uint64_t>;

double roundT(ncclDataType_t t, double v) { return decodeFloat(t, encodeFloat(t, v)); }

int64_t asSigned(const TypeInfo& ti, uint64_t b) {
  int bits = static_cast<int>(ti.size * 8);
  return bits == 64 ? static_cast<int64_t>(b) : static_cast<int64_t>(b << (64 - bits)) >> (64 - bits);
}

// One plausible correct library: `scalarInType` rounds 1/n to the type first.
struct Library {
  ncclDataType_t t;
  OpKind op;
  int n;
  bool scalarInType;

  double prepare(double x, int rank) const {
    if (op == OpKind::kAvg) {
      double s = scalarInType ? roundT(t, 1.0 / n) : 1.0 / n;
      return roundT(t, x * s);
    }
    if (op == OpKind::kMulSum) return roundT(t, x * (1 + (rank & 1)));
    return x;
  }
  double combineF(double a, double b) const {
    switch (op) {
      case OpKind::kProd: return roundT(t, a * b);
      case OpKind::kMax: return std::max(a, b);
      case OpKind::kMin: return std::min(a, b);
      default: return roundT(t, a + b);
    }
  }
  uint64_t combineI(uint64_t a, uint64_t b) const {
    const TypeInfo& ti = typeInfo(t);
    switch (op) {
      case OpKind::kProd: return a * b;
      case OpKind::kMax:
        return ti.isSigned ? (asSigned(ti, a) >= asSigned(ti, b) ? a : b) : std::max(lowBits(a), lowBits(b));
      case OpKind::kMin:
        return ti.isSigned ? (asSigned(ti, a) <= asSigned(ti, b) ? a : b) : std::min(lowBits(a), lowBits(b));
      default: return a + b;
    }
  }
  uint64_t lowBits(uint64_t v) const {
    size_t s = typeInfo(t).size;
    return s == 8 ? v : v & ((uint64_t{1} << (8 * s)) - 1);
  }
  uint64_t prepareI(uint64_t x, int rank) const { return op == OpKind::kMulSum ? x * (1 + (rank & 1)) : x; }

  // Reduces element i of every rank in `order`, or as a pairwise tree.
  uint64_t reduce(const std::vector<Bits>& in, size_t i, const std::vector<int>& order, bool tree) const {
    const TypeInfo& ti = typeInfo(t);
    if (ti.isFloat) {
      std::vector<double> v;
      for (int r : order) v.push_back(prepare(decodeFloat(t, in[r][i]), r));
      while (tree && v.size() > 1) {
        std::vector<double> next;
        for (size_t k = 0; k + 1 < v.size(); k += 2) next.push_back(combineF(v[k], v[k + 1]));
        if (v.size() % 2) next.push_back(v.back());
        v = next;
      }
      double acc = v[0];
      for (size_t k = 1; k < v.size(); ++k) acc = combineF(acc, v[k]);
      return encodeFloat(t, acc);
    }
    std::vector<uint64_t> v;
    for (int r : order) v.push_back(prepareI(ti.isSigned ? static_cast<uint64_t>(asSigned(ti, in[r][i])) : in[r][i], r));
    while (tree && v.size() > 1) {
      std::vector<uint64_t> next;
      for (size_t k = 0; k + 1 < v.size(); k += 2) next.push_back(combineI(v[k], v[k + 1]));
      if (v.size() % 2) next.push_back(v.back());
      v = next;
    }
    uint64_t acc = v[0];
    for (size_t k = 1; k < v.size(); ++k) acc = combineI(acc, v[k]);
    if (op == OpKind::kAvg)
      acc = ti.isSigned ? static_cast<uint64_t>(static_cast<int64_t>(acc) / n) : lowBits(acc) / n;
    return lowBits(acc);
  }
};

std::vector<Bits> inputsOf(const InputModel& m, size_t count) {
  std::vector<Bits> in(m.nranks(), Bits(count));
  std::vector<char> buf(count * m.eltSize());
  for (int r = 0; r < m.nranks(); ++r) {
    m.fillInput(r, 0, count, buf.data());
    for (size_t i = 0; i < count; ++i) in[r][i] = loadBits(buf.data(), i, m.eltSize());
  }
  return in;
}

class ReductionOrders : public testing::TestWithParam<ncclDataType_t> {};

TEST_P(ReductionOrders, AnyOrderMatchesTheExpectedResult) {
  const ncclDataType_t t = GetParam();
  const TypeInfo& ti = typeInfo(t);
  const size_t count = 1500;
  std::mt19937 rng(42);
  for (OpKind op : allOps()) {
    for (int n : {1, 2, 3, 4, 5, 7, 8, 16}) {
      InputModel m(t, op, n, 1000 + n);
      std::vector<Bits> in = inputsOf(m, count);
      std::vector<char> expected(count * ti.size);
      m.fillReduced(0, count, expected.data());
      std::vector<int> ring(n);
      std::iota(ring.begin(), ring.end(), 0);
      std::vector<int> rev(ring.rbegin(), ring.rend());
      std::vector<int> shuffled = ring;
      std::shuffle(shuffled.begin(), shuffled.end(), rng);
      struct Variant {
        const std::vector<int>* order;
        bool tree;
        bool scalarInType;
      };
      for (Variant v : {Variant{&ring, false, false}, Variant{&rev, false, true}, Variant{&shuffled, false, false},
                        Variant{&shuffled, true, true}, Variant{&ring, true, false}}) {
        Library lib{t, op, n, v.scalarInType};
        std::vector<char> got(count * ti.size);
        for (size_t i = 0; i < count; ++i) storeBits(got.data(), i, ti.size, lib.reduce(in, i, *v.order, v.tree));
        size_t first = 0;
        size_t bad = countMismatches(t, got.data(), expected.data(), count, m.toleranceUlps(), &first);
        ASSERT_EQ(bad, 0u) << ti.name << " " << opName(op) << " n=" << n << " tree=" << v.tree
                           << " first bad index " << first << " got " << loadBits(got.data(), first, ti.size)
                           << " expected " << loadBits(expected.data(), first, ti.size);
        // A corrupted element is caught (a high exponent bit for floats, any bit for integers).
        int bit = ti.isFloat ? ti.expBits + ti.mantBits - 1 : 0;
        storeBits(got.data(), count / 2, ti.size, loadBits(got.data(), count / 2, ti.size) ^ (uint64_t{1} << bit));
        EXPECT_EQ(countMismatches(t, got.data(), expected.data(), count, m.toleranceUlps()), 1u)
            << ti.name << " " << opName(op) << " n=" << n;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, ReductionOrders, testing::ValuesIn(allTypes()),
                         [](const testing::TestParamInfo<ncclDataType_t>& p) {
                           return std::string(typeInfo(p.param).name);
                         });

TEST(InputModel, InputsAreRepresentableDeterministicAndVaried) {
  for (ncclDataType_t t : allTypes()) {
    const TypeInfo& ti = typeInfo(t);
    for (OpKind op : allOps()) {
      InputModel a(t, op, 3, 7), b(t, op, 3, 7), c(t, op, 3, 8);
      std::vector<char> x(512 * ti.size), y(x.size()), z(x.size());
      a.fillInput(1, 100, 512, x.data());
      b.fillInput(1, 100, 512, y.data());
      c.fillInput(1, 100, 512, z.data());
      EXPECT_EQ(x, y) << "same seed, same inputs";
      EXPECT_NE(x, z) << ti.name << " " << opName(op) << ": a new seed must change the inputs";
      std::set<uint64_t> distinct;
      for (size_t i = 0; i < 512; ++i) {
        uint64_t bits = loadBits(x.data(), i, ti.size);
        distinct.insert(bits);
        if (ti.isFloat) {
          double v = decodeFloat(t, bits);
          ASSERT_TRUE(std::isfinite(v)) << ti.name;
          EXPECT_EQ(encodeFloat(t, v), bits);
          if (op == OpKind::kAvg) {
            EXPECT_GE(v, 0.0) << "avg inputs are non-negative";
          }
        }
      }
      EXPECT_GE(distinct.size(), 2u) << ti.name << " " << opName(op);
      // A sub-range equals the same elements of a full fill.
      std::vector<char> full(612 * ti.size);
      a.fillInput(1, 0, 612, full.data());
      EXPECT_EQ(0, memcmp(full.data() + 100 * ti.size, x.data(), x.size()));
    }
  }
}

TEST(InputModel, ToleranceIsZeroExceptFloatAvgOnNonPowerOfTwoRanks) {
  EXPECT_EQ(InputModel(ncclFloat32, OpKind::kAvg, 4, 1).toleranceUlps(), 0);
  EXPECT_EQ(InputModel(ncclInt32, OpKind::kAvg, 3, 1).toleranceUlps(), 0);
  EXPECT_EQ(InputModel(ncclFloat32, OpKind::kMulSum, 3, 1).toleranceUlps(), 0);
  int tol = InputModel(ncclFloat16, OpKind::kAvg, 3, 1).toleranceUlps();
  EXPECT_EQ(tol, 3 + 2);
  // The window keeps fp8 e5m2 sums exact for many ranks: 2*K*R <= 2^3.
  InputModel m(ncclFloat8e5m2, OpKind::kSum, 16, 1);
  EXPECT_LE(2 * m.window() * m.range(), 8);
  EXPECT_GE(m.window(), 1);
}

TEST(InputModel, MulSumScalars) {
  for (ncclDataType_t t : allTypes()) {
    InputModel m(t, OpKind::kMulSum, 4, 0);
    uint64_t s0 = 0, s1 = 0;
    m.fillScalar(0, &s0);
    m.fillScalar(3, &s1);
    if (typeInfo(t).isFloat) {
      EXPECT_EQ(decodeFloat(t, s0), 1.0);
      EXPECT_EQ(decodeFloat(t, s1), 2.0);
    } else {
      EXPECT_EQ(s0, 1u);
      EXPECT_EQ(s1, 2u);
    }
  }
}

TEST(InputModel, PoisonNeverEqualsTheExpectedValue) {
  for (ncclDataType_t t : allTypes()) {
    const size_t es = typeInfo(t).size;
    InputModel m(t, OpKind::kSum, 4, 3);
    std::vector<char> expected(1000 * es), poison(expected.size());
    m.fillReduced(0, 1000, expected.data());
    fillPoison(es, expected.data(), 1000, poison.data());
    EXPECT_EQ(countMismatches(t, poison.data(), expected.data(), 1000, 10), 1000u) << typeInfo(t).name;
  }
}

}  // namespace
}  // namespace theseus::perf
