// Adaptation end to end, with real rank processes: four ranks run allreduces
// while THESEUS_EMULATE throttles link 0->1 to 10% for a window of
// collectives. With a slow-link policy (the rule of policies/adaptive.json,
// with shorter ages and dwell so the test stays short) the leader must
//  * swap, within a bounded number of collectives, to a ring that does not
//    use 0->1 — the same table on every rank, at the same collective;
//  * make the throttled allreduces at least 2x faster than before the swap;
//  * return to the ring it started with after the link heals.
// A straggler emulation must also be seen by the policy (rank.<r>.wait_us).
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "adaptive_common.h"
#include "mp_test.h"

using theseus::test::runRanks;
using theseus::test::SpawnOptions;

namespace {

constexpr size_t kBytes = 4 << 20;
constexpr int kThrottleFrom = 10, kThrottleTo = 70;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// args: the number of collectives after the link heals to wait for the recovery.
THESEUS_RANK_FN(adapt_body) {
  const int healedSteps = std::stoi(ctx.args.at(0));
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  const size_t count = kBytes / sizeof(float);
  std::vector<float> buf(count);
  std::vector<double> ms;
  // After the link heals, run until the original ring is in effect again (at
  // most healedSteps more). Every rank stops at the same collective: the table
  // in effect at collective i is the same on all ranks (that is the protocol),
  // and a rank knows it once it has run i. Counting collectives alone would
  // tie the test to their speed, while the policy's ages are in milliseconds.
  const int total = kThrottleTo + healedSteps;
  for (int i = 0; i < total; ++i) {
    std::fill(buf.begin(), buf.end(), 1.0f);
    auto t0 = std::chrono::steady_clock::now();
    RANK_NCCL(ncclAllReduce(buf.data(), buf.data(), count, ncclFloat32, ncclSum, comm, nullptr));
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    RANK_CHECK(buf[count - 1] == static_cast<float>(ctx.nranks));
    if (i >= kThrottleTo + 10 && i % 10 == 0) {
      auto now = theseus::test::allreduceTables(theseus::test::decisionLogOf(comm), kBytes);
      const auto* t = theseus::test::tableAt(now, static_cast<uint64_t>(i));
      if (t != nullptr && t->schedule == now.front().schedule && t->order == now.front().order) break;
    }
  }
  std::string log = theseus::test::decisionLogOf(comm);
  RANK_NCCL(ncclCommDestroy(comm));
  if (ctx.rank != 0) return 0;

  auto tables = theseus::test::allreduceTables(log, kBytes);
  // 1. A swap to a ring around 0->1 while the link is throttled.
  const theseus::test::LoggedTable* avoid = nullptr;
  for (const auto& t : tables)
    if (t.seq > kThrottleFrom && t.seq < kThrottleTo && t.schedule == "ring" &&
        !theseus::test::ringUses(t.order, ctx.nranks, 0, 1)) {
      avoid = &t;
      break;
    }
  if (avoid == nullptr) {
    fprintf(stderr, "[rank 0] no swap to a ring around link 0->1 during the throttle; decision log:\n%s",
            log.c_str());
    return 1;
  }
  const int swapAt = static_cast<int>(avoid->seq);
  printf("[rank 0] throttled from collective %d; swap to %s(order=...) at collective %d (%d collectives later)\n",
         kThrottleFrom, avoid->schedule.c_str(), swapAt, swapAt - kThrottleFrom);
  printf("[rank 0]   why: %s\n", avoid->reason.c_str());
  // A swap takes effect at the horizon the leader froze when it decided, and the lease then
  // out was granted at the healthy rate: up to 1.5 x THESEUS_EPOCH_LEASE_MS (50 ms) worth of
  // healthy collectives (docs/epochs.md, "Bound on the delay"); detection adds a few throttled
  // ones (the moving averages, hold 2 at 50 ms intervals).
  const double healthyMs = median(std::vector<double>(ms.begin() + 2, ms.begin() + kThrottleFrom));
  const int leaseBound = static_cast<int>(1.5 * 50.0 / std::max(healthyMs, 0.1)) + 1;
  printf("[rank 0]   bound: %d collectives of lease at the healthy %.2f ms + 25 for detection\n", leaseBound,
         healthyMs);
  RANK_CHECK(swapAt - kThrottleFrom <= leaseBound + 25);
  // 2. At least 2x faster than the throttled ring, measured in this run.
  // The throttled collectives before the swap (the first one may still be learning the link's
  // usual speed; under sanitizers the swap can come right after it).
  std::vector<double> slow(ms.begin() + std::min(kThrottleFrom + 2, swapAt - 1), ms.begin() + swapAt);
  std::vector<double> fast;
  for (int i = swapAt + 1; i < kThrottleTo; ++i) {
    const auto* t = theseus::test::tableAt(tables, static_cast<uint64_t>(i));
    if (t->schedule == "ring" && !theseus::test::ringUses(t->order, ctx.nranks, 0, 1)) fast.push_back(ms[i]);
  }
  double slowMs = median(slow), fastMs = median(fast);
  printf("[rank 0] healthy %.1f ms, throttled ring %.1f ms (%zu), ring around it %.1f ms (%zu): %.1fx\n",
         median(std::vector<double>(ms.begin() + 2, ms.begin() + kThrottleFrom)), slowMs, slow.size(), fastMs,
         fast.size(), fastMs > 0 ? slowMs / fastMs : 0);
  RANK_CHECK(!slow.empty() && !fast.empty());
  RANK_CHECK(slowMs >= 2 * fastMs);
  // 3. Back to the original ring after the link healed (the policy may still reorder
  //    later on measurement noise; that is the policy's hysteresis, not the protocol's).
  const theseus::test::LoggedTable* back = nullptr;
  for (const auto& t : tables)
    if (t.seq >= static_cast<uint64_t>(kThrottleTo) && t.schedule == tables.front().schedule &&
        t.order == tables.front().order) {
      back = &t;
      break;
    }
  if (back == nullptr) {
    fprintf(stderr, "[rank 0] the original ring never came back after the link healed; decision log:\n%s",
            log.c_str());
    return 1;
  }
  printf("[rank 0] healed at collective %d; original ring back at collective %llu (v%llu); %zu tables in all\n",
         kThrottleTo, static_cast<unsigned long long>(back->seq), static_cast<unsigned long long>(back->version),
         tables.size());
  return 0;
}

std::string writePolicy() {
  std::string path = "/tmp/theseus-adapt-policy-" + std::to_string(getpid()) + ".json";
  std::ofstream f(path);
  f << R"json({
  "version": 1,
  "name": "adapt-test",
  "description": "policies/adaptive.json's slow-link rule with short ages, so the test stays short",
  "settings": {"min_dwell_ms": 300, "hold": 2, "margin": 0.2, "max_age_ms": 1500, "slow_link_ratio": 0.5},
  "rules": [
    {"name": "small messages: static choice", "max_bytes": "$small_msg_bytes", "use": "default"},
    {"name": "slow link: ring around it",
     "collectives": ["allreduce", "allgather", "reducescatter", "broadcast", "reduce"], "ranks": {"min": 3},
     "when": "min(link.*.*.gbps) < 0.5 * median(link.*.*.gbps)",
     "use": {"schedule": "ring", "order": "avoid_slow_links"}}
  ]
})json";
  return path;
}

TEST(EpochAdapt, SwapsAroundAThrottledLinkAndBackWhenItHeals) {
  SpawnOptions o;
  o.timeoutSec = 240;
  std::string policy = writePolicy();
  o.env["THESEUS_POLICY"] = policy;
  o.env["THESEUS_EMULATE"] =
      "throttle:0->1:10%@seq=" + std::to_string(kThrottleFrom) + "-" + std::to_string(kThrottleTo);
  o.env["THESEUS_ATTRS_INTERVAL_MS"] = "50";
  o.env["THESEUS_POLICY_INTERVAL_MS"] = "50";
  o.args = {"3000"};
  EXPECT_RANKS_OK(runRanks("adapt_body", 4, o));
  unlink(policy.c_str());
}

}  // namespace
