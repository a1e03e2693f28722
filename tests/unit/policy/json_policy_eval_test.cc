// Evaluating JSON policies over views: size cuts, matching, parameters, rings
// around slow links, straggler roots, hysteresis and dwell, and the checks of
// evaluate() (forced schedules, completion, rejected decisions).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>

#include "policy/default_selector.h"
#include "policy/json_policy.h"
#include "policy_test_util.h"

namespace theseus::policy {
namespace {

using namespace testing;
using schedule::Collective;

const Decision& at(const DecisionTable& t, Collective c, uint64_t bytes) {
  const Decision* d = t.lookup(c, bytes);
  EXPECT_NE(d, nullptr);
  static const Decision none;
  return d ? *d : none;
}

TEST(JsonPolicyEval, SizeAxisIsCutAtRuleBoundaries) {
  auto p = parsePolicy(R"json({"version":1,"rules":[
    {"name":"mid","collectives":["allreduce"],"min_bytes":"64K","max_bytes":"1M",
     "use":{"schedule":"ring","channels":2,"slice_bytes":"256K"}}]})json");
  attrs::ClusterView v;
  auto t = evaluate(*p, input(v, 4, kSec));
  ASSERT_TRUE(t.isOk()) << t.status().message();
  const auto& r = t.value().ranges(Collective::kAllReduce);
  ASSERT_EQ(r.size(), 4u) << t.value().describe();
  EXPECT_EQ(r[0].maxBytes, 32u << 10);
  EXPECT_EQ(r[1].minBytes, (32u << 10) + 1);
  EXPECT_EQ(r[1].maxBytes, (64u << 10) - 1);
  EXPECT_EQ(r[2].minBytes, 64u << 10);
  EXPECT_EQ(r[2].maxBytes, 1u << 20);
  EXPECT_EQ(r[3].minBytes, (1u << 20) + 1);
  EXPECT_EQ(r[2].decision.schedule, "ring");
  EXPECT_EQ(r[2].decision.params.channels, 2);
  EXPECT_EQ(r[2].decision.sliceBytes, 256u << 10);
  EXPECT_EQ(r[2].decision.why, "rule 0 'mid'");
  EXPECT_EQ(r[0].decision.why, "static choice");
  EXPECT_EQ(r[3].decision.why, "static choice");
  // Other collectives: the static choice throughout.
  EXPECT_EQ(t.value().ranges(Collective::kAllGather).size(), 2u);
}

// Many rules evaluate in about linear time (issue 14: 32,000 rules took > 90 s): 40,000 rules
// with disjoint ranges, each alternating with overlapping wide rules further down that only the
// gaps expose, all resolved by first match.
TEST(JsonPolicyEval, ManyRulesEvaluateQuicklyAndFirstMatchStillWins) {
  std::string doc = R"json({"version":1,"rules":[)json";
  const int n = 40000;
  for (int i = 0; i < n; ++i) {
    // Rule i covers [128 i, 128 i + 63]; a wide rule at the end covers everything.
    doc += R"json({"collectives":["allreduce"],"min_bytes":)json" + std::to_string(128 * i) + R"json(,"max_bytes":)json" +
           std::to_string(128 * i + 63) + R"json(,"use":{"schedule":")json" + (i % 2 ? "ring" : "direct") + R"json("}},)json";
  }
  doc += R"json({"name":"wide","collectives":["allreduce"],"use":{"schedule":"halving_doubling"}}]})json";
  auto p = parsePolicy(doc);
  attrs::ClusterView v;
  auto start = std::chrono::steady_clock::now();
  auto t = evaluate(*p, input(v, 4, kSec));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(t.isOk()) << t.status().message();
  EXPECT_LT(seconds, 2.0);
  EXPECT_EQ(at(t.value(), Collective::kAllReduce, 128 * 7 + 5).schedule, "ring");
  EXPECT_EQ(at(t.value(), Collective::kAllReduce, 128 * 7 + 5).why, "rule 7");
  EXPECT_EQ(at(t.value(), Collective::kAllReduce, 128 * 8).schedule, "direct");
  EXPECT_EQ(at(t.value(), Collective::kAllReduce, 128 * 7 + 64).schedule, "halving_doubling");  // a gap
  EXPECT_EQ(at(t.value(), Collective::kAllReduce, uint64_t(1) << 40).why, "rule 40000 'wide'");
}

// A rule with an explicit order of thousands of ranks loads quickly (generating the built-ins at that
// size for the load-time check took 5 s for 2,400 ranks); it applies at exactly that many ranks.
TEST(JsonPolicyEval, ExplicitOrdersOfThousandsOfRanksLoadQuickly) {
  std::string order;
  for (int i = 0; i < 5000; ++i) order += (i ? "," : "") + std::to_string(i);
  auto start = std::chrono::steady_clock::now();
  auto p = parsePolicy(R"json({"version":1,"rules":[{"name":"big","use":{"schedule":["ring","tree"],"order":[)json" +
                       order + R"json(],"channels":8,"pipeline":16}}]})json");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_NE(p, nullptr);
  EXPECT_LT(seconds, 1.0);
  EXPECT_EQ(p->rules()[0].minRanks, 5000);
  EXPECT_EQ(p->rules()[0].maxRanks, 5000);
}

TEST(JsonPolicyEval, FirstMatchingRuleWinsAndMatchesRanksAndNodes) {
  auto p = parsePolicy(R"json({"version":1,"rules":[
    {"name":"big jobs","ranks":{"min":8},"use":"direct"},
    {"name":"multi-host","nodes":{"min":2},"collectives":["allreduce","allgather","broadcast"],"use":"hierarchical"},
    {"name":"trees","use":{"schedule":["tree","ring"],"pipeline":8}}]})json");
  attrs::ClusterView v;
  auto small = evaluate(*p, input(v, 4, kSec));
  ASSERT_TRUE(small.isOk()) << small.status().message();
  EXPECT_EQ(at(small.value(), Collective::kAllReduce, 1 << 20).schedule, "tree");
  EXPECT_EQ(at(small.value(), Collective::kAllReduce, 1 << 20).params.pipelineChunks, 8);
  EXPECT_EQ(at(small.value(), Collective::kAllGather, 100).schedule, "ring");  // tree does not serve allgather
  EXPECT_EQ(at(small.value(), Collective::kAllGather, 100).why, "rule 2 'trees'");
  EXPECT_EQ(at(small.value(), Collective::kAlltoAll, 100).why, "static choice");  // neither serves alltoall
  auto hosts = evaluate(*p, input(v, 4, kSec, {0, 0, 1, 1}));
  ASSERT_TRUE(hosts.isOk());
  EXPECT_EQ(at(hosts.value(), Collective::kAllReduce, 100).schedule, "hierarchical");
  EXPECT_EQ(at(hosts.value(), Collective::kReduce, 100).schedule, "tree");
  auto big = evaluate(*p, input(v, 8, kSec, {0, 0, 0, 0, 1, 1, 1, 1}));
  ASSERT_TRUE(big.isOk());
  EXPECT_EQ(at(big.value(), Collective::kAllReduce, 100).schedule, "direct");
}

TEST(JsonPolicyEval, ExplicitOrderRootAndDefault) {
  auto p = parsePolicy(R"json({"version":1,"rules":[
    {"name":"fixed","collectives":["allreduce"],"use":{"schedule":"ring","order":[0,2,1,3],"bidirectional":true}},
    {"name":"rooted","collectives":["allreduce"],"use":{"schedule":"double_binary_tree","root":2}},
    {"name":"rest","use":"default"}]})json");
  attrs::ClusterView v;
  auto four = evaluate(*p, input(v, 4, kSec));
  ASSERT_TRUE(four.isOk()) << four.status().message();
  const Decision& d = at(four.value(), Collective::kAllReduce, 1 << 20);
  EXPECT_EQ(d.params.order, (std::vector<int>{0, 2, 1, 3}));
  EXPECT_TRUE(d.params.bidirectional);
  EXPECT_EQ(d.toString(), "ring(order=0,2,1,3;bidirectional=1)");
  // The explicit order only fits 4 ranks: with 5, the next rule applies.
  auto five = evaluate(*p, input(v, 5, kSec));
  ASSERT_TRUE(five.isOk()) << five.status().message();
  const Decision& e = at(five.value(), Collective::kAllReduce, 1 << 20);
  EXPECT_EQ(e.schedule, "double_binary_tree");
  EXPECT_EQ(e.params.order, (std::vector<int>{2, 3, 4, 0, 1}));
  // "default" is the static choice, labelled with the rule.
  Choice c = defaultChoice({Collective::kAllGather, 1, 5, 1}, AlgoFilter());
  EXPECT_EQ(at(five.value(), Collective::kAllGather, 1 << 20).schedule, c.schedule);
  EXPECT_EQ(at(five.value(), Collective::kAllGather, 1 << 20).why, "rule 2 'rest'");
}

TEST(JsonPolicyEval, ScheduleFilesResolveAgainstThePolicyDirectory) {
  auto p = parsePolicy(R"json({"version":1,"rules":[
    {"name":"rhd","collectives":["allreduce"],"use":"schedules/allreduce_rhd_4.json"}]})json",
                       THESEUS_SOURCE_DIR "/policies");
  ASSERT_NE(p, nullptr);
  attrs::ClusterView v;
  auto t = evaluate(*p, input(v, 4, kSec));
  ASSERT_TRUE(t.isOk()) << t.status().message();
  EXPECT_EQ(at(t.value(), Collective::kAllReduce, 1 << 20).schedule,
            "file:" THESEUS_SOURCE_DIR "/policies/schedules/allreduce_rhd_4.json");
  // The file has a 4-rank program only: with 8 ranks the rule does not apply.
  auto eight = evaluate(*p, input(v, 8, kSec));
  ASSERT_TRUE(eight.isOk());
  EXPECT_EQ(at(eight.value(), Collective::kAllReduce, 1 << 20).why, "static choice");
}

const char* kSlowLinkPolicy = R"json({"version":1,"settings":{"hold":3,"margin":0.2},"rules":[
  {"name":"slow link","collectives":["allreduce"],"min_bytes":"1M",
   "when":"min(link.*.*.gbps) < 0.5 * median(link.*.*.gbps)",
   "use":{"schedule":"ring","order":"avoid_slow_links"}}]})json";

TEST(JsonPolicyEval, SlowLinkRingAvoidsIt) {
  auto p = parsePolicy(kSlowLinkPolicy);
  attrs::ClusterView v;
  setRingLinks(v, 6, 10, kSec);
  setLink(v, 2, 3, "gbps", 1, kSec);
  DecisionTable t;
  for (int i = 0; i < 3; ++i) {  // hold = 3 evaluations
    auto r = evaluate(*p, input(v, 6, kSec));
    ASSERT_TRUE(r.isOk()) << r.status().message();
    t = r.take();
  }
  const Decision& d = at(t, Collective::kAllReduce, 64 << 20);
  EXPECT_EQ(d.schedule, "ring");
  EXPECT_EQ(d.why, "rule 0 'slow link'");
  ASSERT_TRUE(isPermutation(d.params.order, 6)) << d.toString();
  EXPECT_FALSE(ringUses(d.params.order, 6, 2, 3)) << d.toString();
  // Small messages are not the rule's business.
  EXPECT_EQ(at(t, Collective::kAllReduce, 1000).why, "static choice");
}

// A noisy attribute around the threshold must not make the table flap.
TEST(JsonPolicyEval, HysteresisAndDwellPreventFlapping) {
  auto p = parsePolicy(R"json({"version":1,"settings":{"hold":3,"margin":0.2,"min_dwell_ms":5000},"rules":[
    {"name":"slow link","collectives":["allreduce"],"when":"link.0.1.gbps < 5",
     "use":{"schedule":"ring","order":[1,0,2,3]}}]})json");
  attrs::ClusterView v;
  DecisionTable current;
  bool haveCurrent = false;
  uint64_t now = 0, since = 0;
  int swaps = 0;
  std::vector<bool> activeLog;
  auto step = [&](double gbps) {
    now += kSec;
    setLink(v, 0, 1, "gbps", gbps, now);
    PolicyInput in = input(v, 4, now);
    if (haveCurrent) {
      in.current = &current;
      in.currentAgeNs = now - since;
    }
    auto r = evaluate(*p, in);
    ASSERT_TRUE(r.isOk()) << r.status().message();
    if (!haveCurrent || !r.value().sameDecisions(current)) {
      if (haveCurrent) ++swaps;
      current = r.take();
      haveCurrent = true;
      since = now;
    }
    activeLog.push_back(at(current, Collective::kAllReduce, 1 << 20).why == "rule 0 'slow link'");
  };
  // Noise across the threshold: never three in a row, never active.
  for (double g : {4.0, 6.0, 4.5, 5.5, 4.9, 5.1, 3.0, 7.0}) step(g);
  EXPECT_EQ(swaps, 0);
  // The link really degrades: active after three evaluations.
  for (double g : {2.0, 2.0, 2.0}) step(g);
  EXPECT_EQ(swaps, 1);
  EXPECT_TRUE(activeLog.back());
  // Recovery noise inside the margin (threshold 5, 6 while active): stays.
  for (double g : {5.5, 5.8, 5.2, 5.9, 5.5, 5.6}) step(g);
  EXPECT_EQ(swaps, 1);
  // Clearly healthy again: the rule lets go after three evaluations.
  for (double g : {9.0, 9.0, 9.0}) step(g);
  EXPECT_EQ(swaps, 2);
  EXPECT_FALSE(activeLog.back());
  // Degrades again right away: the rule turns active, but the table stays
  // until it has been in effect for min_dwell_ms (5 evaluations of 1 s).
  for (double g : {1.0, 1.0, 1.0}) step(g);
  EXPECT_EQ(swaps, 2);
  step(1.0);
  EXPECT_EQ(swaps, 2);
  step(1.0);
  EXPECT_EQ(swaps, 3);
  EXPECT_TRUE(activeLog.back());
}

TEST(JsonPolicyEval, StragglerRootsTheTree) {
  auto p = parsePolicy(R"json({"version":1,"rules":[
    {"name":"straggler","collectives":["allreduce"],"ranks":{"min":3},
     "when":"max(rank.*.wait_us) > 1000 and max(rank.*.wait_us) > 4 * median(rank.*.wait_us)",
     "use":{"schedule":["double_binary_tree","tree"],"root":"straggler"}}]})json");
  attrs::ClusterView v;
  for (int r = 0; r < 6; ++r)
    v.set("rank." + std::to_string(r) + ".wait_us", r == 4 ? 20000 : 50, attrs::Source::kProbe, (r + 1) % 6, kSec);
  auto t = evaluate(*p, input(v, 6, kSec));
  ASSERT_TRUE(t.isOk()) << t.status().message();
  const Decision& d = at(t.value(), Collective::kAllReduce, 4096);
  EXPECT_EQ(d.schedule, "double_binary_tree");
  ASSERT_FALSE(d.params.order.empty());
  EXPECT_EQ(d.params.order[0], 4);
}

// A policy whose output does not fit the communicator fails with a clear error.
class BadPolicy : public Policy {
 public:
  const std::string& name() const override { return name_; }
  std::string describe() const override { return "bad"; }
  Result<DecisionTable> decide(const PolicyInput&) override { return table_; }
  std::string name_ = "bad";
  DecisionTable table_;
};

TEST(Evaluate, MissingCollectivesGetTheStaticChoice) {
  attrs::ClusterView v;
  BadPolicy p;
  Decision d;
  d.schedule = "tree";
  ASSERT_TRUE(p.table_.add(Collective::kAllReduce, 0, UINT64_MAX, d).isOk());
  auto t = evaluate(p, input(v, 4, kSec));
  ASSERT_TRUE(t.isOk()) << t.status().message();
  EXPECT_EQ(t.value().ranges(Collective::kAllReduce).size(), 1u);
  EXPECT_EQ(at(t.value(), Collective::kAllReduce, 1 << 20).schedule, "tree");
  DecisionTable defaults = defaultTable(4, 1);
  for (Collective c : {Collective::kBroadcast, Collective::kReduce, Collective::kAllGather,
                       Collective::kReduceScatter, Collective::kAlltoAll, Collective::kGather, Collective::kScatter}) {
    ASSERT_EQ(t.value().ranges(c).size(), defaults.ranges(c).size()) << schedule::collectiveName(c);
    for (uint64_t bytes : {uint64_t(8), uint64_t(1) << 30})
      EXPECT_EQ(at(t.value(), c, bytes), at(defaults, c, bytes)) << schedule::collectiveName(c);
  }
}

TEST(Evaluate, DecisionsThatCannotRunAreRejected) {
  attrs::ClusterView v;
  BadPolicy p;
  Decision d;
  d.schedule = "tree";
  ASSERT_TRUE(p.table_.add(Collective::kAllGather, 0, UINT64_MAX, d).isOk());
  auto r = evaluate(p, input(v, 4, kSec));
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find("policy 'bad': allgather [0, 18446744073709551615] -> tree: schedule 'tree' "
                                      "does not serve allgather with 4 ranks"),
            std::string::npos)
      << r.status().message();
  p.table_ = DecisionTable();
  d.schedule = "ring";
  d.params.order = {0, 1, 2};
  ASSERT_TRUE(p.table_.add(Collective::kAllReduce, 0, UINT64_MAX, d).isOk());
  r = evaluate(p, input(v, 4, kSec));
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find("order has 3 entries for 4 ranks"), std::string::npos) << r.status().message();
  p.table_ = DecisionTable();
  d.schedule = "warp_drive";
  d.params = {};
  ASSERT_TRUE(p.table_.add(Collective::kAllReduce, 0, UINT64_MAX, d).isOk());
  r = evaluate(p, input(v, 4, kSec));
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find("unknown schedule 'warp_drive'"), std::string::npos) << r.status().message();
  PolicyInput bad = input(v, 4, kSec, {0, 1});
  EXPECT_FALSE(evaluate(p, bad).isOk());
}

}  // namespace
}  // namespace theseus::policy
