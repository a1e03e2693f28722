// Policy plugins: a good plugin (host services, C view, conversion, checks),
// every descriptor fault and every misbehaviour of decide(), and the shipped
// cost-model plugin choosing schedules around a slow link.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>

#include "policy/plugin_policy.h"
#include "policy_test_util.h"
#include "schedule/builtins.h"
#include "schedule/user/cost_model.h"

namespace theseus::policy {
namespace {

using namespace testing;
using schedule::Collective;

std::string loadError(const char* path) {
  auto p = load(path);
  EXPECT_FALSE(p.isOk()) << path << " loaded";
  return p.isOk() ? std::string() : p.status().message();
}

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

TEST(PolicyPluginLoader, RejectsBrokenDescriptors) {
  EXPECT_HAS(loadError(TEST_POLICY_ABI_VERSION), "has abi_version 2, expected 1");
  EXPECT_HAS(loadError(TEST_POLICY_STRUCT_SIZE), "built against a different policy_plugin.h?");
  EXPECT_HAS(loadError(TEST_POLICY_NO_SYMBOL), "not a policy plugin: symbol theseusPolicyPlugin_v1 not found");
  EXPECT_HAS(loadError(TEST_POLICY_FUTURE_SYMBOL), "exports theseusPolicyPlugin_v3, a newer policy plugin ABI");
  EXPECT_HAS(loadError(TEST_POLICY_NULL_DECIDE), "required function decide() is NULL");
  EXPECT_HAS(loadError(TEST_POLICY_BAD_NAME), "name must be 1..128 characters");
  EXPECT_HAS(loadError(TEST_POLICY_INIT_FAILS), "init() failed with 2");
  EXPECT_HAS(loadError(TEST_POLICY_INIT_FAILS), TEST_POLICY_INIT_FAILS);
}

TEST(PolicyPluginLoader, GoodPluginDecidesThroughTheHostServices) {
  auto loaded = load(TEST_POLICY_GOOD);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  Policy& p = *loaded.value();
  EXPECT_EQ(p.name(), "test_policy");
  EXPECT_HAS(p.describe(), "policy plugin 'test_policy' (" TEST_POLICY_GOOD "): a policy for the loader tests");
  attrs::ClusterView v;
  setRingLinks(v, 5, 10, kSec);
  setLink(v, 1, 2, "gbps", 1, kSec);
  PolicyInput in = input(v, 5, kSec);
  auto t = evaluate(p, in);
  ASSERT_TRUE(t.isOk()) << t.status().message();
  const Decision* ar = t.value().lookup(Collective::kAllReduce, 1 << 20);
  ASSERT_NE(ar, nullptr);
  EXPECT_EQ(ar->schedule, "ring");
  EXPECT_TRUE(isPermutation(ar->params.order, 5)) << ar->toString();
  EXPECT_FALSE(ringUses(ar->params.order, 5, 1, 2)) << ar->toString();
  EXPECT_HAS(ar->why, "test: ring ");
  EXPECT_HAS(ar->why, "; 10 attributes, 0 current");
  // The estimate it quoted is the cost model's for a 5-rank ring at 1 MiB.
  schedule::GenerateRequest req;
  req.collective = Collective::kAllReduce;
  req.nranks = 5;
  auto prog = schedule::generateBuiltin("ring", req);
  ASSERT_TRUE(prog.isOk());
  schedule::user::LinkParams lp;
  auto est = schedule::user::estimateCost(prog.value(), 1 << 20, lp);
  ASSERT_TRUE(est.isOk());
  char expected[64];
  snprintf(expected, sizeof(expected), "ring %.3f us", est.value().timeUs);
  EXPECT_HAS(ar->why, expected);
  EXPECT_EQ(t.value().lookup(Collective::kBroadcast, 100)->schedule, "tree");
  const Decision* bc = t.value().lookup(Collective::kBroadcast, 4096);
  EXPECT_EQ(bc->params.channels, 2);
  EXPECT_EQ(bc->sliceBytes, 65536u);
  // Collectives the plugin left out keep the static choice.
  EXPECT_EQ(t.value().lookup(Collective::kAlltoAll, 100)->why, "static choice");
  // The current table reaches the plugin.
  DecisionTable current = t.take();
  in.current = &current;
  in.currentAgeNs = 3 * kSec;
  auto again = evaluate(p, in);
  ASSERT_TRUE(again.isOk());
  EXPECT_EQ(again.value().lookup(Collective::kAllReduce, 1)->why.find(" 0 current"), std::string::npos)
      << again.value().lookup(Collective::kAllReduce, 1)->why;
  EXPECT_TRUE(again.value().sameDecisions(current));
}

TEST(PolicyPluginLoader, MisbehavingDecideIsReportedNotTrusted) {
  auto loaded = load(TEST_POLICY_GOOD);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  struct Case {
    int mode;
    const char* why;
  };
  const Case cases[] = {
      {1, "policy plugin 'test_policy': decision 0: 7 is not a collective"},
      {2, "policy plugin 'test_policy': decision 1: decision table: allreduce range [50, 200] overlaps [0, 100]"},
      {3, "decision 0: schedule, params and why must be NUL-terminated"},
      {4, "policy plugin 'test_policy': decide() failed (2): no idea what to do"},
      {5, "count 1025 exceeds the table's capacity 1024"},
      {6, "decision 0: schedule parameters 'speed=11': unknown parameter 'speed'"},
  };
  for (const Case& c : cases) {
    attrs::ClusterView v;
    v.set("test.mode", c.mode, attrs::Source::kApi, 0, kSec);
    auto t = evaluate(*loaded.value(), input(v, 4, kSec));
    ASSERT_FALSE(t.isOk()) << "mode " << c.mode;
    EXPECT_HAS(t.status().message(), c.why);
  }
}

TEST(PolicyPluginLoader, EstimateServiceChecksItsArguments) {
  auto loaded = PluginPolicy::load(TEST_POLICY_GOOD);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  PluginPolicy& p = *loaded.value();
  attrs::ClusterView v;
  PolicyInput in = input(v, 4, kSec);
  theseusPolicyLinkModel_v1_t model{};
  model.struct_size = sizeof(model);
  model.alpha_us = 5;
  model.beta_gbps = 10;
  double fast = 0, slow = 0;
  ASSERT_TRUE(p.estimate(in, "ring", "", THESEUS_POLICY_ALLREDUCE, 64 << 20, &model, &fast).isOk());
  // One slow link on the ring slows the whole ring down.
  std::vector<double> gbps(16, 0.0);
  gbps[1 * 4 + 2] = 1.0;
  model.link_gbps = gbps.data();
  ASSERT_TRUE(p.estimate(in, "ring", "", THESEUS_POLICY_ALLREDUCE, 64 << 20, &model, &slow).isOk());
  EXPECT_GT(slow, 5 * fast);
  // A ring that avoids it is as fast as the healthy one.
  double around = 0;
  ASSERT_TRUE(p.estimate(in, "ring", "order=0,2,1,3", THESEUS_POLICY_ALLREDUCE, 64 << 20, &model, &around).isOk());
  EXPECT_NEAR(around, fast, fast * 0.01);
  // Allgather sizes are the whole output: the estimate divides by the rank count.
  double ag = 0;
  model.link_gbps = nullptr;
  ASSERT_TRUE(p.estimate(in, "ring", "", THESEUS_POLICY_ALLGATHER, 4 << 20, &model, &ag).isOk());
  EXPECT_GT(ag, 0);
  EXPECT_HAS(p.estimate(in, "tree", "", THESEUS_POLICY_ALLGATHER, 1, &model, &ag).message(),
             "schedule 'tree' does not serve allgather with 4 ranks");
  EXPECT_HAS(p.estimate(in, "ring", "x=1", THESEUS_POLICY_ALLREDUCE, 1, &model, &ag).message(), "unknown parameter");
  EXPECT_HAS(p.estimate(in, "ring", "", 6, 1, &model, &ag).message(), "6 is not a collective");
  model.struct_size = 8;
  EXPECT_HAS(p.estimate(in, "ring", "", THESEUS_POLICY_ALLREDUCE, 1, &model, &ag).message(), "struct_size");
}

TEST(PolicyPluginLoader, FinalizeRunsOnUnload) {
  void* lib = dlopen(TEST_POLICY_GOOD, RTLD_NOW | RTLD_NOLOAD);
  int before = 0;
  {
    auto loaded = load(TEST_POLICY_GOOD);
    ASSERT_TRUE(loaded.isOk());
    if (lib == nullptr) lib = dlopen(TEST_POLICY_GOOD, RTLD_NOW);  // keep our own reference for the counters
    ASSERT_NE(lib, nullptr);
    auto finalized = reinterpret_cast<int (*)()>(dlsym(lib, "testPolicyFinalized"));
    ASSERT_NE(finalized, nullptr);
    before = finalized();
  }
  auto finalized = reinterpret_cast<int (*)()>(dlsym(lib, "testPolicyFinalized"));
  EXPECT_EQ(finalized(), before + 1);
  dlclose(lib);
}

// The shipped example: with a slow link, the schedules it picks for large
// allreduces never send over that link, and cost no more than the plain ring.
TEST(CostModelPlugin, ChoosesAroundASlowLink) {
  auto loaded = load(THESEUS_COST_MODEL_PLUGIN);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  EXPECT_EQ(loaded.value()->name(), "cost_model");
  const int n = 4;
  attrs::ClusterView v;
  setRingLinks(v, n, 10, kSec);
  setLink(v, 1, 2, "gbps", 0.5, kSec);
  PolicyInput in = input(v, n, kSec);
  in.sizes = {4096, 1 << 20, 64 << 20};
  auto t = evaluate(*loaded.value(), in);
  ASSERT_TRUE(t.isOk()) << t.status().message();
  auto plugin = PluginPolicy::load(THESEUS_COST_MODEL_PLUGIN);
  ASSERT_TRUE(plugin.isOk());
  schedule::user::LinkParams lp;
  lp.linkGBps.assign(n * n, 0.0);
  lp.linkGBps[1 * n + 2] = 0.5;
  for (uint64_t bytes : {uint64_t(1) << 20, uint64_t(64) << 20}) {
    const Decision* d = t.value().lookup(Collective::kAllReduce, bytes);
    ASSERT_NE(d, nullptr);
    SCOPED_TRACE(d->toString() + " at " + std::to_string(bytes) + ": " + d->why);
    EXPECT_HAS(d->why, "cost model: ");
    schedule::GenerateRequest req;
    req.collective = Collective::kAllReduce;
    req.nranks = n;
    req.params = d->params;
    auto prog = schedule::generateBuiltin(d->schedule, req);
    ASSERT_TRUE(prog.isOk()) << prog.status().message();
    auto chosen = schedule::user::estimateCost(prog.value(), bytes, lp);
    ASSERT_TRUE(chosen.isOk());
    for (const auto& l : chosen.value().links) EXPECT_FALSE(l.from == 1 && l.to == 2);
    req.params = {};
    auto ring = schedule::generateBuiltin("ring", req);
    auto ringCost = schedule::user::estimateCost(ring.value(), bytes, lp);
    EXPECT_LE(chosen.value().timeUs, ringCost.value().timeUs);
  }
  // Same view again: the same table (no flapping).
  DecisionTable first = t.take();
  in.current = &first;
  auto second = evaluate(*loaded.value(), in);
  ASSERT_TRUE(second.isOk());
  EXPECT_TRUE(second.value().sameDecisions(first)) << first.describe() << "\nvs\n" << second.value().describe();
  // Every range it returned passed evaluate()'s checks; alltoall is left to the static choice.
  EXPECT_EQ(first.lookup(Collective::kAlltoAll, 1)->why, "static choice");
}

}  // namespace
}  // namespace theseus::policy
