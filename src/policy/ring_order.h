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
// link's verdict until that link is measured again by the data path (a newer
// timestamp of one of its own attributes). A slow verdict is also kept alive
// by the active probes (link.a.b.probe_gbps, epoch/link_prober.h): each new
// probe compares the link with a reference, the median probe of the links
// that touch neither of its two hosts (up to 8 hosts; with 4 hosts a slow
// host's links are half of all links and would drag a median of all of them
// down to their own level), else of all links; a clean probe
// (at most kProbeFineFactor past the threshold: probes of healthy links
// scatter that much on a busy host, probes of a slow link sit tens of times
// below) counts towards clearing the verdict, any other starts the count
// again. After kConfirm clean probes in a row the verdict clears and the
// policy may return to the link. Hysteresis with exponential backoff: when a
// cleared link is found slow again within kRelapseNs, the
// next clearing needs twice as many clean probes (up to 2^kMaxRelapses times),
// so a link that flaps does not make the schedule flap with it; after
// kQuietNs without a relapse the count is back to kConfirm. The two sources
// check each other: on a probed link the data path makes the link slow only
// when its latest probe agrees (is past the clean limit; a probe between the
// threshold and that limit neither clears nor confirms) - or when it leans slow (kLeaningFactor of the
// threshold) and the probe is kLeaningProbeFactor past it, for kAgreeSamples
// data-path samples in a row (one sample of a busy host is noise often enough);
// the verdict is then the
// worse of the two (in a pipeline every link carries data at the slow
// link's pace in short bursts, and TCP restarting slow after each idle gap can
// make a healthy link measure 2x slow); probes alone never make a link slow
// (a probe competing with a collective on a busy link, or on a CPU-starved
// host, can look ten times slow two probes in a row); and on a probed link
// only the probes clear a slow verdict (the data path's last samples of a link
// a swap just left are its tail, and measured it fine often enough to flap). Without probes of a link (probes off, links within
// a host) a verdict expires when its last measurement is older than the
// policy's max_age_ms - then the link gets a fresh chance (and is re-tested by
// the schedule that uses it).
//
// Slow hosts. A host (or its NIC) that is slow makes every link out of it (or
// into it) slow, but a schedule measures only the few it uses: found one by
// one, each would cost a swap to a schedule through the next. So when the data
// path and probes made one link out of (into) host h slow and the latest
// probes of all of h's other links out of (into) it are past the clean limit,
// those links are made slow too, with their probes' slowness - except links the
// data path measures at the usual pace right now (a schedule keeps them busy,
// and a probe competing with its data looks slow). Probes keep them and clear
// them like any other verdict. Verdicts clear by host: a probed slow link whose
// clean probes suffice waits while another probed slow link of one of its hosts
// does not yet, so a slow host's links (found and followed) clear at one
// evaluation and the policy returns in one swap; this also holds a followed
// verdict while the link it followed is slow (the probes compare a link with
// other links, and the links a schedule around the slow host keeps busy probe
// slow themselves, so the slow host's links can look as fast as those).
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
#include <string>
#include <vector>

#include "policy/policy.h"

namespace theseus::policy {

struct LinkCosts {
  static constexpr double kUnusable = 1000.0;
  int nranks = 0;
  std::vector<double> slowness;      // nranks * nranks, [a * nranks + b]; diagonal 1
  std::vector<uint64_t> measuredNs;  // newest timestamp of the link's own data-path attributes; 0: none
  std::vector<double> probeSlowness; // median probe throughput over the link's latest probe (1: typical)
  std::vector<uint64_t> probedNs;    // timestamp of the link's latest probe; 0: none
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
  static constexpr int kConfirm = 2;                       // clean probes that clear a verdict
  static constexpr int kMaxRelapses = 5;                   // backoff: at most 2^5 x kConfirm probes
  static constexpr uint64_t kRelapseNs = 30'000'000'000;   // slow again this soon after clearing: a relapse
  static constexpr uint64_t kQuietNs = 60'000'000'000;     // no relapse this long: the backoff resets
  static constexpr double kProbeFineFactor = 2;             // a probe up to this far past "slow" is clean
  static constexpr double kLeaningFactor = 0.75;            // data path this close to "slow" ...
  static constexpr double kLeaningProbeFactor = 8;          // ... and a probe this far past it
  static constexpr int kAgreeSamples = 2;                   // data-path samples in a row that agree
  static constexpr int kFollowProbes = 2;                   // slow probes in a row before a link follows its host

  void update(const LinkCosts& measured, uint64_t nowNs, uint64_t maxAgeNs, double slowRatio = 0.5);
  const LinkCosts& current() const { return verdicts_; }
  // Links whose verdict is slow (s > 1 / slowRatio).
  int slowLinks(double slowRatio) const;
  // Clean probes the link needs before its slow verdict clears (with backoff).
  int probesToClear(int a, int b) const;

 private:
  struct State {
    uint64_t aliveNs = 0;    // the verdict's latest confirmation (data path or probe); 0: none
    uint64_t probeNs = 0;    // the latest probe counted
    uint64_t clearedNs = 0;  // when probes last cleared the verdict; 0: not since the last relapse
    int clean = 0;           // clean probes in a row
    int relapses = 0;
    double probeSlowness = 1;  // the latest probe's
    int slowProbes = 0;        // probes in a row past the clean limit
    int agreeing = 0;          // data-path samples in a row that the probe agreed with
    int spreadFrom = -1;       // a slow host's: the host whose confirmed slow link it follows; -1: its own
  };
  void markSlow(size_t k, double slowness, uint64_t nowNs, const char* by);
  void spreadHostVerdicts(const LinkCosts& measured, uint64_t nowNs, double slowRatio);
  void clearReadyVerdicts(const LinkCosts& measured, uint64_t nowNs, double slowRatio);
  LinkCosts verdicts_;
  std::vector<State> state_;
};

// link.<a>.<b>.<what> -> (a, b) for ranks a != b below n; false for other names.
bool parseLinkName(const std::string& name, int n, int* a, int* b);

// Ranks grouped by host (host index order, ranks ascending inside a host).
std::vector<int> byHostOrder(int nranks, const std::vector<int>& hostOf);

// A ring that keeps its traffic between hosts on one rail: ranks grouped by host (as
// byHostOrder), inside a host sorted by rail (rails[r]: the index of the NIC rank r
// uses on its host, rank.<r>.rail; -1 unknown, sorted last; ties by rank), every other host in
// reverse. Host h then hands the ring to host h + 1 from its last rail to that host's same rail
// (hosts with equal rail sets): h even crosses on the highest rail, h odd on the lowest. With an
// odd number of hosts the crossing back to the first host cannot match; with no rails known it is
// the same snake by rank.
std::vector<int> byRailOrder(int nranks, const std::vector<int>& hostOf, const std::vector<int>& rails);

// The ring order described above; `bidirectional` scores both directions of
// every ring link. While some ring link is slow, `preferred` (the order in use)
// is kept unless the best ring costs less than half of it (and half a healthy
// link less) and uses fewer slow links: two measurements of the same slow
// links scatter that much, and with a slow host every ring uses as many of its
// slow links, of magnitudes that scatter far more.
std::vector<int> avoidSlowLinksOrder(const LinkCosts& costs, bool bidirectional, double slowRatio,
                                     const std::vector<int>* preferred = nullptr);

// Sum of w(s) over the ring's links (the quantity avoidSlowLinksOrder minimises).
double ringCost(const LinkCosts& costs, const std::vector<int>& order, bool bidirectional, double slowRatio);

// The rank others waited for longest (largest fresh rank.<r>.wait_us), or -1.
int slowestRank(const PolicyInput& in, uint64_t maxAgeNs);

// `order` rotated so that `root` comes first (the root of trees and chains).
std::vector<int> rootedOrder(const std::vector<int>& order, int root);

}  // namespace theseus::policy
