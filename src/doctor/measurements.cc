#include "doctor/measurements.h"

#include <cstdlib>

namespace theseus::doctor {
namespace {

// "<digits>" -> value below n; false otherwise.
bool parseIndex(const std::string& s, size_t begin, size_t end, int n, int* out) {
  if (begin >= end || end - begin > 9) return false;
  int v = 0;
  for (size_t i = begin; i < end; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (s[i] - '0');
  }
  if (v >= n) return false;
  *out = v;
  return true;
}

}  // namespace

Measurements::Measurements(Placement p)
    : placement(std::move(p)),
      links(static_cast<size_t>(placement.nranks) * placement.nranks),
      ranks(placement.nranks) {}

bool parseLinkName(const std::string& name, int n, int* a, int* b, std::string* what) {
  if (name.compare(0, 5, "link.") != 0) return false;
  const size_t d1 = name.find('.', 5);
  if (d1 == std::string::npos) return false;
  const size_t d2 = name.find('.', d1 + 1);
  if (d2 == std::string::npos) return false;
  if (!parseIndex(name, 5, d1, n, a) || !parseIndex(name, d1 + 1, d2, n, b) || *a == *b) return false;
  *what = name.substr(d2 + 1);
  return true;
}

bool parseRankName(const std::string& name, int n, int* r, std::string* what) {
  if (name.compare(0, 5, "rank.") != 0) return false;
  const size_t d1 = name.find('.', 5);
  if (d1 == std::string::npos || !parseIndex(name, 5, d1, n, r)) return false;
  *what = name.substr(d1 + 1);
  return true;
}

Measurements fromView(const attrs::ClusterView& view, Placement placement, uint64_t nowNs, uint64_t maxAgeNs) {
  Measurements m(std::move(placement));
  const int n = m.nranks();
  static const attrs::Pattern kLinks = attrs::Pattern::compile("link.*.*.*").take();
  static const attrs::Pattern kRanks = attrs::Pattern::compile("rank.*.*").take();
  view.forEach(kLinks, nowNs, maxAgeNs, [&](const std::string& name, const attrs::ViewEntry& e) {
    int a, b;
    std::string what;
    if (!parseLinkName(name, n, &a, &b, &what)) return;
    LinkMeasure& l = m.link(a, b);
    if (what == "gbps") l.gbps = e.value;
    else if (what == "path_gbps") l.pathGbps = e.value;
    else if (what == "bottleneck") l.bottleneck = e.value;
    else if (what == "probe_gbps") l.probeGbps = e.value;
  });
  view.forEach(kRanks, nowNs, maxAgeNs, [&](const std::string& name, const attrs::ViewEntry& e) {
    int r;
    std::string what;
    if (!parseRankName(name, n, &r, &what)) return;
    RankMeasure& x = m.ranks[r];
    if (what == "wait_us") x.waitUs = e.value;
    else if (what == "coll_us") x.collUs = e.value;
    else if (what == "idle_us") x.idleUs = e.value;
  });
  return m;
}

}  // namespace theseus::doctor
