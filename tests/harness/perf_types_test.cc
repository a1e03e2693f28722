// The harness' own floating conversions (it must not borrow the library's):
// exhaustive round trips, round-to-nearest-even at every midpoint, the
// special values of each format, and ulp distances.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "perf_types.h"

namespace theseus::perf {
namespace {

const ncclDataType_t kSmallFloats[] = {ncclFloat16, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};

TEST(PerfTypes, NamesSizesAndOrder) {
  ASSERT_EQ(allTypes().size(), 12u);
  const char* names[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                         "half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2"};
  const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  for (int i = 0; i < 12; ++i) {
    EXPECT_STREQ(typeInfo(allTypes()[i]).name, names[i]);
    EXPECT_EQ(typeInfo(allTypes()[i]).size, sizes[i]);
    EXPECT_EQ(parseTypeName(names[i]), allTypes()[i]);
  }
  EXPECT_EQ(parseTypeName("FLOAT"), ncclFloat32);
  EXPECT_FALSE(parseTypeName("quad"));
  EXPECT_EQ(allOps().size(), 6u);
  EXPECT_STREQ(opName(OpKind::kMulSum), "mulsum");
  EXPECT_EQ(builtinOp(OpKind::kAvg), ncclAvg);
}

TEST(PerfTypes, EveryBitPatternRoundTrips) {
  for (ncclDataType_t t : kSmallFloats) {
    const int bits = static_cast<int>(typeInfo(t).size * 8);
    for (uint64_t b = 0; b < (uint64_t{1} << bits); ++b) {
      if (isNaNBits(t, b)) {
        EXPECT_TRUE(std::isnan(decodeFloat(t, b)));
        continue;
      }
      double v = decodeFloat(t, b);
      EXPECT_EQ(encodeFloat(t, v), b) << typeInfo(t).name << " bits " << b << " value " << v;
    }
  }
}

// Between two adjacent finite values the midpoint rounds to the even one, and
// anything off the midpoint rounds to the nearer one.
TEST(PerfTypes, RoundsToNearestEven) {
  for (ncclDataType_t t : kSmallFloats) {
    const int bits = static_cast<int>(typeInfo(t).size * 8);
    const uint64_t signBit = uint64_t{1} << (bits - 1);
    for (uint64_t b = 0; b + 1 < signBit; ++b) {
      if (isNaNBits(t, b) || isNaNBits(t, b + 1)) continue;
      double lo = decodeFloat(t, b), hi = decodeFloat(t, b + 1);
      if (std::isinf(hi)) continue;
      double mid = (lo + hi) / 2;
      uint64_t even = (b % 2 == 0) ? b : b + 1;
      EXPECT_EQ(encodeFloat(t, mid), even) << typeInfo(t).name << " between " << lo << " and " << hi;
      EXPECT_EQ(encodeFloat(t, mid - (hi - lo) / 8), b);
      EXPECT_EQ(encodeFloat(t, mid + (hi - lo) / 8), b + 1);
      EXPECT_EQ(encodeFloat(t, -mid - (hi - lo) / 8), (b + 1) | signBit);
    }
  }
}

TEST(PerfTypes, HalfAgreesWithTheCompiler) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    _Float16 h;
    uint16_t u = static_cast<uint16_t>(b);
    memcpy(&h, &u, 2);
    if (std::isnan(static_cast<double>(h))) continue;
    EXPECT_EQ(decodeFloat(ncclFloat16, b), static_cast<double>(h));
  }
  for (double v : {1e-8, 3.0e-5, 0.1, 1.0 / 3, 2049.0, 65519.0, 65520.0, 1e6, -7.5e-6}) {
    _Float16 h = static_cast<_Float16>(v);
    uint16_t u;
    memcpy(&u, &h, 2);
    EXPECT_EQ(encodeFloat(ncclFloat16, v), u) << v;
  }
}

TEST(PerfTypes, FormatLimits) {
  EXPECT_EQ(decodeFloat(ncclFloat8e4m3, 0x7e), 448.0);
  EXPECT_EQ(encodeFloat(ncclFloat8e4m3, 1e6), 0x7eu);      // saturates: e4m3 has no infinity
  EXPECT_EQ(encodeFloat(ncclFloat8e4m3, -1e6), 0xfeu);
  EXPECT_TRUE(isNaNBits(ncclFloat8e4m3, 0x7f));
  EXPECT_FALSE(isNaNBits(ncclFloat8e4m3, 0x78));          // 256: e4m3 uses the top exponent
  EXPECT_EQ(decodeFloat(ncclFloat8e4m3, 0x01), std::ldexp(1.0, -9));
  EXPECT_EQ(decodeFloat(ncclFloat8e5m2, 0x7b), 57344.0);
  EXPECT_TRUE(std::isinf(decodeFloat(ncclFloat8e5m2, 0x7c)));
  EXPECT_EQ(encodeFloat(ncclFloat8e5m2, 1e6), 0x7cu);      // overflows to infinity
  EXPECT_EQ(decodeFloat(ncclBfloat16, 0x3f80), 1.0);
  EXPECT_EQ(encodeFloat(ncclBfloat16, 1.0 + std::ldexp(1.0, -8)), 0x3f80u);  // tie to even
  EXPECT_EQ(encodeFloat(ncclFloat32, 0.1), 0x3dcccccdu);
  EXPECT_EQ(decodeFloat(ncclFloat64, encodeFloat(ncclFloat64, 0.1)), 0.1);
}

TEST(PerfTypes, UlpDistance) {
  EXPECT_EQ(ulpDistance(ncclFloat16, 0x3c00, 0x3c01), 1u);
  EXPECT_EQ(ulpDistance(ncclFloat16, 0x0000, 0x8000), 0u);  // +0 == -0
  EXPECT_EQ(ulpDistance(ncclFloat16, 0x0001, 0x8001), 2u);  // across zero
  EXPECT_EQ(ulpDistance(ncclFloat32, 0x3f800000, 0x3f7fffff), 1u);
  EXPECT_EQ(ulpDistance(ncclFloat16, 0x7e00, 0x7e00), UINT64_MAX);  // NaN never matches
  EXPECT_EQ(ulpDistance(ncclFloat64, 0x3ff0000000000000ull, 0xbff0000000000000ull), 0x7fe0000000000000ull);
}

}  // namespace
}  // namespace theseus::perf
