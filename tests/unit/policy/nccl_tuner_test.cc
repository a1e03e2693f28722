// NCCL tuner plugins: loading by NCCL's rules and every version, the cost table
// Theseus offers and how the plugin's answer becomes a decision, the table it
// produces, the static policy replaced and a JSON policy completed, and the
// tuners that cannot be used.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "policy/algo_filter.h"
#include "policy/nccl_tuner.h"
#include "policy/tuned_policy.h"
#include "policy_test_util.h"

namespace theseus::policy {
namespace {

using schedule::Collective;
using namespace testing;

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

// Writes the test tuner's rules and points TEST_TUNER_CONFIG at them for the scope.
class TunerRules {
 public:
  explicit TunerRules(const std::string& rules) {
    path_ = "/tmp/theseus-tuner-rules-" + std::to_string(getpid()) + ".csv";
    std::ofstream(path_) << rules;
    setenv("TEST_TUNER_CONFIG", path_.c_str(), 1);
  }
  ~TunerRules() {
    unsetenv("TEST_TUNER_CONFIG");
    unlink(path_.c_str());
  }

 private:
  std::string path_;
};

TunerContext context(int nranks, std::vector<int> hostOf = {}) { return TunerContext{0x1234, nranks, std::move(hostOf)}; }

AlgoFilter none() { return AlgoFilter(); }

std::unique_ptr<NcclTuner> loadOk(const char* path, const TunerContext& ctx) {
  auto t = NcclTuner::load(path, ctx);
  EXPECT_TRUE(t.isOk()) << t.status().message();
  return t.isOk() ? t.take() : nullptr;
}

TEST(NcclTuner, VersionSixRulesBecomeDecisions) {
  TunerRules rules(
      "allreduce,0,65535,tree,simple,2\n"
      "allreduce,65536,-1,ring,ll128,4,1048576\n"
      "allgather,0,-1,pat,ll,-1\n"
      "broadcast,0,-1,nvls,simple,-1\n");
  auto t = loadOk(TEST_TUNER_GOOD, context(8));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->name(), "test_tuner");
  EXPECT_EQ(t->version(), 6);
  EXPECT_HAS(t->describe(), "NCCL tuner plugin 'test_tuner' v6 (");

  auto small = t->choose(Collective::kAllReduce, 4096, none(), none());
  ASSERT_TRUE(small.isOk()) << small.status().message();
  EXPECT_EQ(small.value().algorithm, NCCL_ALGO_TREE);
  EXPECT_EQ(small.value().protocol, NCCL_PROTO_SIMPLE);
  EXPECT_EQ(small.value().schedule, "double_binary_tree");
  EXPECT_EQ(small.value().channels, 2);
  EXPECT_EQ(small.value().cost, 0.0f);
  EXPECT_EQ(small.value().chunkBytes, 0u);

  auto large = t->choose(Collective::kAllReduce, 64 << 20, none(), none());
  ASSERT_TRUE(large.isOk());
  EXPECT_EQ(large.value().schedule, "ring");
  EXPECT_EQ(large.value().protocol, NCCL_PROTO_LL128);
  EXPECT_EQ(large.value().channels, 4);
  EXPECT_EQ(large.value().chunkBytes, 1u << 20);  // getChunkSize() answered for the chosen cell

  auto ag = t->choose(Collective::kAllGather, 1 << 20, none(), none());
  ASSERT_TRUE(ag.isOk());
  EXPECT_EQ(ag.value().algorithm, NCCL_ALGO_PAT);
  EXPECT_EQ(ag.value().schedule, "recursive_doubling");

  // NVLS is not offered (cost -1), so the plugin's rule does not apply; Theseus' estimates decide.
  auto bc = t->choose(Collective::kBroadcast, 1 << 20, none(), none());
  ASSERT_TRUE(bc.isOk());
  EXPECT_TRUE(bc.value().schedule == "ring" || bc.value().schedule == "double_binary_tree") << bc.value().schedule;
  EXPECT_GT(bc.value().cost, 0.0f);

  // Collectives NCCL does not tune are refused.
  EXPECT_FALSE(t->choose(Collective::kAlltoAll, 1024, none(), none()).isOk());

  auto table = t->table(none(), none());
  ASSERT_TRUE(table.isOk()) << table.status().message();
  const Decision* d = table.value().lookup(Collective::kAllReduce, 1000);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->schedule, "double_binary_tree");
  EXPECT_EQ(d->params.channels, 2);
  EXPECT_HAS(d->why, "NCCL tuner 'test_tuner': Tree/Simple, 2 channels");
  d = table.value().lookup(Collective::kAllReduce, 65535);
  EXPECT_EQ(d->schedule, "double_binary_tree");
  d = table.value().lookup(Collective::kAllReduce, 65536);
  EXPECT_EQ(d->schedule, "ring");
  EXPECT_EQ(d->sliceBytes, 1u << 20);
  d = table.value().lookup(Collective::kAllReduce, uint64_t(1) << 40);
  EXPECT_EQ(d->schedule, "ring");
  EXPECT_TRUE(table.value().ranges(Collective::kAlltoAll).empty());
  ASSERT_FALSE(table.value().ranges(Collective::kReduceScatter).empty());
}

TEST(NcclTuner, NcclAlgoAndProtoLimitTheCellsOffered) {
  TunerRules rules("allreduce,0,-1,ring,ll,-1\n");
  auto t = loadOk(TEST_TUNER_GOOD, context(4));
  ASSERT_NE(t, nullptr);
  auto algos = AlgoFilter::parse("tree");
  auto protos = AlgoFilter::parseProtocols("Simple");
  ASSERT_TRUE(algos.isOk() && protos.isOk());
  // Ring/LL is excluded by both filters: the plugin's preference cannot apply.
  auto c = t->choose(Collective::kAllReduce, 1 << 20, algos.value(), protos.value());
  ASSERT_TRUE(c.isOk());
  EXPECT_EQ(c.value().algorithm, NCCL_ALGO_TREE);
  EXPECT_EQ(c.value().protocol, NCCL_PROTO_SIMPLE);
  EXPECT_EQ(c.value().schedule, "double_binary_tree");
  // Only the protocol filter: Ring offered, but only with Simple.
  auto c2 = t->choose(Collective::kAllReduce, 1 << 20, none(), protos.value());
  ASSERT_TRUE(c2.isOk());
  EXPECT_EQ(c2.value().protocol, NCCL_PROTO_SIMPLE);
  auto bad = AlgoFilter::parseProtocols("allreduce:Simple;Simple");
  EXPECT_FALSE(bad.isOk());
}

TEST(NcclTuner, OlderVersionsAreAdapted) {
  TunerRules rules("allreduce,0,-1,ring,simple,3\nreducescatter,0,-1,pat,simple,-1\n");
  auto v4 = loadOk(TEST_TUNER_V4, context(4));
  ASSERT_NE(v4, nullptr);
  EXPECT_EQ(v4->version(), 4);
  auto c = v4->choose(Collective::kAllReduce, 256, none(), none());
  ASSERT_TRUE(c.isOk());
  EXPECT_EQ(c.value().schedule, "ring");
  EXPECT_EQ(c.value().channels, 3);

  auto v2 = loadOk(TEST_TUNER_V2, context(4));
  ASSERT_NE(v2, nullptr);
  EXPECT_EQ(v2->version(), 2);
  auto rs = v2->choose(Collective::kReduceScatter, 1 << 16, none(), none());
  ASSERT_TRUE(rs.isOk());
  EXPECT_EQ(rs.value().schedule, "halving_doubling");
  // No rule for allgather: v2 leaves the pick undefined and Theseus' cheapest estimate wins.
  auto ag = v2->choose(Collective::kAllGather, 1 << 16, none(), none());
  ASSERT_TRUE(ag.isOk());
  EXPECT_FALSE(ag.value().schedule.empty());
  EXPECT_GT(ag.value().cost, 0.0f);
}

TEST(NcclTuner, UnusableTunersAreRefusedByName) {
  auto newer = NcclTuner::load(TEST_TUNER_NEWER_ONLY, context(2));
  ASSERT_FALSE(newer.isOk());
  EXPECT_HAS(newer.status().message(), "exports ncclTunerPlugin_v9, a newer tuner plugin ABI than this Theseus reads");
  auto none = NcclTuner::load(TEST_TUNER_NO_SYMBOL, context(2));
  ASSERT_FALSE(none.isOk());
  EXPECT_HAS(none.status().message(), "not a tuner plugin: symbol ncclTunerPlugin_v6 not found");
  auto init = NcclTuner::load(TEST_TUNER_INIT_FAILS, context(2));
  ASSERT_FALSE(init.isOk());
  EXPECT_HAS(init.status().message(), "init() failed with 3 (ncclInternalError)");
  auto missing = NcclTuner::load("no-such-tuner", context(2));
  ASSERT_FALSE(missing.isOk());
  EXPECT_HAS(missing.status().message(), "NCCL_TUNER_PLUGIN=no-such-tuner: no tuner plugin could be loaded");
  EXPECT_HAS(missing.status().message(), "libnccl-tuner-no-such-tuner.so");
  auto off = NcclTuner::load("none", context(2));
  ASSERT_TRUE(off.isOk());
  EXPECT_EQ(off.value(), nullptr);

  auto failing = loadOk(TEST_TUNER_GETCOLLINFO_FAILS, context(2));
  ASSERT_NE(failing, nullptr);
  auto c = failing->choose(Collective::kAllReduce, 1024, AlgoFilter(), AlgoFilter());
  ASSERT_FALSE(c.isOk());
  EXPECT_HAS(c.status().message(), "getCollInfo(allreduce, 1024 bytes) failed with 5 (ncclInvalidUsage)");
}

TEST(NcclTuner, ReplacesTheStaticPolicyAndCompletesOthers) {
  TunerRules rules("allreduce,0,-1,ring,simple,-1\nallgather,0,-1,ring,simple,-1\n");
  attrs::ClusterView v;
  PolicyInput in = input(v, 4, kSec);

  auto stat = load("static");
  ASSERT_TRUE(stat.isOk());
  auto tuned = withNcclTuner(stat.take(), true, loadOk(TEST_TUNER_GOOD, context(4)));
  EXPECT_EQ(tuned->name(), "static+tuner:test_tuner");
  auto t = evaluate(*tuned, in);
  ASSERT_TRUE(t.isOk()) << t.status().message();
  EXPECT_EQ(t.value().lookup(Collective::kAllReduce, 8)->schedule, "ring");  // the static policy says otherwise here
  EXPECT_EQ(t.value().lookup(Collective::kAllGather, 8)->schedule, "ring");
  EXPECT_FALSE(t.value().ranges(Collective::kAlltoAll).empty());  // untuned: the static choice

  // A JSON policy that decides allreduce keeps it; the tuner fills allgather.
  auto json = parsePolicy(R"json({"version":1,"name":"mine","rules":[{"name":"ar","collectives":["allreduce"],"use":"direct"}]})json");
  ASSERT_NE(json, nullptr);
  auto completed = withNcclTuner(std::move(json), false, loadOk(TEST_TUNER_GOOD, context(4)));
  auto t2 = evaluate(*completed, in);
  ASSERT_TRUE(t2.isOk()) << t2.status().message();
  EXPECT_EQ(t2.value().lookup(Collective::kAllReduce, 8)->schedule, "direct");
  EXPECT_EQ(t2.value().lookup(Collective::kAllGather, 8)->schedule, "ring");
  EXPECT_HAS(t2.value().lookup(Collective::kAllGather, 8)->why, "NCCL tuner 'test_tuner'");
}

TEST(NcclTuner, TwoHostsAreTwoNvlDomains) {
  // The v6 test tuner's init fails unless nNvlDomains equals nNodes.
  auto t = loadOk(TEST_TUNER_GOOD, context(4, {0, 0, 1, 1}));
  ASSERT_NE(t, nullptr);
  auto c = t->choose(Collective::kAllReduce, 1 << 24, AlgoFilter(), AlgoFilter());
  ASSERT_TRUE(c.isOk());
  EXPECT_FALSE(c.value().schedule.empty());
}

}  // namespace
}  // namespace theseus::policy
