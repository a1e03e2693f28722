// Rank orders computed from attributes: rings around slow links, trees rooted
// at stragglers, host-grouped orders.
//
// Link slowness. For every directed pair (a, b) the slowness s(a, b) says how
// much slower than usual the link is (1 = typical), from the link's own
// fresh attributes (docs/attributes.md):
//   * link.a.b.bottleneck f above 0.5: f over the median of all bottleneck
//     fractions (a link that holds both its ends back much more than the
//     others do; in a ring every link moves data at the slowest one's pace,
//     so only this signal points at the slow link);
//   * link.a.b.gbps: the median of all link.*.*.gbps over the link's own
//     (a quarter of the usual throughput -> 4), unless the link's bottleneck
//     fraction is at most the median (its sender only looked slow because its
//     receiver was held up downstream);
//   * times link.a.b.penalty when an operator set one.
// Host health applies to links between hosts: at least 2 / slowRatio when
// either host has an unhealthy NIC (node.<host>.nic.*.healthy == 0), and
// unusable when either host is unhealthy (node.<host>.healthy == 0). Links
// without any information have s = 1.
//
// A link is *slow* when s > 1 / slowRatio (slowRatio 0.5: below half the
// median). Slowness below that threshold is treated as 1, so measurement
// noise never reorders a ring.
//
// Verdicts. A ring that avoids a slow link stops measuring it, and the links
// it uses instead change the medians; judged afresh each time, the old link
// would soon look fine and the ring would flap back. LinkVerdicts keeps each
// link's verdict until that link is measured again (a newer timestamp of one
// of its own attributes), or until its last measurement is older than the
// policy's max_age_ms - then the link gets a fresh chance (and is re-tested
// by the schedule that uses it).
//
// avoid_slow_links. A ring of n ranks uses n directed links (both directions
// of each when bidirectional). The order minimises the sum over its links of
// w(s) = 1 for a link that is not slow, s^4 for a slow one (so one link at a
// quarter of the speed outweighs dozens of good links), plus 0.01 per link
// between hosts, so that among equally good rings the one crossing hosts least
// wins. Up to kExactRanks ranks the optimum is found exactly (Held-Karp
// dynamic programming over subsets, O(n^2 2^n)); above, a local search swaps
// ranks at the ends of slow links while that lowers the sum (O(n) per slow
// link per pass). Either way the result is the host-grouped order when that
// one has no slow link, so a healthy cluster keeps its usual ring.
#pragma once

#include <cstdint>
#include <vector>

#include "policy/policy.h"

namespace theseus::policy {

struct LinkCosts {
  static constexpr double kUnusable = 1000.0;
  int nranks = 0;
  std::vector<double> slowness;      // nranks * nranks, [a * nranks + b]; diagonal 1
  std::vector<uint64_t> measuredNs;  // newest timestamp of the link's own attributes; 0: none
  std::vector<int> hostOf;           // size nranks
  double at(int a, int b) const { return slowness[static_cast<size_t>(a) * nranks + b]; }
};

struct OrderOptions {
  double slowRatio = 0.5;  // slower than this fraction of the median throughput = slow
  uint64_t maxAgeNs = 0;   // ignore attributes older than this (0: any age)
};

constexpr int kExactRanks = 12;

// The links' own slowness (throughput, bottleneck, penalty), without host health.
LinkCosts measureLinks(const PolicyInput& in, const OrderOptions& options);
// Raises links between hosts for unhealthy NICs and hosts.
void applyHostHealth(LinkCosts* costs, const PolicyInput& in, const OrderOptions& options);
// Both: what the links look like right now.
LinkCosts linkCosts(const PolicyInput& in, const OrderOptions& options);

// Per-link verdicts that change only when the link is measured again (above).
class LinkVerdicts {
 public:
  void update(const LinkCosts& measured, uint64_t nowNs, uint64_t maxAgeNs);
  const LinkCosts& current() const { return verdicts_; }
  // Links whose verdict is slow (s > 1 / slowRatio).
  int slowLinks(double slowRatio) const;

 private:
  LinkCosts verdicts_;
};

// Ranks grouped by host (host index order, ranks ascending inside a host).
std::vector<int> byHostOrder(int nranks, const std::vector<int>& hostOf);

// The ring order described above; `bidirectional` scores both directions of
// every ring link.
std::vector<int> avoidSlowLinksOrder(const LinkCosts& costs, bool bidirectional, double slowRatio);

// Sum of w(s) over the ring's links (the quantity avoidSlowLinksOrder minimises).
double ringCost(const LinkCosts& costs, const std::vector<int>& order, bool bidirectional, double slowRatio);

// The rank others waited for longest (largest fresh rank.<r>.wait_us), or -1.
int slowestRank(const PolicyInput& in, uint64_t maxAgeNs);

// `order` rotated so that `root` comes first (the root of trees and chains).
std::vector<int> rootedOrder(const std::vector<int>& order, int root);

}  // namespace theseus::policy
