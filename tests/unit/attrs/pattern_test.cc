// Name patterns: '*' and '?' inside one component, '**' over components,
// literal prefixes for range scans, and errors for malformed patterns.
#include <gtest/gtest.h>

#include "attrs/pattern.h"

namespace theseus::attrs {
namespace {

Pattern compile(const std::string& text) {
  auto p = Pattern::compile(text);
  EXPECT_TRUE(p.isOk()) << text << ": " << p.status().message();
  return p.take();
}

TEST(Pattern, StarMatchesOneComponent) {
  Pattern p = compile("link.*.*.gbps");
  EXPECT_TRUE(p.matches("link.0.1.gbps"));
  EXPECT_TRUE(p.matches("link.12.345.gbps"));
  EXPECT_FALSE(p.matches("link.0.1.latency_us"));
  EXPECT_FALSE(p.matches("link.0.gbps"));
  EXPECT_FALSE(p.matches("link.0.1.2.gbps"));
  EXPECT_FALSE(p.matches("xlink.0.1.gbps"));
  EXPECT_FALSE(p.matches("link.0.1.gbps.x"));
  EXPECT_FALSE(p.isLiteral());
  EXPECT_EQ(p.literalPrefix(), "link.");
}

TEST(Pattern, WildcardsInsideAComponent) {
  Pattern p = compile("node.*.nic.mlx5_*.healthy");
  EXPECT_TRUE(p.matches("node.h1.nic.mlx5_0.healthy"));
  EXPECT_TRUE(p.matches("node.h1.nic.mlx5_.healthy"));
  EXPECT_FALSE(p.matches("node.h1.nic.eth0.healthy"));
  Pattern q = compile("gpu.?.sm_clock_mhz");
  EXPECT_TRUE(q.matches("gpu.3.sm_clock_mhz"));
  EXPECT_FALSE(q.matches("gpu.13.sm_clock_mhz"));
  Pattern r = compile("rank.1*.wait_us");
  EXPECT_TRUE(r.matches("rank.1.wait_us"));
  EXPECT_TRUE(r.matches("rank.17.wait_us"));
  EXPECT_FALSE(r.matches("rank.21.wait_us"));
  EXPECT_EQ(r.literalPrefix(), "rank.1");
  Pattern s = compile("*a*b*.x");
  EXPECT_TRUE(s.matches("aab.x"));
  EXPECT_TRUE(s.matches("zzazzbzz.x"));
  EXPECT_FALSE(s.matches("ba.x"));
}

TEST(Pattern, DoubleStarSpansComponents) {
  Pattern p = compile("node.**.healthy");
  EXPECT_TRUE(p.matches("node.h1.healthy"));
  EXPECT_TRUE(p.matches("node.h1.nic.mlx5_0.healthy"));
  EXPECT_FALSE(p.matches("node.healthy"));  // '**' takes at least one component
  EXPECT_FALSE(p.matches("node.h1.healthy.x"));
  Pattern q = compile("**.gbps");
  EXPECT_TRUE(q.matches("link.0.1.gbps"));
  EXPECT_FALSE(q.matches("gbps"));
  Pattern r = compile("link.**");
  EXPECT_TRUE(r.matches("link.0.1.gbps"));
  EXPECT_FALSE(r.matches("link"));
}

TEST(Pattern, LiteralPatterns) {
  Pattern p = compile("link.0.1.gbps");
  EXPECT_TRUE(p.isLiteral());
  EXPECT_EQ(p.literalPrefix(), "link.0.1.gbps");
  EXPECT_TRUE(p.matches("link.0.1.gbps"));
  EXPECT_FALSE(p.matches("link.0.1.gbp"));
}

TEST(Pattern, MalformedPatternsAreRejected) {
  EXPECT_NE(Pattern::compile("").status().message().find("empty"), std::string::npos);
  EXPECT_NE(Pattern::compile("a..b").status().message().find("empty component"), std::string::npos);
  EXPECT_NE(Pattern::compile("a.b c").status().message().find("character 4"), std::string::npos);
  EXPECT_NE(Pattern::compile("a.x**.b").status().message().find("whole component"), std::string::npos);
}

}  // namespace
}  // namespace theseus::attrs
