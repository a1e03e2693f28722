// Conversions between float and half/bfloat16/fp8: exhaustive decoding and
// round trips, every rounding tie of every format, overflow, subnormals and
// NaN, checked against the reference model (reduce_reference.h) and, where
// the CPU has F16C, against the hardware conversion instructions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "exec/reduce.h"
#include "reduce_reference.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace theseus::exec {
namespace {

using ref::bitsFloat;
using ref::floatBits;

// A narrow format under test: its reference description and the library's conversions.
struct Codec {
  const char* name;
  ref::Format format;
  uint32_t (*encode)(float);
  float (*decode)(uint32_t);
  uint32_t quietBit;  // set on every NaN the library produces (0: the format has one NaN)
};

const Codec kCodecs[] = {
    {"half", ref::kHalf, [](float f) -> uint32_t { return floatToHalf(f); },
     [](uint32_t c) { return halfToFloat(static_cast<uint16_t>(c)); }, 0x200},
    {"bfloat16", ref::kBf16, [](float f) -> uint32_t { return floatToBf16(f); },
     [](uint32_t c) { return bf16ToFloat(static_cast<uint16_t>(c)); }, 0x40},
    {"f8e4m3", ref::kE4M3, [](float f) -> uint32_t { return floatToFp8E4M3(f); },
     [](uint32_t c) { return fp8E4M3ToFloat(static_cast<uint8_t>(c)); }, 0},
    {"f8e5m2", ref::kE5M2, [](float f) -> uint32_t { return floatToFp8E5M2(f); },
     [](uint32_t c) { return fp8E5M2ToFloat(static_cast<uint8_t>(c)); }, 0x2},
};

void PrintTo(const Codec& c, std::ostream* os) { *os << c.name; }

constexpr float kInf = std::numeric_limits<float>::infinity();

uint32_t numCodes(const ref::Format& f) { return 2u << (f.exp + f.man); }

class ConvertTest : public ::testing::TestWithParam<Codec> {};

// Every code decodes to the exact value; NaNs decode to quiet float NaNs that
// keep the sign and the payload (shifted into the top mantissa bits).
TEST_P(ConvertTest, DecodesEveryCodeExactly) {
  const Codec& c = GetParam();
  const int shift = 23 - c.format.man;
  for (uint32_t code = 0; code < numCodes(c.format); ++code) {
    float got = c.decode(code);
    double want = ref::decode(c.format, code);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << c.name << " code " << code;
      uint32_t bits = floatBits(got);
      ASSERT_EQ(bits >> 31, code >> (c.format.exp + c.format.man)) << c.name << " NaN sign, code " << code;
      ASSERT_TRUE(bits & 0x00400000u) << c.name << " NaN is not quiet, code " << code;
      ASSERT_EQ((bits >> shift) & ((1u << c.format.man) - 1) & ~(c.quietBit ? c.quietBit : 0u),
                code & ((1u << c.format.man) - 1) & ~(c.quietBit ? c.quietBit : 0u))
          << c.name << " NaN payload, code " << code;
    } else {
      ASSERT_EQ(floatBits(got), floatBits(static_cast<float>(want))) << c.name << " code " << code;
    }
  }
}

// encode(decode(code)) == code for every code; a NaN comes back quiet.
TEST_P(ConvertTest, EveryCodeRoundTrips) {
  const Codec& c = GetParam();
  for (uint32_t code = 0; code < numCodes(c.format); ++code) {
    uint32_t back = c.encode(c.decode(code));
    uint32_t want = ref::isNanCode(c.format, code) ? (code | c.quietBit) : code;
    ASSERT_EQ(back, want) << c.name << " code 0x" << std::hex << code;
  }
}

// Every midpoint between neighbouring values is a tie and must go to the even
// code; the floats just below/above it go to the nearer neighbour. Midpoints
// of these formats are exact floats (at most p+1 <= 24 significant bits).
TEST_P(ConvertTest, TiesGoToEvenAndNeighboursToNearest) {
  const Codec& c = GetParam();
  const auto& values = ref::encoderFor(c.format).values();
  for (uint32_t lo = 0; lo + 1 < values.size(); ++lo) {
    float mid = static_cast<float>((values[lo] + values[lo + 1]) / 2);
    ASSERT_EQ(static_cast<double>(mid), (values[lo] + values[lo + 1]) / 2) << "midpoint not exact";
    uint32_t even = (lo & 1) ? lo + 1 : lo;
    for (float sign : {1.0f, -1.0f}) {
      uint32_t s = sign < 0 ? c.format.signBit() : 0;
      ASSERT_EQ(c.encode(sign * mid), s | even) << c.name << " tie after code " << lo;
      ASSERT_EQ(c.encode(sign * std::nextafter(mid, 0.0f)), s | lo) << c.name << " below tie after code " << lo;
      ASSERT_EQ(c.encode(sign * std::nextafter(mid, kInf)), s | (lo + 1)) << c.name << " above tie after " << lo;
    }
  }
}

// Random floats over the whole range (every exponent), against the reference.
TEST_P(ConvertTest, RandomFloatsMatchReference) {
  const Codec& c = GetParam();
  const ref::Encoder& enc = ref::encoderFor(c.format);
  std::mt19937 rng(1234);
  for (int i = 0; i < 300000; ++i) {
    uint32_t bits = rng();
    if (i % 2) bits = (bits & 0x807fffffu) | ((100 + rng() % 56) << 23);  // near the format's range
    float f = bitsFloat(bits);
    uint32_t got = c.encode(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(ref::isNanCode(c.format, got)) << c.name << " bits 0x" << std::hex << bits;
      ASSERT_EQ(got >> (c.format.exp + c.format.man), bits >> 31) << c.name << " NaN sign";
      continue;
    }
    ASSERT_EQ(got, enc.encode(f)) << c.name << " float bits 0x" << std::hex << bits << " = " << f;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, ConvertTest, ::testing::ValuesIn(kCodecs),
                         [](const auto& info) { return std::string(info.param.name); });

float f32(uint32_t bits) { return bitsFloat(bits); }

TEST(ConvertHalf, OverflowSubnormalsAndSpecials) {
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(std::nextafter(65520.0f, 0.0f)), 0x7bff);  // just below the tie
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);                        // tie: 0x7bff is odd -> infinity
  EXPECT_EQ(floatToHalf(-65520.0f), 0xfc00);
  EXPECT_EQ(floatToHalf(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(floatToHalf(kInf), 0x7c00);
  EXPECT_EQ(floatToHalf(-kInf), 0xfc00);
  EXPECT_EQ(floatToHalf(0.0f), 0x0000);
  EXPECT_EQ(floatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -24)), 0x0001);          // smallest subnormal
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -25)), 0x0000);          // tie with 0 -> even (0)
  EXPECT_EQ(floatToHalf(std::ldexp(3.0f, -25)), 0x0002);          // tie 1|2 -> 2
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25)), 0x0400);  // tie 0x3ff|0x400
  EXPECT_EQ(floatToHalf(-std::ldexp(1.0f, -26)), 0x8000);         // underflow keeps the sign
  EXPECT_EQ(floatToHalf(f32(0x00000001)), 0x0000);                // float subnormals underflow
  EXPECT_EQ(floatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);   // tie -> even
  EXPECT_EQ(floatToHalf(1.0f + std::ldexp(3.0f, -11)), 0x3c02);   // tie -> even (up)
  EXPECT_EQ(floatToHalf(f32(0x7fc00000)), 0x7e00);                // quiet NaN
  EXPECT_EQ(floatToHalf(f32(0xff800001)), 0xfe00);                // signalling NaN -> quiet, sign kept
  EXPECT_EQ(floatToHalf(f32(0x7fa02000)), 0x7f01);                // payload's top bits kept
  EXPECT_EQ(floatBits(halfToFloat(0x7c01)), 0x7fc02000u);         // sNaN decodes quiet
  EXPECT_EQ(halfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(halfToFloat(0x7bff), 65504.0f);
}

TEST(ConvertBf16, OverflowSubnormalsAndSpecials) {
  EXPECT_EQ(floatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(floatToBf16(f32(0x3f808000)), 0x3f80);  // tie -> even
  EXPECT_EQ(floatToBf16(f32(0x3f818000)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(floatToBf16(f32(0x3f808001)), 0x3f81);
  EXPECT_EQ(floatToBf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds to infinity
  EXPECT_EQ(floatToBf16(f32(0x7f7f7fff)), 0x7f7f);
  EXPECT_EQ(floatToBf16(f32(0x7f7f8000)), 0x7f80);  // tie above the largest finite: odd -> infinity
  EXPECT_EQ(floatToBf16(-kInf), 0xff80);
  EXPECT_EQ(floatToBf16(f32(0x00008000)), 0x0000);  // subnormal tie -> even
  EXPECT_EQ(floatToBf16(f32(0x00018000)), 0x0002);
  EXPECT_EQ(floatToBf16(f32(0x00008001)), 0x0001);
  EXPECT_EQ(floatToBf16(-0.0f), 0x8000);
  EXPECT_EQ(floatToBf16(f32(0x7f800001)), 0x7fc0);  // sNaN whose payload would vanish stays NaN
  EXPECT_EQ(floatToBf16(f32(0xffc00000)), 0xffc0);
  EXPECT_EQ(floatBits(bf16ToFloat(0x7f81)), 0x7fc10000u);
}

TEST(ConvertFp8, E4M3SaturatesAndHasOneNan) {
  EXPECT_EQ(floatToFp8E4M3(448.0f), 0x7e);
  EXPECT_EQ(floatToFp8E4M3(464.0f), 0x7e);  // beyond the max: saturate
  EXPECT_EQ(floatToFp8E4M3(1e6f), 0x7e);
  EXPECT_EQ(floatToFp8E4M3(-1e6f), 0xfe);
  EXPECT_EQ(floatToFp8E4M3(kInf), 0x7e);  // no infinity: saturate
  EXPECT_EQ(floatToFp8E4M3(-kInf), 0xfe);
  EXPECT_EQ(floatToFp8E4M3(f32(0x7fc00000)), 0x7f);
  EXPECT_EQ(floatToFp8E4M3(f32(0xff800001)), 0xff);
  EXPECT_EQ(floatToFp8E4M3(std::ldexp(1.0f, -9)), 0x01);  // smallest subnormal
  EXPECT_EQ(floatToFp8E4M3(std::ldexp(1.0f, -10)), 0x00);  // tie -> 0
  EXPECT_EQ(floatToFp8E4M3(std::ldexp(3.0f, -10)), 0x02);
  EXPECT_EQ(floatToFp8E4M3(std::ldexp(1.0f, -6)), 0x08);  // smallest normal
  EXPECT_EQ(floatToFp8E4M3(1.0f), 0x38);
  EXPECT_EQ(fp8E4M3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(fp8E4M3ToFloat(0x01), std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(fp8E4M3ToFloat(0x7f)));
  EXPECT_TRUE(std::isnan(fp8E4M3ToFloat(0xff)));
  EXPECT_EQ(fp8E4M3ToFloat(0x78), 256.0f);  // exponent 15 is a normal binade (no infinities)
}

TEST(ConvertFp8, E5M2OverflowsToInfinity) {
  EXPECT_EQ(floatToFp8E5M2(57344.0f), 0x7b);
  EXPECT_EQ(floatToFp8E5M2(std::nextafter(61440.0f, 0.0f)), 0x7b);
  EXPECT_EQ(floatToFp8E5M2(61440.0f), 0x7c);  // tie: 0x7b odd -> infinity
  EXPECT_EQ(floatToFp8E5M2(-1e9f), 0xfc);
  EXPECT_EQ(floatToFp8E5M2(kInf), 0x7c);
  EXPECT_EQ(floatToFp8E5M2(f32(0x7fc00000)), 0x7e);
  EXPECT_EQ(floatToFp8E5M2(f32(0xff800001)), 0xfe);
  EXPECT_EQ(floatToFp8E5M2(std::ldexp(1.0f, -16)), 0x01);
  EXPECT_EQ(floatToFp8E5M2(std::ldexp(1.0f, -17)), 0x00);
  EXPECT_EQ(fp8E5M2ToFloat(0x7c), kInf);
  EXPECT_EQ(fp8E5M2ToFloat(0xfc), -kInf);
  EXPECT_EQ(floatBits(fp8E5M2ToFloat(0x7d)), 0x7fe00000u);  // sNaN -> quiet, payload kept
}

#if defined(__x86_64__)
// The F16C instructions are a second, hardware oracle for half. The AVX2
// kernels use them, so the software codec must agree with them bit for bit,
// NaNs included.
__attribute__((target("f16c"))) uint16_t hwFloatToHalf(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float hwHalfToFloat(uint16_t h) { return _cvtsh_ss(h); }

TEST(ConvertHalf, MatchesF16cInstructions) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "this CPU has no F16C";
  for (uint32_t code = 0; code < 65536; ++code) {
    ASSERT_EQ(floatBits(halfToFloat(static_cast<uint16_t>(code))),
              floatBits(hwHalfToFloat(static_cast<uint16_t>(code))))
        << "half 0x" << std::hex << code;
  }
  std::mt19937 rng(99);
  for (int i = 0; i < 1000000; ++i) {
    uint32_t bits = rng();
    if (i % 4 == 0) bits = (bits & 0x807fffffu) | ((96 + rng() % 48) << 23);
    if (i % 16 == 1) bits |= 0x7f800000u;  // infinities and NaNs of every payload
    ASSERT_EQ(floatToHalf(f32(bits)), hwFloatToHalf(f32(bits))) << "float 0x" << std::hex << bits;
  }
}
#endif

}  // namespace
}  // namespace theseus::exec
