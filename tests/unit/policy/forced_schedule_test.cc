// THESEUS_SCHEDULE and NCCL_ALGO under policies. Its own binary: both are read
// once per process, so they are set before anything reads them.
#include <gtest/gtest.h>
#include <stdlib.h>

#include "policy/default_selector.h"
#include "policy_test_util.h"

namespace theseus::policy {
namespace {

using namespace testing;
using schedule::Collective;

TEST(ForcedSchedule, OverridesEveryPolicyWhereItServes) {
  setenv("THESEUS_SCHEDULE", "allgather:direct;tree", 1);
  setenv("NCCL_ALGO", "ring", 1);
  auto p = parsePolicy(R"json({"version":1,"rules":[
    {"name":"rings","use":{"schedule":"ring","channels":2}}]})json");
  attrs::ClusterView v;
  auto t = evaluate(*p, input(v, 4, kSec));
  ASSERT_TRUE(t.isOk()) << t.status().message();
  // allgather: forced to direct (even though NCCL_ALGO says ring).
  ASSERT_EQ(t.value().ranges(Collective::kAllGather).size(), 1u);
  EXPECT_EQ(t.value().lookup(Collective::kAllGather, 1)->schedule, "direct");
  EXPECT_EQ(t.value().lookup(Collective::kAllGather, 1)->why, "THESEUS_SCHEDULE");
  // tree is forced for the collectives it serves...
  for (Collective c : {Collective::kAllReduce, Collective::kBroadcast, Collective::kReduce})
    EXPECT_EQ(t.value().lookup(c, 1 << 20)->schedule, "tree") << schedule::collectiveName(c);
  // ...and the policy decides the others (ring, which NCCL_ALGO allows).
  EXPECT_EQ(t.value().lookup(Collective::kReduceScatter, 1 << 20)->schedule, "ring");
  EXPECT_EQ(t.value().lookup(Collective::kReduceScatter, 1 << 20)->params.channels, 2);
}

TEST(ForcedSchedule, NcclAlgoFiltersPreferenceLists) {
  // NCCL_ALGO=ring (set above): the static policy picks what default_selector picks.
  auto p = load("static");
  ASSERT_TRUE(p.isOk());
  attrs::ClusterView v;
  auto t = evaluate(*p.value(), input(v, 5, kSec));
  ASSERT_TRUE(t.isOk());
  for (Collective c : {Collective::kReduceScatter, Collective::kAlltoAll, Collective::kGather})
    for (uint64_t bytes : {uint64_t(16), uint64_t(1) << 24}) {
      Choice want = defaultChoice({c, sizeClass(bytes), 5, 1}, AlgoFilter::fromEnv());
      EXPECT_EQ(t.value().lookup(c, bytes)->schedule, want.schedule) << schedule::collectiveName(c) << " " << bytes;
    }
  EXPECT_EQ(t.value().lookup(Collective::kReduceScatter, 16)->schedule, "ring");  // halving_doubling filtered out
}

}  // namespace
}  // namespace theseus::policy
