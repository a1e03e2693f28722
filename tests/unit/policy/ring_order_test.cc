// Orders from attributes: rings that avoid slow links (exact up to 12 ranks,
// local search above), host grouping, straggler roots, link slowness.
#include <gtest/gtest.h>

#include "policy/ring_order.h"
#include "policy_test_util.h"

namespace theseus::policy {
namespace {

using namespace testing;

std::vector<int> avoid(const PolicyInput& in, bool bidir = false) {
  return avoidSlowLinksOrder(linkCosts(in, OrderOptions()), bidir, 0.5);
}

TEST(LinkCosts, SlownessFromThroughputPenaltyAndHealth) {
  attrs::ClusterView v;
  setRingLinks(v, 4, 10, 10 * kSec);
  setLink(v, 1, 2, "gbps", 2, 10 * kSec);
  setLink(v, 3, 0, "penalty", 3, 10 * kSec);
  v.set("node.h1.nic.mlx5_0.healthy", 0, attrs::Source::kFile, 0, 10 * kSec);
  PolicyInput in = input(v, 4, 10 * kSec, {0, 0, 1, 1});
  LinkCosts c = linkCosts(in, OrderOptions());
  EXPECT_DOUBLE_EQ(c.at(0, 1), 1.0);
  EXPECT_DOUBLE_EQ(c.at(1, 0), 1.0);
  EXPECT_GE(c.at(1, 2), 5.0);   // a fifth of the median, and between hosts with a bad NIC
  EXPECT_DOUBLE_EQ(c.at(3, 0), 4.0);  // penalty 3, but host 1's NIC is down: at least 2 / 0.5
  EXPECT_DOUBLE_EQ(c.at(2, 3), 1.0);  // inside host 1
  EXPECT_DOUBLE_EQ(c.at(0, 2), 4.0);  // unmeasured, but to the host with the bad NIC
  v.set("node.h1.healthy", 0, attrs::Source::kFile, 0, 10 * kSec);
  EXPECT_DOUBLE_EQ(linkCosts(in, OrderOptions()).at(0, 3), LinkCosts::kUnusable);
  // Stale measurements are ignored when a maximum age is set.
  OrderOptions fresh;
  fresh.maxAgeNs = kSec;
  PolicyInput later = input(v, 4, 20 * kSec, {0, 0, 1, 1});
  EXPECT_DOUBLE_EQ(linkCosts(later, fresh).at(1, 2), 1.0);
}

// In a ring every link moves data at the slowest link's pace, so throughputs look
// alike; the bottleneck fraction still points at the slow link.
TEST(AvoidSlowLinks, BottleneckFractionsFindTheSlowLinkInAPipeline) {
  attrs::ClusterView v;
  setRingLinks(v, 4, 0.04, kSec);  // all equally slow, as measured in a throttled ring
  for (int r = 0; r < 4; ++r) {
    int next = (r + 1) % 4;
    double queued = r == 1 || r == 0 ? 0.95 : 0.05, waited = r == 1 || r == 2 || r == 3 ? 0.9 : 0.05;
    v.set("link." + std::to_string(r) + "." + std::to_string(next) + ".bottleneck", queued, attrs::Source::kProbe, r,
          kSec);
    v.set("link." + std::to_string(r) + "." + std::to_string(next) + ".bottleneck", waited, attrs::Source::kProbe, next,
          kSec);
  }
  PolicyInput in = input(v, 4, kSec);
  LinkCosts c = linkCosts(in, OrderOptions());
  EXPECT_DOUBLE_EQ(c.at(1, 2), 0.9 / 0.05);  // over the median fraction
  EXPECT_DOUBLE_EQ(c.at(0, 1), 1.0);  // queued because 1 was held up, but 1 did not wait
  EXPECT_DOUBLE_EQ(c.at(2, 3), 1.0);  // 3 waited because 2 was starved, but 2 had nothing queued
  std::vector<int> order = avoid(in);
  EXPECT_FALSE(ringUses(order, 4, 1, 2)) << order[0] << order[1] << order[2] << order[3];
}

// Under CPU overload every link holds its ends back now and then: high
// fractions everywhere single out no link.
TEST(AvoidSlowLinks, UniformBottlenecksAreNoise) {
  attrs::ClusterView v;
  setRingLinks(v, 4, 0.2, kSec);
  const double f[] = {0.6, 0.8, 0.7, 0.9};
  for (int r = 0; r < 4; ++r)
    v.set("link." + std::to_string(r) + "." + std::to_string((r + 1) % 4) + ".bottleneck", f[r],
          attrs::Source::kProbe, r, kSec);
  LinkCosts c = linkCosts(input(v, 4, kSec), OrderOptions());
  for (int r = 0; r < 4; ++r) EXPECT_LT(c.at(r, (r + 1) % 4), 2.0) << r;
}

// A verdict changes only when its link is measured again, or expires.
TEST(LinkVerdicts, KeepEachLinksVerdictUntilItIsMeasuredAgain) {
  attrs::ClusterView v;
  setRingLinks(v, 4, 10, 1 * kSec);
  setLink(v, 1, 2, "gbps", 1, 1 * kSec);
  OrderOptions o;
  o.maxAgeNs = 5 * kSec;
  LinkVerdicts verdicts;
  verdicts.update(measureLinks(input(v, 4, 1 * kSec), o), 1 * kSec, o.maxAgeNs);
  EXPECT_EQ(verdicts.slowLinks(0.5), 1);
  // A ring around 1 -> 2 no longer measures it, and its other links slow down
  // a bit: judged afresh 1 -> 2 would look fine, the verdict stays.
  setRingLinks(v, 4, 1.5, 3 * kSec);
  setLink(v, 1, 2, "gbps", 1, 1 * kSec);
  EXPECT_LT(measureLinks(input(v, 4, 3 * kSec), o).at(1, 2), 2.0);
  verdicts.update(measureLinks(input(v, 4, 3 * kSec), o), 3 * kSec, o.maxAgeNs);
  EXPECT_EQ(verdicts.slowLinks(0.5), 1);
  EXPECT_DOUBLE_EQ(verdicts.current().at(1, 2), 10.0);
  // Its last measurement expires: a fresh chance.
  verdicts.update(measureLinks(input(v, 4, 7 * kSec), o), 7 * kSec, o.maxAgeNs);
  EXPECT_EQ(verdicts.slowLinks(0.5), 0);
  // Measured again, and fine.
  setRingLinks(v, 4, 10, 8 * kSec);
  verdicts.update(measureLinks(input(v, 4, 8 * kSec), o), 8 * kSec, o.maxAgeNs);
  EXPECT_EQ(verdicts.slowLinks(0.5), 0);
  // Measured again, and slow again.
  setLink(v, 1, 2, "gbps", 2, 9 * kSec);
  verdicts.update(measureLinks(input(v, 4, 9 * kSec), o), 9 * kSec, o.maxAgeNs);
  EXPECT_EQ(verdicts.slowLinks(0.5), 1);
  // Another communicator shape starts over.
  verdicts.update(measureLinks(input(v, 3, 9 * kSec), o), 9 * kSec, o.maxAgeNs);
  EXPECT_EQ(verdicts.current().nranks, 3);
}

// Probes of every link (link.a.b.probe_gbps), each a new sample at time t.
void probeAll(attrs::ClusterView& v, int n, uint64_t t, int slowFrom = -1, int slowTo = -1, double slowGbps = 0.05) {
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b)
      if (a != b) setLink(v, a, b, "probe_gbps", a == slowFrom && b == slowTo ? slowGbps : 2.0, t);
}

// With probes, a ring around a slow link keeps it slow as long as the probes see it
// slow, however long that is (no expiry, no return to re-test it), and clears it after
// kConfirm clean probes in a row.
TEST(LinkVerdicts, ProbesKeepASlowVerdictAndClearItOnceTheLinkIsFast) {
  attrs::ClusterView v;
  OrderOptions o;
  o.maxAgeNs = 5 * kSec;
  LinkVerdicts verdicts;
  probeAll(v, 4, 1 * kSec, 1, 2);
  for (uint64_t t : {kSec / 2, kSec}) {  // two data-path samples in a row agree with the probe
    setRingLinks(v, 4, 10, t);
    setLink(v, 1, 2, "gbps", 1, t);
    verdicts.update(measureLinks(input(v, 4, t), o), t, o.maxAgeNs);
    EXPECT_EQ(verdicts.slowLinks(0.5), t == kSec ? 1 : 0);
  }
  ASSERT_EQ(verdicts.slowLinks(0.5), 1);
  // Avoided for 20 s: no data-path measurement of 1 -> 2 any more, probes every second.
  for (uint64_t t = 2; t <= 20; ++t) {
    probeAll(v, 4, t * kSec, 1, 2);
    verdicts.update(measureLinks(input(v, 4, t * kSec), o), t * kSec, o.maxAgeNs);
    EXPECT_EQ(verdicts.slowLinks(0.5), 1) << "at " << t << " s";
  }
  // Healed: one clean probe is not enough, the second clears it.
  probeAll(v, 4, 21 * kSec);
  verdicts.update(measureLinks(input(v, 4, 21 * kSec), o), 21 * kSec, o.maxAgeNs);
  EXPECT_EQ(verdicts.slowLinks(0.5), 1);
  // The same probe seen again does not count twice.
  verdicts.update(measureLinks(input(v, 4, 21 * kSec + 1), o), 21 * kSec + 1, o.maxAgeNs);
  EXPECT_EQ(verdicts.slowLinks(0.5), 1);
  probeAll(v, 4, 22 * kSec);
  verdicts.update(measureLinks(input(v, 4, 22 * kSec), o), 22 * kSec, o.maxAgeNs);
  EXPECT_EQ(verdicts.slowLinks(0.5), 0);
}

// A link that is found slow again soon after its verdict cleared needs twice as many clean
// probes the next time (and so on): a flapping link cannot make the schedule flap with it.
TEST(LinkVerdicts, RelapsesDoubleTheCleanProbesNeeded) {
  attrs::ClusterView v;
  OrderOptions o;
  o.maxAgeNs = 5 * kSec;
  LinkVerdicts verdicts;
  uint64_t t = kSec;
  auto step = [&](bool slowNow, bool dataPath) {
    t += kSec / 2;
    probeAll(v, 4, t, slowNow ? 1 : -1, 2);
    if (dataPath) {  // the ring uses 1 -> 2 again and measures it (a first sample, then the step's)
      setRingLinks(v, 4, 10, t - 1);
      setLink(v, 1, 2, "gbps", slowNow ? 1 : 10, t - 1);
      verdicts.update(measureLinks(input(v, 4, t - 1), o), t - 1, o.maxAgeNs);
      setRingLinks(v, 4, 10, t);
      setLink(v, 1, 2, "gbps", slowNow ? 1 : 10, t);
    }
    verdicts.update(measureLinks(input(v, 4, t), o), t, o.maxAgeNs);
    return verdicts.slowLinks(0.5);
  };
  ASSERT_EQ(step(true, true), 1);
  EXPECT_EQ(verdicts.probesToClear(1, 2), LinkVerdicts::kConfirm);
  for (int relapse = 0; relapse < 3; ++relapse) {
    const int needed = LinkVerdicts::kConfirm << relapse;
    EXPECT_EQ(verdicts.probesToClear(1, 2), needed);
    for (int i = 1; i < needed; ++i) EXPECT_EQ(step(false, false), 1) << "relapse " << relapse << " probe " << i;
    EXPECT_EQ(step(false, false), 0) << "relapse " << relapse;
    EXPECT_EQ(step(true, true), 1);  // back on the link, slow again: a relapse
  }
  EXPECT_EQ(verdicts.probesToClear(1, 2), LinkVerdicts::kConfirm << 3);
  // A slow probe in between starts the count again.
  for (int i = 0; i < 5; ++i) step(false, false);
  EXPECT_EQ(step(true, false), 1);
  for (int i = 1; i < (LinkVerdicts::kConfirm << 3); ++i) EXPECT_EQ(step(false, false), 1) << i;
  EXPECT_EQ(step(false, false), 0);
  // Quiet for long enough: back to kConfirm.
  t += LinkVerdicts::kQuietNs + kSec;
  step(false, false);
  EXPECT_EQ(verdicts.probesToClear(1, 2), LinkVerdicts::kConfirm);
}

// The data path alone makes a probed link slow only when the link's latest probe agrees,
// probes alone never do, and on a probed link only probes clear a slow verdict.
TEST(LinkVerdicts, DataPathAndProbesCheckEachOther) {
  attrs::ClusterView v;
  OrderOptions o;
  o.maxAgeNs = 5 * kSec;
  LinkVerdicts verdicts;
  // 2 -> 3 measures 2.5x slow on the data path (a pipeline artefact), its probe is fine.
  probeAll(v, 4, 1 * kSec);
  setRingLinks(v, 4, 10, 1 * kSec);
  setLink(v, 2, 3, "gbps", 4, 1 * kSec);
  verdicts.update(measureLinks(input(v, 4, 1 * kSec), o), 1 * kSec, o.maxAgeNs);
  EXPECT_EQ(verdicts.slowLinks(0.5), 0);
  // Probes alone: 3 -> 0 probed 40x slow twice, its data path fine: not slow.
  for (uint64_t t = 2; t <= 3; ++t) {
    probeAll(v, 4, t * kSec, 3, 0);
    verdicts.update(measureLinks(input(v, 4, t * kSec), o), t * kSec, o.maxAgeNs);
  }
  EXPECT_EQ(verdicts.slowLinks(0.5), 0);
  // Both agree on 3 -> 0, one data-path sample: not yet; the second: slow. Then a tail sample
  // of the data path says fine: still slow.
  setLink(v, 3, 0, "gbps", 1, 3 * kSec + 1);
  verdicts.update(measureLinks(input(v, 4, 3 * kSec + 2), o), 3 * kSec + 2, o.maxAgeNs);
  EXPECT_EQ(verdicts.slowLinks(0.5), 0);
  setLink(v, 3, 0, "gbps", 1, 3 * kSec + 3);
  verdicts.update(measureLinks(input(v, 4, 3 * kSec + 4), o), 3 * kSec + 4, o.maxAgeNs);
  EXPECT_EQ(verdicts.slowLinks(0.5), 1);
  setLink(v, 3, 0, "gbps", 10, 4 * kSec);
  verdicts.update(measureLinks(input(v, 4, 4 * kSec), o), 4 * kSec, o.maxAgeNs);
  EXPECT_EQ(verdicts.slowLinks(0.5), 1);
}

// A slow host (every link into and out of host 2 slow), one rank per host. Its probes are
// judged against the links that touch neither end's host: against the median of all links
// (half of them host 2's) they would look barely slow. Once the data path confirmed one of
// its links, its other links follow, and all of them clear together; in the slow-link case
// (only 0 -> 1) nothing spreads, nor to links the data path finds busy at the usual pace.
TEST(LinkVerdicts, ASlowHostsLinksFollowTheOneTheDataPathFound) {
  const std::vector<int> hosts = {0, 1, 2, 3};
  auto probeHost = [](attrs::ClusterView& v, uint64_t t, int slowHost, int slowFrom, int slowTo) {
    for (int a = 0; a < 4; ++a)
      for (int b = 0; b < 4; ++b)
        if (a != b)
          setLink(v, a, b, "probe_gbps", a == slowHost || b == slowHost || (a == slowFrom && b == slowTo) ? 0.05 : 1.0, t);
  };
  OrderOptions o;
  o.maxAgeNs = 5 * kSec;
  {
    attrs::ClusterView v;
    probeHost(v, 1 * kSec, 2, -1, -1);
    LinkCosts m = measureLinks(input(v, 4, 1 * kSec, hosts), o);
    EXPECT_DOUBLE_EQ(m.probeSlowness[2 * 4 + 3], 20.0);  // against 0 <-> 1, not the median of all
    EXPECT_DOUBLE_EQ(m.probeSlowness[0 * 4 + 1], 1.0);
    LinkVerdicts verdicts;
    verdicts.update(m, 1 * kSec, o.maxAgeNs);
    EXPECT_EQ(verdicts.slowLinks(0.5), 0);  // probes alone: nothing
    // The ring 0 1 2 3 measures 2 -> 3 and 1 -> 2 slow, twice (with a probe after each): the
    // data path and probes agree on those two; the other four links of host 2 follow once
    // their second slow probe in a row came in.
    for (uint64_t t : {2 * kSec, 3 * kSec}) {
      setRingForward(v, 4, 1, t);  // a ring measures the links it sends over
      setLink(v, 2, 3, "gbps", 0.05, t);
      setLink(v, 1, 2, "gbps", 0.05, t);
      verdicts.update(measureLinks(input(v, 4, t, hosts), o), t, o.maxAgeNs);
      probeHost(v, t + 1, 2, -1, -1);
      verdicts.update(measureLinks(input(v, 4, t + 1, hosts), o), t + 1, o.maxAgeNs);
    }
    // All six links of host 2 are slow now, the others are not.
    for (int a = 0; a < 4; ++a)
      for (int b = 0; b < 4; ++b)
        if (a != b) {
          EXPECT_EQ(verdicts.current().at(a, b) > 2, a == 2 || b == 2) << a << "->" << b;
        }
    // Healed: one clean probe each clears nothing; a second one on every link but 1 -> 2
    // still clears nothing (the host's links clear together, so the policy returns in one
    // swap); once 1 -> 2 has its second, all six clear at one evaluation.
    probeHost(v, 4 * kSec, -1, -1, -1);
    verdicts.update(measureLinks(input(v, 4, 4 * kSec, hosts), o), 4 * kSec, o.maxAgeNs);
    EXPECT_EQ(verdicts.slowLinks(0.5), 6);
    for (int a = 0; a < 4; ++a)
      for (int b = 0; b < 4; ++b)
        if (a != b && !(a == 1 && b == 2)) setLink(v, a, b, "probe_gbps", 1.0, 5 * kSec);
    verdicts.update(measureLinks(input(v, 4, 5 * kSec, hosts), o), 5 * kSec, o.maxAgeNs);
    EXPECT_EQ(verdicts.slowLinks(0.5), 6);
    setLink(v, 1, 2, "probe_gbps", 1.0, 5 * kSec + 1);
    verdicts.update(measureLinks(input(v, 4, 5 * kSec + 2, hosts), o), 5 * kSec + 2, o.maxAgeNs);
    EXPECT_EQ(verdicts.slowLinks(0.5), 0);
  }
  {
    // One slow link 0 -> 1: nothing spreads.
    attrs::ClusterView v;
    probeHost(v, 1 * kSec, -1, 0, 1);
    LinkVerdicts verdicts;
    for (uint64_t t : {2 * kSec, 3 * kSec}) {
      setRingLinks(v, 4, 1, t);
      setLink(v, 0, 1, "gbps", 0.05, t);
      verdicts.update(measureLinks(input(v, 4, t, hosts), o), t, o.maxAgeNs);
    }
    EXPECT_EQ(verdicts.slowLinks(0.5), 1);
    EXPECT_GT(verdicts.current().at(0, 1), 2);
    // Avoided by the ring 0 3 2 1, whose links out of host 0 (0 -> 3) and into host 1 (2 -> 1)
    // carry its data at the usual pace. Their probes compete with that data and look slow, as
    // do those of 0 -> 2 and 3 -> 1: the busy links do not follow 0 -> 1 (the data path
    // measures them), the idle ones may.
    const uint64_t t = 4 * kSec;
    for (int a = 0; a < 4; ++a)
      for (int b = 0; b < 4; ++b)
        if (a != b) setLink(v, a, b, "probe_gbps", a == 0 || b == 1 ? 0.1 : 1.0, t);
    for (auto [a, b] : {std::pair{0, 3}, {3, 2}, {2, 1}, {1, 0}}) setLink(v, a, b, "gbps", 1, t);
    verdicts.update(measureLinks(input(v, 4, t, hosts), o), t, o.maxAgeNs);
    EXPECT_LT(verdicts.current().at(0, 3), 2) << "a busy link of the ring in use followed 0 -> 1";
    EXPECT_LT(verdicts.current().at(2, 1), 2) << "a busy link of the ring in use followed 0 -> 1";
    EXPECT_GT(verdicts.current().at(0, 1), 2);
  }
}

// While a link stays slow, the ring in use stays when it is as good as the best one.
TEST(AvoidSlowLinks, TheRingInUseStaysWhileItIsAsGood) {
  attrs::ClusterView v;
  setRingLinks(v, 4, 10, kSec);
  setLink(v, 0, 1, "gbps", 1, kSec);
  LinkCosts c = linkCosts(input(v, 4, kSec), OrderOptions());
  std::vector<int> best = avoidSlowLinksOrder(c, false, 0.5);
  EXPECT_GT(ringCost(c, {0, 1, 2, 3}, false, 0.5), 10.0);
  std::vector<int> other = best == std::vector<int>{0, 3, 2, 1} ? std::vector<int>{0, 3, 1, 2}
                                                                  : std::vector<int>{0, 3, 2, 1};
  ASSERT_LT(ringCost(c, other, false, 0.5), 5.0);  // also avoids 0 -> 1
  EXPECT_EQ(avoidSlowLinksOrder(c, false, 0.5, &other), other);
  // The slow ring in use does not stay.
  std::vector<int> usual = {0, 1, 2, 3};
  EXPECT_EQ(avoidSlowLinksOrder(c, false, 0.5, &usual), best);
  // Nonsense is ignored.
  std::vector<int> bad = {0, 0, 1, 2};
  EXPECT_EQ(avoidSlowLinksOrder(c, false, 0.5, &bad), best);
  // A slow host: every ring uses one link out of rank 2 and one into it, their verdicts far
  // apart (8x and 64x); the ring in use stays even though another one costs far less.
  LinkCosts host = c;
  std::fill(host.slowness.begin(), host.slowness.end(), 1.0);
  for (int x = 0; x < 4; ++x) {
    if (x == 2) continue;
    host.slowness[2 * 4 + x] = x == 3 ? 64 : 8;
    host.slowness[x * 4 + 2] = x == 1 ? 64 : 8;
  }
  std::vector<int> inUse = {0, 1, 2, 3};  // 1 -> 2 and 2 -> 3, both 64x
  std::vector<int> cheapest = avoidSlowLinksOrder(host, false, 0.5);
  ASSERT_LT(ringCost(host, cheapest, false, 0.5), ringCost(host, inUse, false, 0.5) / 2);
  EXPECT_EQ(avoidSlowLinksOrder(host, false, 0.5, &inUse), inUse);
}

TEST(AvoidSlowLinks, HealthyClusterKeepsTheUsualRing) {
  attrs::ClusterView v;
  setRingLinks(v, 6, 10, kSec);
  setLink(v, 2, 3, "gbps", 8, kSec);  // noise, not slow
  PolicyInput in = input(v, 6, kSec);
  EXPECT_EQ(avoid(in), (std::vector<int>{0, 1, 2, 3, 4, 5}));
  // Ranks grouped by host, hosts in index order.
  PolicyInput hosts = input(v, 6, kSec, {0, 1, 0, 1, 0, 1});
  EXPECT_EQ(avoid(hosts), (std::vector<int>{0, 2, 4, 1, 3, 5}));
}

TEST(AvoidSlowLinks, ExactSearchAvoidsEverySlowLinkItCan) {
  for (int n = 3; n <= kExactRanks; ++n) {
    SCOPED_TRACE("n=" + std::to_string(n));
    attrs::ClusterView v;
    setRingLinks(v, n, 10, kSec);
    setLink(v, 1, 2, "gbps", 1, kSec);
    setLink(v, n - 1, 0, "gbps", 2, kSec);
    PolicyInput in = input(v, n, kSec);
    std::vector<int> order = avoid(in);
    ASSERT_TRUE(isPermutation(order, n));
    EXPECT_FALSE(ringUses(order, n, 1, 2));
    EXPECT_FALSE(ringUses(order, n, n - 1, 0));
  }
}

TEST(AvoidSlowLinks, BidirectionalRingsAvoidBothDirections) {
  const int n = 5;
  attrs::ClusterView v;
  setRingLinks(v, n, 10, kSec);
  setLink(v, 1, 2, "gbps", 1, kSec);
  PolicyInput in = input(v, n, kSec);
  std::vector<int> one = avoid(in, false), both = avoid(in, true);
  EXPECT_FALSE(ringUses(one, n, 1, 2));
  EXPECT_FALSE(ringUses(both, n, 1, 2));
  EXPECT_FALSE(ringUses(both, n, 2, 1));
}

TEST(AvoidSlowLinks, ThreeRanksReverseTheRing) {
  attrs::ClusterView v;
  setRingLinks(v, 3, 10, kSec);
  setLink(v, 0, 1, "gbps", 1, kSec);
  std::vector<int> order = avoid(input(v, 3, kSec));
  EXPECT_EQ(order, (std::vector<int>{0, 2, 1}));
  // Both directions slow: nothing avoids the pair, so the usual ring stays.
  setLink(v, 1, 0, "gbps", 1, kSec);
  EXPECT_EQ(avoid(input(v, 3, kSec), true), (std::vector<int>{0, 1, 2}));
}

TEST(AvoidSlowLinks, PrefersFewHostCrossings) {
  // Two hosts of three ranks; a slow link inside host 0 (0 -> 1).
  attrs::ClusterView v;
  setRingLinks(v, 6, 10, kSec);
  setLink(v, 0, 1, "gbps", 1, kSec);
  PolicyInput in = input(v, 6, kSec, {0, 0, 0, 1, 1, 1});
  std::vector<int> order = avoid(in);
  EXPECT_FALSE(ringUses(order, 6, 0, 1));
  int crossings = 0;
  for (int i = 0; i < 6; ++i) crossings += in.hostOf[order[i]] != in.hostOf[order[(i + 1) % 6]];
  EXPECT_EQ(crossings, 2);
}

TEST(AvoidSlowLinks, LocalSearchForLargeRings) {
  const int n = 40;
  attrs::ClusterView v;
  setRingLinks(v, n, 10, kSec);
  const int slow[][2] = {{3, 4}, {17, 18}, {39, 0}, {25, 26}};
  for (auto& s : slow) setLink(v, s[0], s[1], "gbps", 1, kSec);
  PolicyInput in = input(v, n, kSec);
  std::vector<int> order = avoid(in);
  ASSERT_TRUE(isPermutation(order, n));
  for (auto& s : slow) EXPECT_FALSE(ringUses(order, n, s[0], s[1])) << s[0] << "->" << s[1];
  LinkCosts c = linkCosts(in, OrderOptions());
  std::vector<int> identity(n);
  for (int i = 0; i < n; ++i) identity[i] = i;
  EXPECT_LT(ringCost(c, order, false, 0.5), ringCost(c, identity, false, 0.5));
}

TEST(Orders, StragglerAndRotation) {
  attrs::ClusterView v;
  v.set("rank.2.wait_us", 5000, attrs::Source::kProbe, 1, kSec);
  v.set("rank.0.wait_us", 100, attrs::Source::kProbe, 1, kSec);
  v.set("rank.9.wait_us", 90000, attrs::Source::kProbe, 1, kSec);  // not a rank of this communicator
  PolicyInput in = input(v, 4, kSec);
  EXPECT_EQ(slowestRank(in, 0), 2);
  EXPECT_EQ(slowestRank(input(v, 4, 10 * kSec), kSec), -1);  // all stale
  EXPECT_EQ(rootedOrder({0, 1, 2, 3}, 2), (std::vector<int>{2, 3, 0, 1}));
  EXPECT_EQ(rootedOrder({3, 1, 0, 2}, 0), (std::vector<int>{0, 2, 3, 1}));
  EXPECT_EQ(byHostOrder(5, {1, 0, 1, 0, 2}), (std::vector<int>{1, 3, 0, 2, 4}));
  EXPECT_EQ(byHostOrder(3, {}), (std::vector<int>{0, 1, 2}));
}

// by_rail: every crossing between hosts joins two ranks on the same rail.
TEST(RingOrders, ByRailCrossesHostsOnOneRail) {
  const std::vector<int> hostOf = {0, 0, 0, 0, 1, 1, 1, 1};
  const std::vector<int> rails = {2, 0, 3, 1, 1, 3, 0, 2};
  const std::vector<int> order = byRailOrder(8, hostOf, rails);
  EXPECT_EQ(order, (std::vector<int>{1, 3, 0, 2, 5, 7, 4, 6}));
  for (size_t i = 0; i < order.size(); ++i) {
    const int a = order[i], b = order[(i + 1) % order.size()];
    if (hostOf[a] != hostOf[b]) {
      EXPECT_EQ(rails[a], rails[b]) << a << " -> " << b;
    }
  }
  // Four hosts of two ranks, hosts numbered out of rank order: still one rail per crossing.
  const std::vector<int> h4 = {3, 1, 0, 2, 3, 1, 0, 2}, r4 = {1, 0, 0, 1, 0, 1, 1, 0};
  const std::vector<int> o4 = byRailOrder(8, h4, r4);
  EXPECT_EQ(o4, (std::vector<int>{2, 6, 5, 1, 7, 3, 0, 4}));
  for (size_t i = 0; i < o4.size(); ++i) {
    const int a = o4[i], b = o4[(i + 1) % o4.size()];
    EXPECT_TRUE(h4[a] == h4[b] || r4[a] == r4[b]) << a << " -> " << b;
  }
  // Without rails: a snake by rank; one host: ascending rails; unknown rails last.
  EXPECT_EQ(byRailOrder(4, {0, 0, 1, 1}, {}), (std::vector<int>{0, 1, 3, 2}));
  EXPECT_EQ(byRailOrder(3, {}, {1, -1, 0}), (std::vector<int>{2, 0, 1}));
}

TEST(RingOrders, APolicyOrdersARingByRailFromTheRankAttributes) {
  auto p = parsePolicy(R"json({"version":1,"rules":[
    {"name":"rails","collectives":["allreduce"],"min_bytes":"1M","use":{"schedule":"ring","order":"by_rail"}}]})json");
  ASSERT_TRUE(p);
  attrs::ClusterView v;
  const int rails[] = {1, 0, 0, 1};
  for (int r = 0; r < 4; ++r) v.set("rank." + std::to_string(r) + ".rail", rails[r], attrs::Source::kProbe, r, kSec);
  auto t = evaluate(*p, input(v, 4, kSec, {0, 0, 1, 1}));
  ASSERT_TRUE(t.isOk()) << t.status().message();
  const Decision* d = t.value().lookup(schedule::Collective::kAllReduce, 4 << 20);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->params.order, (std::vector<int>{1, 0, 3, 2}));  // 0 -> 3 on rail 1, 2 -> 1 on rail 0
}

}  // namespace
}  // namespace theseus::policy
