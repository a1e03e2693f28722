// The shipped policies: the built-in static policy is policies/static.json and
// reproduces default_selector's choices; policies/adaptive.json reacts to slow
// links, unhealthy NICs and stragglers, and switches back when they recover;
// policies/doctor.json reacts to the doctor's live verdicts (doctor.* attributes).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <set>

#include "policy/default_selector.h"
#include "schedule/builtins.h"
#include "policy_test_util.h"

namespace theseus::policy {
namespace {

using namespace testing;
using schedule::Collective;

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(StaticPolicy, BuiltInTextIsTheShippedFile) {
  EXPECT_EQ(readFile(THESEUS_SOURCE_DIR "/policies/static.json"), staticPolicyText())
      << "policies/static.json is not what the default choice's table (src/policy/default_selector.cc) generates: "
         "regenerate it with `theseus-config --static-policy > policies/static.json`";
}

TEST(StaticPolicy, ReproducesTheDefaultSelector) {
  auto builtIn = load("static");
  auto file = load(THESEUS_SOURCE_DIR "/policies/static.json");
  ASSERT_TRUE(builtIn.isOk()) << builtIn.status().message();
  ASSERT_TRUE(file.isOk()) << file.status().message();
  const uint64_t small = smallMessageBytes();
  attrs::ClusterView v;
  int checked = 0;
  for (int n = 1; n <= 16; ++n) {
    for (int nodes : {1, 2}) {
      if (nodes > n) continue;
      std::vector<int> hostOf;
      if (nodes == 2)
        for (int r = 0; r < n; ++r) hostOf.push_back(r < n / 2 ? 0 : 1);
      auto t = evaluate(*builtIn.value(), input(v, n, kSec, hostOf));
      ASSERT_TRUE(t.isOk()) << t.status().message();
      auto f = evaluate(*file.value(), input(v, n, kSec, hostOf));
      ASSERT_TRUE(f.isOk());
      EXPECT_TRUE(t.value().sameDecisions(f.value()));
      for (Collective c : schedule::kEveryCollective) {
        for (uint64_t bytes : {uint64_t(0), uint64_t(1), small, small + 1, uint64_t(1) << 20, uint64_t(1) << 34}) {
          Choice want = defaultChoice({c, sizeClass(bytes), n, nodes}, AlgoFilter::fromEnv());
          const Decision* got = t.value().lookup(c, bytes);
          ASSERT_NE(got, nullptr);
          EXPECT_EQ(got->schedule, want.schedule) << schedule::collectiveName(c) << " n=" << n << " bytes=" << bytes;
          EXPECT_EQ(got->params, want.params);
          EXPECT_EQ(got->sliceBytes, 0u);
          ++checked;
        }
      }
      // And the default table (what the engine uses before any policy ran) agrees.
      EXPECT_TRUE(t.value().sameDecisions(defaultTable(n, nodes))) << t.value().describe();
    }
  }
  EXPECT_EQ(checked, 31 * 8 * 6);
}

class AdaptivePolicy : public ::testing::Test {
 protected:
  void SetUp() override {
    auto p = load(THESEUS_SOURCE_DIR "/policies/adaptive.json");
    ASSERT_TRUE(p.isOk()) << p.status().message();
    policy_ = p.take();
    staticTable_ = defaultTable(4, 1);
  }
  // One evaluation at time `now` (seconds); swaps like the leader loop does.
  const DecisionTable& tick(int nranks = 4, std::vector<int> hostOf = {}) {
    now_ += kSec / 2;
    PolicyInput in = input(view_, nranks, now_, std::move(hostOf));
    if (have_) {
      in.current = &current_;
      in.currentAgeNs = now_ - since_;
    }
    auto t = evaluate(*policy_, in);
    EXPECT_TRUE(t.isOk()) << t.status().message();
    if (t.isOk() && (!have_ || !t.value().sameDecisions(current_))) {
      if (have_) ++swaps_;
      current_ = t.take();
      have_ = true;
      since_ = now_;
    }
    return current_;
  }
  void healthyLinks(int n = 4) { setRingLinks(view_, n, 10, now_); }

  std::unique_ptr<Policy> policy_;
  attrs::ClusterView view_;
  DecisionTable current_, staticTable_;
  bool have_ = false;
  uint64_t now_ = 100 * kSec, since_ = 0;
  int swaps_ = 0;
};

TEST_F(AdaptivePolicy, HealthyClusterGetsTheStaticChoice) {
  healthyLinks();
  EXPECT_TRUE(sameChoices(tick(), staticTable_)) << current_.describe();
  EXPECT_TRUE(sameChoices(tick(), staticTable_));
  EXPECT_EQ(swaps_, 0);
}

TEST_F(AdaptivePolicy, SlowLinkThenRecovery) {
  healthyLinks();
  tick();
  // Link 1 -> 2 drops to 10%: after 'hold' (2) evaluations large collectives ring around it.
  setLink(view_, 1, 2, "gbps", 1, now_);
  tick();
  EXPECT_EQ(swaps_, 0);
  const DecisionTable& t = tick();
  EXPECT_EQ(swaps_, 1);
  for (Collective c : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter}) {
    const Decision* d = t.lookup(c, 64 << 20);
    EXPECT_EQ(d->schedule, "ring");
    EXPECT_EQ(d->why.rfind("rule 3 'slow or penalised links: the fastest predicted of a ring around them and trees': "
                           "ring(order=", 0), 0u) << d->why;
    EXPECT_NE(d->why.find(" predicted "), std::string::npos) << d->why;  // the prediction that decided
    EXPECT_FALSE(ringUses(d->params.order, 4, 1, 2)) << d->toString();
  }
  EXPECT_TRUE(*t.lookup(Collective::kAllReduce, 1024) == *staticTable_.lookup(Collective::kAllReduce, 1024));
  // The ring no longer measures 1 -> 2; the other links keep being measured.
  // After max_age_ms (5 s) the stale value no longer counts and the policy
  // returns to the static choice (a re-test of the link).
  for (int i = 0; i < 8; ++i) {
    healthyLinks();
    setLink(view_, 1, 2, "gbps", 1, 100 * kSec + kSec);  // the old measurement, not refreshed
    tick();
  }
  EXPECT_EQ(swaps_, 1);
  for (int i = 0; i < 6; ++i) {
    healthyLinks();
    view_.set("link.1.2.gbps", 1, attrs::Source::kProbe, 1, 100 * kSec + kSec);
    tick();
  }
  EXPECT_EQ(swaps_, 2);
  EXPECT_TRUE(sameChoices(current_, staticTable_)) << current_.describe();
}

// A throttled link in a running ring: every link measures the same low
// throughput, but only the slow one is a bottleneck at both ends.
TEST_F(AdaptivePolicy, BottleneckInAPipeline) {
  setRingLinks(view_, 4, 0.03, now_);
  tick();
  for (int r = 0; r < 4; ++r) {
    int next = (r + 1) % 4;
    std::string name = "link." + std::to_string(r) + "." + std::to_string(next) + ".bottleneck";
    view_.set(name, r <= 1 ? 0.97 : 0.03, attrs::Source::kProbe, r, now_);     // queued: 0 and 1
    view_.set(name, r >= 1 ? 0.93 : 0.02, attrs::Source::kProbe, next, now_);  // waited: 2, 3, 0
  }
  tick();
  const DecisionTable& t = tick();
  EXPECT_EQ(swaps_, 1);
  const Decision* d = t.lookup(Collective::kAllReduce, 16 << 20);
  EXPECT_EQ(d->why.rfind("rule 3 'slow or penalised links: the fastest predicted of a ring around them and trees': ", 0),
            0u) << d->why;
  EXPECT_FALSE(ringUses(d->params.order, 4, 1, 2)) << d->toString();
}

TEST_F(AdaptivePolicy, OperatorPenaltyAndUnhealthyNic) {
  healthyLinks();
  tick();
  view_.set("link.2.3.penalty", 4, attrs::Source::kFile, 0, now_);
  tick();
  const DecisionTable& t = tick();
  EXPECT_EQ(swaps_, 1);
  EXPECT_FALSE(ringUses(t.lookup(Collective::kAllReduce, 1 << 30)->params.order, 4, 2, 3));
  // Two hosts, one with a NIC down: hierarchical keeps traffic inside hosts, at every size.
  view_.set("link.2.3.penalty", 1, attrs::Source::kFile, 0, now_);
  view_.set("node.h1.nic.mlx5_0.healthy", 0, attrs::Source::kFile, 0, now_);
  std::vector<int> hosts = {0, 0, 1, 1};
  tick(4, hosts);
  tick(4, hosts);
  const DecisionTable& h = tick(4, hosts);
  EXPECT_EQ(h.lookup(Collective::kAllReduce, 8)->schedule, "hierarchical");
  EXPECT_EQ(h.lookup(Collective::kAllGather, 1 << 30)->schedule, "hierarchical");
  EXPECT_NE(h.lookup(Collective::kReduceScatter, 1 << 30)->schedule, "hierarchical");
}

// A slow host (every link into and out of host 2 at a twentieth, probed; the ring measured
// two of them): every ring passes through it, so allreduce takes the tree the cost model
// predicts fastest, one in which rank 2 is a leaf (it sends to one peer only); allgather has
// only the ring, which stays where it is.
TEST_F(AdaptivePolicy, SlowHostBecomesATreeLeaf) {
  const std::vector<int> hosts = {0, 1, 2, 3};
  auto probe = [&](bool slowHost) {
    for (int a = 0; a < 4; ++a)
      for (int b = 0; b < 4; ++b)
        if (a != b) setLink(view_, a, b, "probe_gbps", slowHost && (a == 2 || b == 2) ? 0.05 : 1.0, now_);
  };
  probe(false);
  setRingForward(view_, 4, 10, now_);  // the usual ring measures the links it sends over
  tick(4, hosts);
  for (int i = 0; i < 5; ++i) {
    probe(true);
    setRingForward(view_, 4, 1, now_);
    setLink(view_, 2, 3, "gbps", 0.05, now_);
    setLink(view_, 1, 2, "gbps", 0.05, now_);
    tick(4, hosts);
  }
  EXPECT_EQ(swaps_, 1) << current_.describe();
  const Decision* d = current_.lookup(Collective::kAllReduce, 16 << 20);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->schedule, "tree") << current_.describe();
  schedule::GenerateRequest req;
  req.collective = Collective::kAllReduce;
  req.nranks = 4;
  req.params = d->params;
  auto program = schedule::generateBuiltin("tree", req);
  ASSERT_TRUE(program.isOk()) << program.status().message();
  std::set<int> peers;
  for (const schedule::Step& s : program.value().ranks[2].steps)
    if (s.sendPeer >= 0) peers.insert(s.sendPeer);
  EXPECT_EQ(peers.size(), 1u) << d->toString();
  EXPECT_EQ(current_.lookup(Collective::kAllGather, 16 << 20)->schedule, "ring");
  // Small messages keep the static choice.
  EXPECT_TRUE(*current_.lookup(Collective::kAllReduce, 1024) == *staticTable_.lookup(Collective::kAllReduce, 1024));
}

TEST_F(AdaptivePolicy, StragglerRootsAllreduceTrees) {
  healthyLinks(6);
  for (int r = 0; r < 6; ++r)
    view_.set("rank." + std::to_string(r) + ".wait_us", r == 5 ? 8000 : 40, attrs::Source::kProbe, 0, now_);
  tick(6);
  tick(6);
  const DecisionTable& t = tick(6);  // hold 2, then min_dwell_ms 1 s after the first table
  EXPECT_EQ(swaps_, 1);
  const Decision* d = t.lookup(Collective::kAllReduce, 1 << 20);
  EXPECT_EQ(d->schedule, "double_binary_tree");
  ASSERT_FALSE(d->params.order.empty());
  EXPECT_EQ(d->params.order[0], 5);
  // Recovered: back to the static choice after hold + dwell.
  for (int r = 0; r < 6; ++r)
    view_.set("rank." + std::to_string(r) + ".wait_us", 40, attrs::Source::kProbe, 0, now_);
  for (int i = 0; i < 4; ++i) tick(6);
  EXPECT_TRUE(sameChoices(current_, defaultTable(6, 1))) << current_.describe();
}

// policies/doctor.json: the leader's doctor publishes doctor.slow_host.<h> and
// doctor.compute_straggler.<r> (doctor/live_doctor.h); the policy routes around them.
class DoctorPolicy : public AdaptivePolicy {
 protected:
  void SetUp() override {
    auto p = load(THESEUS_SOURCE_DIR "/policies/doctor.json");
    ASSERT_TRUE(p.isOk()) << p.status().message();
    policy_ = p.take();
  }
};

TEST_F(DoctorPolicy, ASlowHostVerdictKeepsTrafficInsideHostsUntilItIsWithdrawn) {
  const std::vector<int> hosts = {0, 0, 1, 1, 2, 2};
  EXPECT_TRUE(sameChoices(tick(6, hosts), defaultTable(6, 3))) << current_.describe();
  view_.set("doctor.slow_host.1", 12.5, attrs::Source::kProbe, 0, now_);
  view_.set("doctor.culprit.rank", 2, attrs::Source::kProbe, 0, now_);
  tick(6, hosts);
  const DecisionTable& t = tick(6, hosts);  // hold 2
  EXPECT_EQ(swaps_, 1);
  for (Collective c : {Collective::kAllReduce, Collective::kAllGather, Collective::kBroadcast})
    EXPECT_EQ(t.lookup(c, 1 << 20)->schedule, "hierarchical") << schedule::collectiveName(c);
  EXPECT_NE(t.lookup(Collective::kAllReduce, 1 << 20)->why.find("slow host"), std::string::npos);
  // The verdict is withdrawn (the leader clears the attribute): back to the static choice.
  view_.forgetRank(0);
  for (int i = 0; i < 4; ++i) tick(6, hosts);
  EXPECT_TRUE(sameChoices(current_, defaultTable(6, 3))) << current_.describe();
}

TEST_F(DoctorPolicy, AComputeStragglerVerdictRootsAllreduceTreesAtIt) {
  for (int r = 0; r < 6; ++r)
    view_.set("rank." + std::to_string(r) + ".wait_us", r == 4 ? 20000 : 50, attrs::Source::kProbe, r, now_);
  // Waits alone change nothing: this policy follows the doctor's verdict, not raw waits.
  tick(6);
  tick(6);
  EXPECT_TRUE(sameChoices(tick(6), defaultTable(6, 1))) << current_.describe();
  view_.set("doctor.compute_straggler.4", 20000, attrs::Source::kProbe, 0, now_);
  tick(6);
  const DecisionTable& t = tick(6);
  const Decision* d = t.lookup(Collective::kAllReduce, 1 << 20);
  EXPECT_EQ(d->schedule, "double_binary_tree") << t.describe();
  ASSERT_FALSE(d->params.order.empty());
  EXPECT_EQ(d->params.order[0], 4);
}

}  // namespace
}  // namespace theseus::policy
