// The "nics" section of JSON policies (policy/nic_rules.h): per-rank conditions with $r, the
// moves and their hysteresis, the choices in the table (wire format, comparison, description),
// the load-time errors, and evaluate()'s check of the ranks.
#include <gtest/gtest.h>

#include <string>

#include "policy/json_policy.h"
#include "policy/nic_rules.h"
#include "policy_test_util.h"

namespace theseus::policy {
namespace {

using namespace testing;

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

// Ranks 0..n-1 at 200 Gb/s, except `slow` at `gbps`.
void setRates(attrs::ClusterView& v, int n, int slow, double gbps, uint64_t atNs) {
  for (int r = 0; r < n; ++r)
    v.set("rank." + std::to_string(r) + ".net_rate_gbps", r == slow ? gbps : 200.0, attrs::Source::kProbe, r, atNs);
}

const char* kDegraded = R"json({"version":1,"rules":[],"nics":[
  {"name":"degraded port","when":"rank.$r.net_rate_gbps < 0.5 * max(rank.*.net_rate_gbps)","hold":2}]})json";

TEST(NicRules, TheRankWhosePortDegradedMovesAfterHoldEvaluationsAndComesBack) {
  auto p = parsePolicy(kDegraded);
  ASSERT_TRUE(p);
  attrs::ClusterView v;
  setRates(v, 4, -1, 0, kSec);
  auto t = evaluate(*p, input(v, 4, kSec));
  ASSERT_TRUE(t.isOk()) << t.status().message();
  EXPECT_TRUE(t.value().nicChoices().empty());
  setRates(v, 4, 2, 25, 2 * kSec);
  t = evaluate(*p, input(v, 4, 2 * kSec));  // hold 2: not yet
  ASSERT_TRUE(t.isOk());
  EXPECT_TRUE(t.value().nicChoices().empty());
  t = evaluate(*p, input(v, 4, 3 * kSec));
  ASSERT_TRUE(t.isOk());
  ASSERT_EQ(t.value().nicChoices().size(), 1u) << t.value().describe();
  EXPECT_EQ(t.value().nicChoices()[0].rank, 2);
  EXPECT_EQ(t.value().nicMove(2), NicChoice::kOtherNic);
  EXPECT_EQ(t.value().nicMove(1), NicChoice::kStay);
  EXPECT_EQ(t.value().nicChoices()[0].why, "nic rule 0 'degraded port'");
  EXPECT_HAS(t.value().describe(), "rank 2 NIC -> other_nic  (nic rule 0 'degraded port')");
  // Healed: the choice stays one more evaluation (hold 2), then goes.
  setRates(v, 4, -1, 0, 4 * kSec);
  t = evaluate(*p, input(v, 4, 4 * kSec));
  EXPECT_EQ(t.value().nicMove(2), NicChoice::kOtherNic);
  t = evaluate(*p, input(v, 4, 5 * kSec));
  EXPECT_TRUE(t.value().nicChoices().empty());
}

TEST(NicRules, MissingAttributesMoveNothingAndTheStrongestMoveWins) {
  auto p = parsePolicy(R"json({"version":1,"rules":[],"nics":[
    {"name":"slow","when":"rank.$r.net_rate_gbps < 100"},
    {"name":"erroring","move":"any","when":"rank.$r.net_errors > 10"}]})json");
  ASSERT_TRUE(p);
  attrs::ClusterView v;
  auto t = evaluate(*p, input(v, 3, kSec));  // nothing measured: unknown, never true
  ASSERT_TRUE(t.isOk());
  EXPECT_TRUE(t.value().nicChoices().empty());
  setRates(v, 3, 1, 50, kSec);
  v.set("rank.1.net_errors", 20, attrs::Source::kProbe, 1, kSec);
  v.set("rank.0.net_errors", 20, attrs::Source::kProbe, 0, kSec);
  t = evaluate(*p, input(v, 3, kSec));
  ASSERT_TRUE(t.isOk());
  EXPECT_EQ(t.value().nicMove(0), NicChoice::kAnyPath);
  EXPECT_EQ(t.value().nicMove(1), NicChoice::kAnyPath);
  EXPECT_EQ(t.value().nicChoices()[1].why, "nic rule 1 'erroring'");
  EXPECT_EQ(t.value().nicMove(2), NicChoice::kStay);
}

TEST(NicRules, ChoicesTravelInTheTableAndCountAsAChange) {
  DecisionTable a;
  ASSERT_TRUE(a.add(schedule::Collective::kAllReduce, 0, UINT64_MAX, Decision{"ring", {}, 0, "x"}).isOk());
  DecisionTable b = a;
  ASSERT_TRUE(b.addNicChoice(NicChoice{3, NicChoice::kAnyPath, "nic rule 0"}).isOk());
  ASSERT_TRUE(b.addNicChoice(NicChoice{1, NicChoice::kOtherNic, ""}).isOk());
  EXPECT_FALSE(a.sameDecisions(b));
  EXPECT_FALSE(b.addNicChoice(NicChoice{1, NicChoice::kAnyPath, ""}).isOk());  // one per rank
  EXPECT_FALSE(b.addNicChoice(NicChoice{2, NicChoice::kStay, ""}).isOk());
  EXPECT_FALSE(b.addNicChoice(NicChoice{-1, NicChoice::kOtherNic, ""}).isOk());
  auto copy = DecisionTable::deserialize(b.serialize());
  ASSERT_TRUE(copy.isOk()) << copy.status().message();
  EXPECT_TRUE(copy.value().sameDecisions(b));
  ASSERT_EQ(copy.value().nicChoices().size(), 2u);
  EXPECT_EQ(copy.value().nicChoices()[0].rank, 1);  // sorted by rank
  EXPECT_EQ(copy.value().nicChoices()[1].why, "nic rule 0");
  // Garbage from the wire is an error, never a choice.
  std::string text = b.serialize();
  text.replace(text.find("\"move\":2"), 8, "\"move\":7");
  EXPECT_FALSE(DecisionTable::deserialize(text).isOk());
  text = a.serialize();
  text.insert(text.size() - 1, ",\"nics\":{}");
  EXPECT_FALSE(DecisionTable::deserialize(text).isOk());
}

TEST(NicRules, EvaluateRefusesAChoiceForARankOutsideTheCommunicator) {
  class Outside final : public Policy {
   public:
    const std::string& name() const override { return name_; }
    std::string describe() const override { return name_; }
    Result<DecisionTable> decide(const PolicyInput&) override {
      DecisionTable t;
      TH_CHECK(t.addNicChoice(NicChoice{5, NicChoice::kOtherNic, ""}));
      return t;
    }
    std::string name_ = "outside";
  } p;
  attrs::ClusterView v;
  auto t = evaluate(p, input(v, 4, kSec));
  ASSERT_FALSE(t.isOk());
  EXPECT_HAS(t.status().message(), "policy 'outside': a NIC choice for rank 5 of 4");
}

TEST(NicRules, LoadErrorsNameTheRuleAndTheField) {
  auto error = [](const std::string& nics) {
    auto p = JsonPolicy::parse(R"json({"version":1,"rules":[],"nics":)json" + nics + "}", "p.json", ".");
    EXPECT_FALSE(p.isOk()) << nics;
    return p.isOk() ? std::string() : p.status().message();
  };
  EXPECT_HAS(error("{}"), "p.json: field 'nics': expected an array of NIC rules");
  EXPECT_HAS(error("[3]"), "nics[0]: expected an object");
  EXPECT_HAS(error(R"json([{"name":"a"}])json"), "nics[0] ('a'): field 'when' is missing");
  EXPECT_HAS(error(R"json([{"when":"rank.$r.x >"}])json"), "nics[0]: field 'when': at character");
  EXPECT_HAS(error(R"json([{"when":"rank.$r.x >"}])json"), "(with $r = 0)");
  EXPECT_HAS(error(R"json([{"when":"rank.$r.x"}])json"), "nics[0]: field 'when'");
  EXPECT_HAS(error(R"json([{"when":"rank.$r.x > 1","move":"tcp"}])json"),
             "field 'move': expected \"other_nic\" or \"any\" (got \"tcp\")");
  EXPECT_HAS(error(R"json([{"when":"rank.$r.x > 1","hold":0}])json"), "field 'hold': expected an integer");
  EXPECT_HAS(error(R"json([{"when":"rank.$r.x > 1","use":"ring"}])json"), "nics[0]: unknown field 'use'");
}

TEST(NicRules, DollarRBecomesTheRankEverywhereInTheText) {
  EXPECT_EQ(NicRule::forRank("rank.$r.a > 'rank.$r.b' + $r", 12), "rank.12.a > 'rank.12.b' + 12");
  EXPECT_EQ(NicRule::forRank("no rank", 3), "no rank");
}

}  // namespace
}  // namespace theseus::policy
