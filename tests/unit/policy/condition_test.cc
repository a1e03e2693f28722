// The condition language: parsing (with the position of every error), types,
// evaluation over a view, three-valued logic for missing data, margins.
#include <gtest/gtest.h>

#include "policy/condition.h"

namespace theseus::policy {
namespace {

constexpr uint64_t kSec = 1000000000ull;

class Conditions : public ::testing::Test {
 protected:
  void SetUp() override {
    const double gbps[] = {10, 10, 2, 10};
    for (int r = 0; r < 4; ++r)
      view_.set("link." + std::to_string(r) + "." + std::to_string((r + 1) % 4) + ".gbps", gbps[r],
                attrs::Source::kProbe, r, 10 * kSec);
    view_.set("node.h1.healthy", 1, attrs::Source::kFile, 0, 10 * kSec);
    view_.set("node.gpu-7.healthy", 0, attrs::Source::kFile, 0, 10 * kSec);
    view_.set("rank.2.wait_us", 500, attrs::Source::kProbe, 1, 1 * kSec);  // old
  }
  std::optional<bool> eval(const std::string& text, int lean = 0, double margin = 0, uint64_t maxAge = 0,
                           int slowLinks = -1) {
    auto c = Condition::parse(text);
    EXPECT_TRUE(c.isOk()) << text << ": " << c.status().message();
    if (!c.isOk()) return std::nullopt;
    ConditionContext ctx;
    ctx.view = &view_;
    ctx.nowNs = 10 * kSec;
    ctx.maxAgeNs = maxAge;
    ctx.nranks = 4;
    ctx.nnodes = 2;
    ctx.lean = lean;
    ctx.margin = margin;
    ctx.slowLinks = slowLinks;
    return c.value().eval(ctx);
  }
  std::string error(const std::string& text) {
    auto c = Condition::parse(text);
    EXPECT_FALSE(c.isOk()) << text << " parsed";
    return c.isOk() ? std::string() : c.status().message();
  }
  attrs::ClusterView view_;
};

TEST_F(Conditions, ComparisonsAggregatesAndArithmetic) {
  EXPECT_EQ(eval("min(link.*.*.gbps) < 0.5 * median(link.*.*.gbps)"), true);
  EXPECT_EQ(eval("min(link.*.*.gbps) < 0.1 * median(link.*.*.gbps)"), false);
  EXPECT_EQ(eval("max(link.*.*.gbps) == 10 and count(link.*.*.gbps) == 4"), true);
  EXPECT_EQ(eval("sum(link.*.*.gbps) / count(link.*.*.gbps) == mean(link.*.*.gbps)"), true);
  EXPECT_EQ(eval("link.2.3.gbps <= 2 && link.0.1.gbps >= 10"), true);
  EXPECT_EQ(eval("-link.2.3.gbps + 3 != 1"), false);
  EXPECT_EQ(eval("(1 + 2) * 3 == 9 and 1 + 2 * 3 == 7 and 8 / 2 / 2 == 2 and 5 - 2 - 1 == 2"), true);
  EXPECT_EQ(eval("nranks == 4 and nnodes == 2"), true);
  EXPECT_EQ(eval("'node.gpu-7.healthy' == 0"), true);
  EXPECT_EQ(eval("min('node.*.healthy') == 0 and max(node.*.healthy) == 1"), true);
  EXPECT_EQ(eval("exists(node.*.healthy) and not exists(gpu.*.throttled)"), true);
  EXPECT_EQ(eval("not (1 > 2) or false"), true);
  EXPECT_EQ(eval("!(1 < 2) || 1 != 1"), false);
  EXPECT_EQ(eval("true"), true);
  EXPECT_EQ(eval("1e3 == 1000 and .5 == 0.5"), true);
}

TEST_F(Conditions, SlowLinksCountsLinkVerdicts) {
  EXPECT_EQ(eval("slow_links > 0", 0, 0, 0, 2), true);
  EXPECT_EQ(eval("slow_links > 0", 0, 0, 0, 0), false);
  EXPECT_EQ(eval("slow_links > 0"), std::nullopt);  // not tracked
  EXPECT_TRUE(Condition::parse("nranks > 2 and (slow_links >= 1 or false)").value().usesSlowLinks());
  EXPECT_FALSE(Condition::parse("nranks > 2").value().usesSlowLinks());
}

TEST_F(Conditions, MissingDataIsUnknownNeverTrue) {
  EXPECT_EQ(eval("gpu.0.throttled == 1"), std::nullopt);
  EXPECT_EQ(eval("not (gpu.0.throttled == 1)"), std::nullopt);
  EXPECT_EQ(eval("max(gpu.*.throttled) > 0"), std::nullopt);
  EXPECT_EQ(eval("count(gpu.*.throttled) == 0"), true);
  EXPECT_EQ(eval("gpu.0.throttled == 1 and 1 == 2"), false);  // false wins over unknown
  EXPECT_EQ(eval("gpu.0.throttled == 1 or 1 == 1"), true);    // true wins over unknown
  EXPECT_EQ(eval("gpu.0.throttled == 1 or 1 == 2"), std::nullopt);
  EXPECT_EQ(eval("1 / (link.0.1.gbps - 10) > 0"), std::nullopt);  // division by zero
  // Stale values count as missing when the policy sets a maximum age.
  EXPECT_EQ(eval("rank.2.wait_us > 100"), true);
  EXPECT_EQ(eval("rank.2.wait_us > 100", 0, 0, 5 * kSec), std::nullopt);
  EXPECT_EQ(eval("count(rank.*.wait_us) == 0", 0, 0, 5 * kSec), true);
}

TEST_F(Conditions, MarginFavoursTheCurrentState) {
  // link.2.3 at 2 GB/s against a median of 10: "< 0.15 * median" is false exactly...
  EXPECT_EQ(eval("link.2.3.gbps < 0.15 * median(link.*.*.gbps)"), false);
  // ...but true for an active rule with a 50% margin (threshold 1.5 -> 2.25).
  EXPECT_EQ(eval("link.2.3.gbps < 0.15 * median(link.*.*.gbps)", 1, 0.5), true);
  EXPECT_EQ(eval("link.2.3.gbps > 2.5", 1, 0.25), true);
  EXPECT_EQ(eval("link.2.3.gbps > 2.5", 1, 0.1), false);
  EXPECT_EQ(eval("link.2.3.gbps >= 2.5", 1, 0.2), true);
  EXPECT_EQ(eval("link.2.3.gbps <= 1.8", 1, 0.2), true);
  // Under 'not' the margin still favours the whole condition being true.
  EXPECT_EQ(eval("not (link.2.3.gbps > 2.1)"), true);
  EXPECT_EQ(eval("not (link.2.3.gbps < 2.1)", 1, 0.1), true);   // 2 < 2.1 - 0.21 is false -> not: true
  EXPECT_EQ(eval("not (link.2.3.gbps < 2.1)", 0, 0.1), false);
  // Equality is exact.
  EXPECT_EQ(eval("link.2.3.gbps == 2.1", 1, 0.5), false);
}

TEST_F(Conditions, ErrorsSayWhereAndWhat) {
  EXPECT_NE(error("").find("at character 1: expression ends"), std::string::npos);
  EXPECT_NE(error("min(link.*.*.gbps) <").find("at character 21"), std::string::npos);
  EXPECT_NE(error("link.*.*.gbps < 3").find("is a pattern: use it inside min()"), std::string::npos);
  EXPECT_NE(error("avg(link.*.*.gbps) < 3").find("unknown function 'avg'"), std::string::npos);
  EXPECT_NE(error("min(link.*.*.gbps < 3").find("has no closing ')'"), std::string::npos);
  EXPECT_NE(error("min() < 3").find("needs an attribute name pattern"), std::string::npos);
  EXPECT_NE(error("min(link..gbps) < 3").find("empty component"), std::string::npos);
  EXPECT_NE(error("link.0.1.gbps").find("is a number, not a comparison"), std::string::npos);
  EXPECT_NE(error("1 < 2 < 3").find("cannot be chained"), std::string::npos);
  EXPECT_NE(error("1 and 2").find("'and' needs a boolean"), std::string::npos);
  EXPECT_NE(error("(1 < 2) + 1 > 0").find("arithmetic needs a number"), std::string::npos);
  EXPECT_NE(error("not 3").find("'not' needs a boolean"), std::string::npos);
  EXPECT_NE(error("(1 < 2").find("expected ')'"), std::string::npos);
  EXPECT_NE(error("1 < 2)").find("unexpected ')'"), std::string::npos);
  EXPECT_NE(error("64K < 3").find("is not a number"), std::string::npos);
  EXPECT_NE(error("'node.x < 3").find("no closing quote"), std::string::npos);
  EXPECT_NE(error("1 < 2 $").find("at character 7"), std::string::npos);
  EXPECT_NE(error("1 = 2").find("at character 3"), std::string::npos);
}

// Generated or hostile conditions are bounded (issue 14): 5,000 parentheses, 'not's or '-'s, or
// 5,000 operators in a row, are errors, not a stack overflow in the parser, evaluation or the
// tree's destruction. 64 levels and 4,096 operators still parse.
TEST_F(Conditions, NestingAndSizeAreBounded) {
  auto repeat = [](const std::string& s, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += s;
    return out;
  };
  EXPECT_NE(error(repeat("(", 5000) + "nranks > 1" + repeat(")", 5000)).find("nests more than 64 levels"),
            std::string::npos);
  EXPECT_NE(error(repeat("not ", 5000) + "nranks > 1").find("nests more than 64 levels"), std::string::npos);
  EXPECT_NE(error(repeat("- ", 5000) + "1 > 0").find("nests more than 64 levels"), std::string::npos);
  std::string chain = "nranks > 0";
  for (int i = 0; i < 5000; ++i) chain += " and nranks > 0";
  EXPECT_NE(error(chain).find("more than 4096 operators"), std::string::npos);
  EXPECT_EQ(eval(repeat("(", 63) + "nranks > 1" + repeat(")", 63)), true);
  std::string ok = "nranks > 0";
  for (int i = 0; i < 4000; ++i) ok += " and nranks > 0";
  EXPECT_EQ(eval(ok), true);
}

}  // namespace
}  // namespace theseus::policy
