// A real degraded link: four "hosts" (network namespaces joined by veth pairs
// to a bridge in a switch namespace, one rank each, TCP between them), and the
// link 0->1 throttled with `tc` (an htb class with a token bucket, tbf, that a
// u32 filter on rank 1's address selects) on host 0's veth. With the slow-link policy the leader must swap to a ring around 0->1 —
// detected from the socket transport's own counters, no emulation — and the
// allreduce must get faster than the throttled ring. Needs root with `ip` and
// `tc`; skips with the reason otherwise.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "adaptive_common.h"
#include "mp_test.h"

using theseus::test::runRanks;
using theseus::test::SpawnOptions;

namespace {

int run(const std::string& cmd) { return system((cmd + " >/dev/null 2>&1").c_str()); }

constexpr size_t kBytes = 2 << 20;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

THESEUS_RANK_FN(tc_body) {
  const int steps = std::stoi(ctx.args.at(0));
  ncclUniqueId id;
  RANK_NCCL(ncclGetUniqueId(&id));  // from NCCL_COMM_ID
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, id, ctx.rank));
  std::vector<float> buf(kBytes / sizeof(float));
  std::vector<double> ms;
  for (int i = 0; i < steps; ++i) {
    std::fill(buf.begin(), buf.end(), 1.0f);
    auto t0 = std::chrono::steady_clock::now();
    RANK_NCCL(ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm, nullptr));
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    RANK_CHECK(buf[0] == static_cast<float>(ctx.nranks));
  }
  std::string log = theseus::test::decisionLogOf(comm);
  RANK_NCCL(ncclCommDestroy(comm));
  if (ctx.rank != 0) return 0;
  auto tables = theseus::test::allreduceTables(log, kBytes);
  const theseus::test::LoggedTable* around = nullptr;
  for (const auto& t : tables)
    if (t.schedule == "ring" && !theseus::test::ringUses(t.order, ctx.nranks, 0, 1)) {
      around = &t;
      break;
    }
  if (around == nullptr) {
    fprintf(stderr, "[rank 0] no swap to a ring around the tc-throttled link 0->1; decision log:\n%s", log.c_str());
    return 1;
  }
  std::vector<double> before(ms.begin() + 1, ms.begin() + static_cast<long>(around->seq));
  std::vector<double> after;
  for (size_t i = around->seq + 1; i < ms.size(); ++i) {
    const auto* t = theseus::test::tableAt(tables, i);
    if (t->schedule == "ring" && !theseus::test::ringUses(t->order, ctx.nranks, 0, 1)) after.push_back(ms[i]);
  }
  printf("[rank 0] tc-throttled link 0->1: swap to a ring around it at collective %llu; %.1f ms per allreduce "
         "before, %.1f ms after (%.1fx)\n  why: %s\n",
         static_cast<unsigned long long>(around->seq), median(before), median(after),
         median(after) > 0 ? median(before) / median(after) : 0, around->reason.c_str());
  RANK_CHECK(!before.empty() && !after.empty());
  RANK_CHECK(median(after) * 1.5 < median(before));
  return 0;
}

class TcThrottle : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!theseus::test::canUseNetns(&why)) GTEST_SKIP() << "network namespaces unavailable: " << why;
    if (run("tc -V") != 0) GTEST_SKIP() << "tc (iproute2) is not installed";
    tag_ = std::to_string(getpid() % 100000);
    sw_ = "thtsw" + tag_;
    ASSERT_EQ(run("ip netns add " + sw_), 0);
    ASSERT_EQ(run("ip netns exec " + sw_ + " ip link add br0 type bridge"), 0);
    ASSERT_EQ(run("ip netns exec " + sw_ + " ip link set br0 up"), 0);
    for (int i = 0; i < 4; ++i) {
      std::string ns = "thth" + tag_ + "-" + std::to_string(i);
      std::string a = "thtv" + tag_ + "a" + std::to_string(i), b = "thtv" + tag_ + "b" + std::to_string(i);
      ASSERT_EQ(run("ip netns add " + ns), 0);
      hosts_.push_back(ns);
      ASSERT_EQ(run("ip link add " + a + " type veth peer name " + b), 0);
      ASSERT_EQ(run("ip link set " + a + " netns " + ns), 0);
      ASSERT_EQ(run("ip link set " + b + " netns " + sw_), 0);
      ASSERT_EQ(run("ip netns exec " + sw_ + " ip link set " + b + " master br0"), 0);
      ASSERT_EQ(run("ip netns exec " + sw_ + " ip link set " + b + " up"), 0);
      ASSERT_EQ(run("ip netns exec " + ns + " ip addr add 10.98.0." + std::to_string(i + 1) + "/24 dev " + a), 0);
      ASSERT_EQ(run("ip netns exec " + ns + " ip link set " + a + " up"), 0);
      ASSERT_EQ(run("ip netns exec " + ns + " ip link set lo up"), 0);
      veth_.push_back(a);
    }
    // Host 0 -> host 1 through a token bucket (tbf under an htb class picked by a u32 filter on
    // rank 1's address); everything else goes through an unlimited class.
    const std::string tc = "ip netns exec " + hosts_[0] + " tc ";
    const std::string dev = " dev " + veth_[0] + " ";
    if (run(tc + "qdisc add" + dev + "root handle 1: htb default 10") != 0 ||
        run(tc + "class add" + dev + "parent 1: classid 1:10 htb rate 10gbit quantum 60000") != 0 ||
        run(tc + "class add" + dev + "parent 1: classid 1:20 htb rate 40mbit ceil 40mbit burst 32k") != 0 ||
        run(tc + "qdisc add" + dev + "parent 1:20 handle 20: tbf rate 40mbit burst 32kb latency 400ms") != 0 ||
        run(tc + "filter add" + dev + "parent 1: protocol ip prio 1 u32 match ip dst 10.98.0.2/32 flowid 1:20") != 0)
      GTEST_SKIP() << "tc cannot set up an htb/tbf/u32 throttle here (qdisc or filter kinds missing in this kernel)";
  }
  void TearDown() override {
    for (auto& ns : hosts_) run("ip netns del " + ns);
    if (!sw_.empty()) run("ip netns del " + sw_);
  }
  std::string tag_, sw_;
  std::vector<std::string> hosts_, veth_;
};

TEST_F(TcThrottle, SlowLinkIsDetectedFromSocketCountersAndAvoided) {
  std::string policy = "/tmp/theseus-tc-policy-" + tag_ + ".json";
  {
    std::ofstream f(policy);
    f << R"json({"version": 1, "name": "tc-test",
  "settings": {"min_dwell_ms": 300, "hold": 2, "margin": 0.2, "max_age_ms": 3000, "slow_link_ratio": 0.5},
  "rules": [
    {"name": "small", "max_bytes": "$small_msg_bytes", "use": "default"},
    {"name": "slow link: ring around it", "collectives": ["allreduce"], "ranks": {"min": 3},
     "when": "min(link.*.*.gbps) < 0.5 * median(link.*.*.gbps)",
     "use": {"schedule": "ring", "order": "avoid_slow_links"}}]})json";
  }
  SpawnOptions o;
  o.createUniqueId = false;
  o.env["NCCL_COMM_ID"] = "10.98.0.1:29517";
  o.env["THESEUS_BOOTSTRAP_TIMEOUT_MS"] = "30000";
  o.env["THESEUS_POLICY"] = policy;
  o.env["THESEUS_ATTRS_INTERVAL_MS"] = "50";
  o.env["THESEUS_POLICY_INTERVAL_MS"] = "50";
  o.args = {"60"};
  o.prefix = [this](int rank) { return std::vector<std::string>{"ip", "netns", "exec", hosts_[rank]}; };
  o.timeoutSec = 240;
  auto r = runRanks("tc_body", 4, o);
  EXPECT_TRUE(r.allOk()) << r.describe();
  unlink(policy.c_str());
}

}  // namespace
