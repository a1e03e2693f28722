// What the doctor's performance analysis (doctor/performance.h) reads: per
// directed link and per rank, the measurements of docs/attributes.md as one
// table. The leader fills it from its cluster view (live verdicts); theseus-
// doctor from the ranks' dumps, which carry each rank's attributes (merged the
// way the leader merges them) and its transport counters since the
// connections opened (the "window" columns: a link that was slow for a while
// and is not any more, or that flaps, is slow over the window).
// A negative value means "not measured".
#pragma once

#include <cstdint>
#include <vector>

#include "attrs/cluster_view.h"
#include "doctor/verdict.h"

namespace theseus::doctor {

struct LinkMeasure {
  double gbps = -1;              // link.a.b.gbps: data-path throughput now (moving average), GB/s
  double pathGbps = -1;          // link.a.b.path_gbps: the same as the kernel sees the path (TCP links)
  double bottleneck = -1;        // link.a.b.bottleneck: how much it held back both ends now, 0..1
  double probeGbps = -1;         // link.a.b.probe_gbps: the latest active probe (links between hosts)
  double windowGbps = -1;        // bytes sent over busy time since the connection opened
  double windowBottleneck = -1;  // min(sender busy, receiver waiting) over the elapsed time, since then
  bool measured() const { return gbps >= 0 || probeGbps >= 0 || windowGbps >= 0; }
};

struct RankMeasure {
  double waitUs = -1;  // rank.r.wait_us: the longest any rank waited for r's data per collective
  double collUs = -1;  // rank.r.coll_us: r's time per collective
  double idleUs = -1;  // rank.r.idle_us: r's time between collectives (outside the library)
};

struct Measurements {
  Placement placement;
  std::vector<LinkMeasure> links;  // nranks * nranks, [a * nranks + b]
  std::vector<RankMeasure> ranks;

  explicit Measurements(Placement p);
  int nranks() const { return placement.nranks; }
  LinkMeasure& link(int a, int b) { return links[static_cast<size_t>(a) * placement.nranks + b]; }
  const LinkMeasure& link(int a, int b) const { return links[static_cast<size_t>(a) * placement.nranks + b]; }
};

// The view's link.*.*.{gbps,bottleneck,probe_gbps} and rank.*.{wait_us,coll_us,idle_us}
// (values older than maxAgeNs are left out; 0: any age). Names of ranks outside the
// placement are ignored.
Measurements fromView(const attrs::ClusterView& view, Placement placement, uint64_t nowNs, uint64_t maxAgeNs);

// "link.<a>.<b>.<what>" -> a, b, what (ranks below n, a != b); false for other names.
bool parseLinkName(const std::string& name, int n, int* a, int* b, std::string* what);
// "rank.<r>.<what>" -> r, what (r below n); false for other names.
bool parseRankName(const std::string& name, int n, int* r, std::string* what);

}  // namespace theseus::doctor
