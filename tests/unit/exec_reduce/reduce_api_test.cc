// The public entry points of exec/reduce.h: how NCCL operations map to
// Reductions (avg, PreMulSum), the documented semantics (integer wrap-around,
// NaN and signed-zero rules of max/min, truncating integer division), a
// simulated multi-rank avg through the functions the executor calls, bad
// input, and which kernel set is active.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/log.h"
#include "exec/reduce.h"
#include "exec/reduce_kernels.h"

namespace theseus::exec {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

template <class T>
std::vector<T> reduceVec(RedKind kind, ncclDataType_t type, const std::vector<T>& a, const std::vector<T>& b) {
  Reduction r;
  r.kind = kind;
  r.type = type;
  std::vector<T> d(a.size());
  reduce(r, d.data(), a.data(), b.data(), a.size());
  return d;
}

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(ReduceTypes, SizesNamesAndClasses) {
  const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  for (int t = 0; t < ncclNumTypes; ++t) {
    EXPECT_EQ(typeSize(static_cast<ncclDataType_t>(t)), sizes[t]) << t;
    EXPECT_STRNE(typeName(static_cast<ncclDataType_t>(t)), "invalid") << t;
    EXPECT_EQ(isFloatType(static_cast<ncclDataType_t>(t)), t >= ncclFloat16) << t;
  }
  EXPECT_STREQ(typeName(ncclFloat16), "half");
  EXPECT_STREQ(typeName(ncclBfloat16), "bfloat16");
  EXPECT_STREQ(typeName(ncclFloat8e4m3), "f8e4m3");
  EXPECT_EQ(typeSize(ncclNumTypes), 0u);
  EXPECT_EQ(typeSize(static_cast<ncclDataType_t>(15)), 0u);
  EXPECT_STREQ(typeName(static_cast<ncclDataType_t>(15)), "invalid");
}

TEST(ReduceSemantics, IntegersWrapLikeTheGpu) {
  auto i32 = reduceVec<int32_t>(RedKind::kSum, ncclInt32, {INT32_MAX, INT32_MIN, -1}, {1, -1, 1});
  EXPECT_EQ(i32, (std::vector<int32_t>{INT32_MIN, INT32_MAX, 0}));
  auto u8 = reduceVec<uint8_t>(RedKind::kSum, ncclUint8, {200, 255}, {100, 1});
  EXPECT_EQ(u8, (std::vector<uint8_t>{44, 0}));
  auto i8 = reduceVec<int8_t>(RedKind::kProd, ncclInt8, {16, -128, 127}, {16, -1, 3});
  EXPECT_EQ(i8, (std::vector<int8_t>{0, -128, 125}));
  auto i64 = reduceVec<int64_t>(RedKind::kProd, ncclInt64, {INT64_MIN, INT64_MAX}, {-1, 2});
  EXPECT_EQ(i64, (std::vector<int64_t>{INT64_MIN, -2}));
  auto u64 = reduceVec<uint64_t>(RedKind::kMax, ncclUint64, {~0ull, 5}, {1, 7});
  EXPECT_EQ(u64, (std::vector<uint64_t>{~0ull, 7}));
  auto s64 = reduceVec<int64_t>(RedKind::kMin, ncclInt64, {-1, INT64_MIN}, {1, INT64_MAX});
  EXPECT_EQ(s64, (std::vector<int64_t>{-1, INT64_MIN}));
  auto u32 = reduceVec<uint32_t>(RedKind::kMax, ncclUint32, {0x80000000u}, {1});  // unsigned compare
  EXPECT_EQ(u32[0], 0x80000000u);
}

// maxNum/minNum: a NaN loses against a number, two NaNs give a NaN, +0 > -0,
// in either operand order (checked on float, double, half and bfloat16).
TEST(ReduceSemantics, FloatMaxMinIgnoreNanAndOrderSignedZeros) {
  const std::vector<float> a = {kNan, 1.0f, kNan, 0.0f, -0.0f, -INFINITY, 2.0f};
  const std::vector<float> b = {1.0f, kNan, kNan, -0.0f, 0.0f, kNan, 3.0f};
  auto mx = reduceVec<float>(RedKind::kMax, ncclFloat32, a, b);
  auto mn = reduceVec<float>(RedKind::kMin, ncclFloat32, a, b);
  EXPECT_EQ(mx[0], 1.0f);
  EXPECT_EQ(mx[1], 1.0f);
  EXPECT_TRUE(std::isnan(mx[2]));
  EXPECT_EQ(bitsOf(mx[3]), 0u);  // +0
  EXPECT_EQ(bitsOf(mx[4]), 0u);
  EXPECT_EQ(mx[5], -INFINITY);
  EXPECT_EQ(mx[6], 3.0f);
  EXPECT_EQ(mn[0], 1.0f);
  EXPECT_EQ(mn[1], 1.0f);
  EXPECT_TRUE(std::isnan(mn[2]));
  EXPECT_EQ(bitsOf(mn[3]), 0x80000000u);  // -0
  EXPECT_EQ(bitsOf(mn[4]), 0x80000000u);
  EXPECT_EQ(mn[6], 2.0f);

  auto dmx = reduceVec<double>(RedKind::kMax, ncclFloat64, {NAN, -0.0}, {-5.0, 0.0});
  EXPECT_EQ(dmx[0], -5.0);
  EXPECT_FALSE(std::signbit(dmx[1]));
  auto dmn = reduceVec<double>(RedKind::kMin, ncclFloat64, {0.0, 7.0}, {-0.0, NAN});
  EXPECT_TRUE(std::signbit(dmn[0]));
  EXPECT_EQ(dmn[1], 7.0);

  const uint16_t hNan = 0x7e00, hOne = 0x3c00, hPosZero = 0x0000, hNegZero = 0x8000;
  auto hmx = reduceVec<uint16_t>(RedKind::kMax, ncclFloat16, {hNan, hPosZero, hNegZero}, {hOne, hNegZero, hPosZero});
  EXPECT_EQ(hmx, (std::vector<uint16_t>{hOne, hPosZero, hPosZero}));
  auto bmn = reduceVec<uint16_t>(RedKind::kMin, ncclBfloat16, {0x7fc0, 0x0000, 0x3f80}, {0x3f80, 0x8000, 0x7fc0});
  EXPECT_EQ(bmn, (std::vector<uint16_t>{0x3f80, 0x8000, 0x3f80}));
}

TEST(ReduceSemantics, NarrowFloatsRoundOnceAndSaturateOrOverflow) {
  // half: 2048 + 1 is a tie between 2048 and 2050 -> even (2048); 2048 + 3 -> 2052.
  auto h = reduceVec<uint16_t>(RedKind::kSum, ncclFloat16, {floatToHalf(2048), floatToHalf(2048), 0x7bff},
                               {floatToHalf(1), floatToHalf(3), 0x7bff});
  EXPECT_EQ(halfToFloat(h[0]), 2048.0f);
  EXPECT_EQ(halfToFloat(h[1]), 2052.0f);
  EXPECT_EQ(h[2], 0x7c00);  // 65504 + 65504 overflows to infinity
  auto e4 = reduceVec<uint8_t>(RedKind::kSum, ncclFloat8e4m3, {0x7e, 0xfe}, {0x7e, 0xfe});
  EXPECT_EQ(e4, (std::vector<uint8_t>{0x7e, 0xfe}));  // 448 + 448 saturates to 448
  auto e5 = reduceVec<uint8_t>(RedKind::kProd, ncclFloat8e5m2, {0x7b}, {0x7b});
  EXPECT_EQ(e5, (std::vector<uint8_t>{0x7c}));  // overflows to infinity
  auto e4nan = reduceVec<uint8_t>(RedKind::kSum, ncclFloat8e4m3, {0x7f}, {0x38});
  EXPECT_EQ(e4nan[0] & 0x7f, 0x7f);
}

TEST(ReduceOps, BuiltinOpsMapToKinds) {
  const RedKind kinds[] = {RedKind::kSum, RedKind::kProd, RedKind::kMax, RedKind::kMin};
  for (int op = ncclSum; op <= ncclMin; ++op) {
    auto r = builtinReduction(static_cast<ncclRedOp_t>(op), ncclInt32, 4);
    ASSERT_TRUE(r.isOk()) << r.status().message();
    EXPECT_EQ(r.value().kind, kinds[op]);
    EXPECT_FALSE(r.value().preMul);
    EXPECT_FALSE(r.value().divideAtEnd);
    EXPECT_TRUE(checkReduction(r.value()).isOk());
  }
  auto favg = builtinReduction(ncclAvg, ncclBfloat16, 4);
  ASSERT_TRUE(favg.isOk());
  EXPECT_EQ(favg.value().kind, RedKind::kSum);
  EXPECT_TRUE(favg.value().preMul);
  EXPECT_EQ(favg.value().scalar, 0.25);
  EXPECT_FALSE(favg.value().divideAtEnd);
  auto iavg = builtinReduction(ncclAvg, ncclUint8, 3);
  ASSERT_TRUE(iavg.isOk());
  EXPECT_FALSE(iavg.value().preMul);
  EXPECT_TRUE(iavg.value().divideAtEnd);
  EXPECT_EQ(iavg.value().divisor, 3u);
}

TEST(ReduceOps, BuiltinReductionRejectsBadInput) {
  auto notBuiltin = builtinReduction(ncclNumOps, ncclFloat32, 2);
  ASSERT_FALSE(notBuiltin.isOk());
  EXPECT_EQ(notBuiltin.status().code(), ncclInvalidArgument);
  EXPECT_NE(notBuiltin.status().message().find("not a builtin"), std::string::npos);
  EXPECT_EQ(builtinReduction(ncclSum, ncclNumTypes, 2).status().code(), ncclInvalidArgument);
  EXPECT_EQ(builtinReduction(ncclSum, static_cast<ncclDataType_t>(15), 2).status().code(), ncclInvalidArgument);
  EXPECT_EQ(builtinReduction(ncclAvg, ncclFloat32, 0).status().code(), ncclInvalidArgument);
}

TEST(ReduceOps, PreMulSumReadsTheScalarAsItsType) {
  const uint16_t halfScalar = 0x3800;  // 0.5
  auto h = preMulSumReduction(ncclFloat16, &halfScalar);
  ASSERT_TRUE(h.isOk());
  EXPECT_TRUE(h.value().preMul);
  EXPECT_EQ(h.value().kind, RedKind::kSum);
  EXPECT_EQ(h.value().scalar, 0.5);
  const int8_t i8 = -3;
  EXPECT_EQ(preMulSumReduction(ncclInt8, &i8).value().scalar, -3.0);
  const uint8_t e5 = 0x3c;  // 1.0 in e5m2
  EXPECT_EQ(preMulSumReduction(ncclFloat8e5m2, &e5).value().scalar, 1.0);
  const uint64_t big = (uint64_t{1} << 53) + 1;
  auto tooBig = preMulSumReduction(ncclUint64, &big);
  ASSERT_FALSE(tooBig.isOk());
  EXPECT_NE(tooBig.status().message().find("2^53"), std::string::npos);
  const int64_t edge = -(int64_t{1} << 53);
  EXPECT_TRUE(preMulSumReduction(ncclInt64, &edge).isOk());
  EXPECT_EQ(preMulSumReduction(ncclFloat32, nullptr).status().code(), ncclInvalidArgument);
  EXPECT_EQ(preMulSumReduction(ncclNumTypes, &big).status().code(), ncclInvalidArgument);
  const double inf = INFINITY;
  EXPECT_TRUE(preMulSumReduction(ncclFloat64, &inf).isOk());
}

TEST(ReduceOps, CheckReductionNamesTheProblem) {
  Reduction r;
  r.type = ncclNumTypes;
  EXPECT_NE(checkReduction(r).message().find("datatype"), std::string::npos);
  r.type = ncclInt32;
  r.kind = static_cast<RedKind>(9);
  EXPECT_NE(checkReduction(r).message().find("kind"), std::string::npos);
  r.kind = RedKind::kSum;
  r.divideAtEnd = true;
  r.divisor = 0;
  EXPECT_EQ(checkReduction(r).code(), ncclInvalidArgument);
  r.divideAtEnd = false;
  r.preMul = true;
  r.scalar = 0.5;
  EXPECT_NE(checkReduction(r).message().find("not an integer"), std::string::npos);
  r.type = ncclFloat16;
  EXPECT_TRUE(checkReduction(r).isOk());
}

// A 4-rank float avg as the executor runs it (ring order 0..3): the first
// contribution is scaled into the accumulator, every later one is scaled on
// the way in, and each is multiplied by the scalar exactly once.
TEST(ReduceOps, FloatAvgScalesEveryContributionOnce) {
  auto r = builtinReduction(ncclAvg, ncclFloat32, 4).value();
  const std::vector<std::vector<float>> inputs = {{4, 8, -1}, {8, 0, 1}, {12, 4, 3}, {16, 4, 1}};
  std::vector<float> acc(3);
  scaleCopy(r, acc.data(), inputs[0].data(), 3);
  for (int rank = 1; rank < 4; ++rank) reduceScaleA(r, acc.data(), inputs[rank].data(), acc.data(), 3);
  EXPECT_EQ(acc, (std::vector<float>{10, 4, 1}));

  // half avg over 3 ranks uses half(1/3) = 0x3555: scale(1.0) is exactly that.
  auto h = builtinReduction(ncclAvg, ncclFloat16, 3).value();
  const uint16_t one = 0x3c00;
  uint16_t out = 0;
  scaleCopy(h, &out, &one, 1);
  EXPECT_EQ(out, 0x3555);
}

TEST(ReduceOps, IntegerAvgSumsThenTruncates) {
  auto r = builtinReduction(ncclAvg, ncclInt32, 4).value();
  std::vector<int32_t> a = {-7, 7, INT32_MAX, 3}, b = {0, 0, 0, 0};
  reduce(r, a.data(), a.data(), b.data(), 4);  // divideAtEnd does not change reduce()
  divide(r, a.data(), 4);
  EXPECT_EQ(a, (std::vector<int32_t>{-1, 1, INT32_MAX / 4, 0}));

  // Divisors wider than the element type still divide correctly.
  auto r8 = builtinReduction(ncclAvg, ncclInt8, 1000).value();
  std::vector<int8_t> v8 = {100, -128, 127};
  divide(r8, v8.data(), 3);
  EXPECT_EQ(v8, (std::vector<int8_t>{0, 0, 0}));
  auto u8 = builtinReduction(ncclAvg, ncclUint8, 3).value();
  std::vector<uint8_t> w8 = {255, 2};
  divide(u8, w8.data(), 2);
  EXPECT_EQ(w8, (std::vector<uint8_t>{85, 0}));
  auto i64 = builtinReduction(ncclAvg, ncclInt64, 3).value();
  std::vector<int64_t> v64 = {INT64_MIN, -5};
  divide(i64, v64.data(), 2);
  EXPECT_EQ(v64, (std::vector<int64_t>{INT64_MIN / 3, -1}));
}

TEST(ReduceOps, PreMulSumOnIntegersAndHalf) {
  const int32_t s = -2;
  auto r = preMulSumReduction(ncclInt32, &s).value();
  std::vector<int32_t> a = {3, INT32_MIN}, b = {1, 0}, d(2);
  reduceScaleA(r, d.data(), a.data(), b.data(), 2);
  EXPECT_EQ(d, (std::vector<int32_t>{-5, 0}));  // INT32_MIN * -2 wraps to 0
  reduce(r, d.data(), a.data(), b.data(), 2);   // reduce() never scales
  EXPECT_EQ(d, (std::vector<int32_t>{4, INT32_MIN}));

  const uint16_t third = floatToHalf(1.0f / 3);
  auto h = preMulSumReduction(ncclFloat16, &third).value();
  const uint16_t three = floatToHalf(3), zero = 0;
  uint16_t out;
  reduceScaleA(h, &out, &three, &zero, 1);
  // 3 * half(1/3) = 0.999755859375 exactly, the tie between 0x3bff and 0x3c00: even wins.
  EXPECT_EQ(out, 0x3c00);
}

TEST(ReduceOps, CopiesAndNoOps) {
  Reduction r;
  r.type = ncclFloat64;
  std::vector<double> src = {1.5, -2.5, NAN}, dst(3, 0.0);
  scaleCopy(r, dst.data(), src.data(), 3);  // !preMul: a plain copy, NaN bits included
  EXPECT_EQ(std::memcmp(dst.data(), src.data(), sizeof(double) * 3), 0);
  scaleCopy(r, dst.data(), dst.data(), 3);  // in place: nothing to do
  EXPECT_EQ(dst[0], 1.5);
  r.type = ncclInt32;
  r.divisor = 1;
  std::vector<int32_t> v = {5};
  divide(r, v.data(), 1);
  EXPECT_EQ(v[0], 5);
  reduce(r, nullptr, nullptr, nullptr, 0);  // n == 0 never touches the pointers
  reduceScaleA(r, nullptr, nullptr, nullptr, 0);
  scaleCopy(r, nullptr, nullptr, 0);
  divide(r, nullptr, 0);
}

TEST(ReduceOps, InvalidReductionLeavesDestinationAndWarns) {
  Reduction r;
  const int garbage = 42;  // what a C caller might pass; stored without an (undefined) enum conversion
  std::memcpy(&r.type, &garbage, sizeof garbage);
  std::vector<float> a = {1}, b = {2}, d = {7};
  reduce(r, d.data(), a.data(), b.data(), 1);
  EXPECT_EQ(d[0], 7.0f);
  EXPECT_NE(std::string(log::lastError()).find("invalid reduction"), std::string::npos);
  r.type = ncclFloat32;
  r.kind = static_cast<RedKind>(200);
  reduceScaleA(r, d.data(), a.data(), b.data(), 1);
  scaleCopy(r, d.data(), a.data(), 1);
  EXPECT_EQ(d[0], 7.0f);
  r.kind = RedKind::kSum;
  r.type = ncclInt32;
  r.divisor = 0;
  std::vector<int32_t> v = {9};
  divide(r, v.data(), 1);
  EXPECT_EQ(v[0], 9);
  EXPECT_NE(std::string(log::lastError()).find("divisor is 0"), std::string::npos);
}

// Run by CTest twice: with THESEUS_REDUCE_ISA unset (best available) and =generic.
TEST(ReduceDispatch, ActiveKernelSetFollowsCpuAndKnob) {
  const char* env = std::getenv("THESEUS_REDUCE_ISA");
  const std::string want = env != nullptr ? env : "auto";
  const bool haveAvx2 = kernels::avx2Kernels() != nullptr;
  if (want == "generic" || !haveAvx2) {
    EXPECT_STREQ(reduceKernelIsa(), "generic");
  } else {
    EXPECT_STREQ(reduceKernelIsa(), "avx2+f16c");
  }
  EXPECT_EQ(&kernels::activeKernels(), &kernels::activeKernels());  // chosen once
}

}  // namespace
}  // namespace theseus::exec
