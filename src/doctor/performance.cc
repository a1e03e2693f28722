#include "doctor/performance.h"

#include <algorithm>
#include <cstdint>
#include <set>

namespace theseus::doctor {
namespace {

enum Kind { kIntra = 0, kInter = 1 };
const char* const kKindText[] = {"within a host", "between hosts"};

// One measure of one link against the typical link of its kind.
struct Measure {
  double slowness = 0;     // typical / measured; 0: not measured
  double gbps = -1, typical = -1;
  double bottleneck = -1;  // its gate's value (-1: none)
  // Held back by another part (its bottleneck fraction below `min`): it cannot blame the link.
  bool gated(double min) const { return bottleneck >= 0 && bottleneck < min; }
};

enum MeasureKind { kNow = 0, kProbe = 1, kWindow = 2 };
const char* const kMeasureText[] = {"now", "by probe", "over the window"};

// One link's judgement.
struct Judged {
  Measure measures[3];
  int by = -1;           // the measure that made it slow (the slowest of those that did)
  bool slowNow = false;  // slow by a current measure (the data path now, or a probe)
  bool slow = false;
  double slowness = 0;   // that measure's
  double severity = 0;   // slowness over the threshold of its measure: comparable across measures
  const Measure& worst() const { return measures[by < 0 ? 0 : by]; }
};

struct LinkTable {
  const Measurements& m;
  const Thresholds& t;
  std::vector<Judged> judged;  // nranks * nranks
  std::vector<bool> late;      // per rank: a compute straggler, whose send side is not judged
  Judged& at(int a, int b) { return judged[static_cast<size_t>(a) * m.nranks() + b]; }
  const Judged& at(int a, int b) const { return judged[static_cast<size_t>(a) * m.nranks() + b]; }
  Kind kindOf(int a, int b) const {
    return m.placement.hostIndex(a) == m.placement.hostIndex(b) ? kIntra : kInter;
  }
};

// The typical value of each kind of link for one measure (75th percentile; -1: too few links).
template <typename Get>
void typicalByKind(const LinkTable& lt, Get get, double out[2]) {
  std::vector<double> values[2];
  const int n = lt.m.nranks();
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b)
      if (a != b && get(lt.m.link(a, b)) > 0) values[lt.kindOf(a, b)].push_back(get(lt.m.link(a, b)));
  for (int k = 0; k < 2; ++k)
    out[k] = values[k].size() >= static_cast<size_t>(Thresholds::kMinLinks) ? quantile(values[k], 0.75) : -1;
}

// Measures every link by one measure, against its kind's typical value (narrative in performance.h).
template <typename Get, typename Gate>
void measure(LinkTable& lt, MeasureKind kind, Get get, Gate gate) {
  double typical[2];
  typicalByKind(lt, get, typical);
  const int n = lt.m.nranks();
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) {
      if (a == b || (lt.late[a] && kind != kProbe)) continue;
      const LinkMeasure& l = lt.m.link(a, b);
      const double value = get(l), ref = typical[lt.kindOf(a, b)];
      if (value <= 0 || ref <= 0) continue;
      Measure& x = lt.at(a, b).measures[kind];
      x = Measure{ref / value, value, ref, gate(l)};
    }
}

// A link is slow now by the data path (confirmed by its window, when it has one: the data path's
// moving average of a TCP link scatters far more than the window's kernel view) or by a probe;
// over the window by the window (at windowSlowFactor between hosts, where it is the kernel's
// low-scatter view of the path; at slowFactor within a host, where it is the queue's view).
void decide(LinkTable& lt, int a, int b) {
  Judged& j = lt.at(a, b);
  const Measure& now = j.measures[kNow];
  const Measure& probe = j.measures[kProbe];
  const Measure& window = j.measures[kWindow];
  const bool inter = lt.kindOf(a, b) == kInter;
  const double windowFactor = inter ? lt.t.windowSlowFactor : lt.t.slowFactor;
  const double windowGate = inter ? lt.t.windowMinBottleneck : lt.t.minBottleneck;
  const bool confirmed = window.slowness == 0 || window.slowness >= lt.t.windowConfirm;
  const bool slow[3] = {!now.gated(lt.t.minBottleneck) && now.slowness >= lt.t.slowFactor && confirmed,
                        probe.slowness >= lt.t.slowFactor,
                        !window.gated(windowGate) && window.slowness >= windowFactor};
  const double threshold[3] = {lt.t.slowFactor, lt.t.slowFactor, windowFactor};
  for (int k = 0; k < 3; ++k)
    if (slow[k] && (j.by < 0 || j.measures[k].slowness / threshold[k] > j.severity)) {
      j.by = k;
      j.slowness = j.measures[k].slowness;
      j.severity = j.slowness / threshold[k];
    }
  j.slowNow = slow[kNow] || slow[kProbe];
  j.slow = j.by >= 0;
}

LinkTable judgeLinks(const Measurements& m, const Thresholds& t, const std::vector<int>& late) {
  LinkTable lt{m, t, std::vector<Judged>(static_cast<size_t>(m.nranks()) * m.nranks()),
               std::vector<bool>(m.nranks(), false)};
  for (int r : late)
    if (r >= 0 && r < m.nranks()) lt.late[r] = true;
  // Now: the kernel's view of the path where there is one (TCP): a queue in front of a healthy path
  // (a ring link streaming at a slow pipeline's pace) makes the data path's own view look slow.
  measure(lt, kNow, [](const LinkMeasure& l) { return l.pathGbps > 0 ? l.pathGbps : l.gbps; },
          [](const LinkMeasure& l) { return l.bottleneck; });
  // Probes only for links the data path does not measure now: a probe that competes with a
  // collective on a busy link, or on a CPU-starved host, can look ten times slow.
  measure(lt, kProbe, [](const LinkMeasure& l) { return l.gbps < 0 ? l.probeGbps : -1.0; },
          [](const LinkMeasure&) { return -1.0; });
  measure(lt, kWindow, [](const LinkMeasure& l) { return l.windowGbps; },
          [](const LinkMeasure& l) { return l.windowBottleneck; });
  for (int a = 0; a < m.nranks(); ++a)
    for (int b = 0; b < m.nranks(); ++b)
      if (a != b) decide(lt, a, b);
  return lt;
}

std::string describeLink(const LinkTable& lt, int a, int b) {
  const Judged& j = lt.at(a, b);
  const Measure& x = j.worst();
  const Placement& p = lt.m.placement;
  std::string s = format("link %d -> %d", a, b);
  if (lt.kindOf(a, b) == kInter) s += format(" (host %d -> host %d)", p.hostIndex(a), p.hostIndex(b));
  s += format(": %.3g GB/s %s, %.1fx below the typical link %s (%.3g GB/s)", x.gbps, kMeasureText[j.by < 0 ? 0 : j.by],
              x.slowness, kKindText[lt.kindOf(a, b)], x.typical);
  if (x.bottleneck >= 0) s += format("; it held back both its ends %.0f%% of the time", 100 * x.bottleneck);
  if (!j.slowNow) s += "; fine in the latest measurements (it recovered, or it flaps)";
  return s;
}

// Median slowness of a set of links, and their evidence lines.
double summarize(const LinkTable& lt, const std::vector<Link>& links, std::vector<std::string>* evidence) {
  std::vector<double> s;
  for (const Link& l : links) {
    s.push_back(lt.at(l.from, l.to).slowness);
    if (evidence->size() < 12) evidence->push_back(describeLink(lt, l.from, l.to));
  }
  if (links.size() > 12) evidence->push_back(format("... and %zu more slow links", links.size() - 12));
  return quantile(s, 0.5);
}

// Links of `from` ranks to ranks outside (out) or of ranks outside to them (in), measured and slow.
struct Side {
  std::vector<Link> measured, slow;
  std::set<int> slowRanks;  // ranks of the group with a slow link on this side
  std::set<int> measuredRanks;
  bool isSlow(const Thresholds& t) const {
    return slow.size() >= 2 && static_cast<double>(slow.size()) >= t.hostShare * static_cast<double>(measured.size());
  }
};

Side sideOf(LinkTable& lt, const std::vector<int>& group, bool out, bool crossHostOnly,
            const std::set<Link>& explained) {
  Side s;
  const int n = lt.m.nranks();
  std::set<int> in(group.begin(), group.end());
  for (int r : group)
    for (int q = 0; q < n; ++q) {
      if (in.count(q) != 0) continue;
      const Link l = out ? Link{r, q} : Link{q, r};
      if (crossHostOnly && lt.kindOf(l.from, l.to) != kInter) continue;
      if (!lt.m.link(l.from, l.to).measured() || explained.count(l) != 0) continue;
      s.measured.push_back(l);
      s.measuredRanks.insert(r);
      if (lt.at(l.from, l.to).slow) {
        s.slow.push_back(l);
        s.slowRanks.insert(r);
      }
    }
  return s;
}

// Links between hosts carry TCP, whose acknowledgements travel the other way: when the path from
// host A to host B is slow, so is every transfer from B to A, whose acknowledgements wait in A's
// slow queue. Those slow links are the slow path's, not culprits of their own.
void explainReverse(const LinkTable& lt, Finding* f, std::set<Link>* explained) {
  const Placement& p = lt.m.placement;
  std::set<std::pair<int, int>> paths;  // (from host, to host) of the finding's links between hosts
  for (const Link& l : f->links)
    if (lt.kindOf(l.from, l.to) == kInter) paths.insert({p.hostIndex(l.from), p.hostIndex(l.to)});
  std::vector<std::string> lines;
  for (const auto& [ha, hb] : paths)
    for (int c : p.ranksOn(hb))
      for (int d : p.ranksOn(ha)) {
        const Link back{c, d};
        if (!lt.at(c, d).slow || explained->count(back) != 0) continue;
        explained->insert(back);
        lines.push_back(format("link %d -> %d (%.1fx)", c, d, lt.at(c, d).slowness));
      }
  if (lines.empty()) return;
  std::string text = "slower too, as their TCP acknowledgements cross the slow direction:";
  for (const std::string& l : lines) text += " " + l;
  f->evidence.push_back(text);
}

void findSlowHosts(LinkTable& lt, std::set<Link>* explained, std::vector<Finding>* out) {
  const Placement& p = lt.m.placement;
  if (p.nhosts() < 2) return;
  for (int h = 0; h < p.nhosts(); ++h) {
    const std::vector<int> ranks = p.ranksOn(h);
    if (ranks.empty()) continue;
    Side sides[2] = {sideOf(lt, ranks, true, true, {}), sideOf(lt, ranks, false, true, {})};
    bool slow[2];
    for (int d = 0; d < 2; ++d)
      slow[d] = sides[d].isSlow(lt.t) && (sides[d].measuredRanks.size() < 2 || sides[d].slowRanks.size() >= 2);
    if (!slow[0] && !slow[1]) continue;
    Finding f{"slow_host", ranks, {h}, {}, 0, "", {}};
    for (int d = 0; d < 2; ++d)
      if (slow[d]) f.links.insert(f.links.end(), sides[d].slow.begin(), sides[d].slow.end());
    f.factor = summarize(lt, f.links, &f.evidence);
    const char* how = slow[0] && slow[1] ? "every link of it is slow, both ways"
                      : slow[0]          ? "it sends slowly (a slow NIC or uplink)"
                                         : "it receives slowly (a slow NIC or downlink)";
    f.words = format("%s is slow: %s - %zu of its %zu measured links to other hosts are %.1fx slower than typical "
                     "(median)", p.hostText(h).c_str(), how, f.links.size(),
                     sides[0].measured.size() + sides[1].measured.size(), f.factor);
    explained->insert(f.links.begin(), f.links.end());
    explainReverse(lt, &f, explained);
    out->push_back(std::move(f));
  }
}

void findCommStragglers(LinkTable& lt, std::set<Link>* explained, std::vector<Finding>* out) {
  const int n = lt.m.nranks();
  for (int r = 0; r < n; ++r) {
    Side sides[2] = {sideOf(lt, {r}, true, false, *explained), sideOf(lt, {r}, false, false, *explained)};
    const bool slow[2] = {sides[0].isSlow(lt.t), sides[1].isSlow(lt.t)};
    if (!slow[0] && !slow[1]) continue;
    Finding f{"comm_straggler", {r}, {}, {}, 0, "", {}};
    for (int d = 0; d < 2; ++d)
      if (slow[d]) f.links.insert(f.links.end(), sides[d].slow.begin(), sides[d].slow.end());
    f.factor = summarize(lt, f.links, &f.evidence);
    const char* what = slow[0] && slow[1] ? "sends and receives" : slow[0] ? "sends" : "receives";
    f.words = format("rank %d straggles in its own communication: it %s slowly - %zu of its links are %.1fx slower "
                     "than typical (median), while the links of the other ranks are not",
                     r, what, f.links.size(), f.factor);
    explained->insert(f.links.begin(), f.links.end());
    out->push_back(std::move(f));
  }
}

// Between two hosts, every measured link slow (at least two): one path, one finding. The slowest
// paths first: the reverse of a slow path is slowed by its acknowledgements (explainReverse).
void findSlowPaths(LinkTable& lt, std::set<Link>* explained, std::vector<Finding>* out) {
  const Placement& p = lt.m.placement;
  std::vector<std::pair<double, Finding>> paths;
  for (int ha = 0; ha < p.nhosts(); ++ha)
    for (int hb = 0; hb < p.nhosts(); ++hb) {
      if (ha == hb) continue;
      std::vector<Link> measured, slow;
      std::set<int> senders;
      for (int a : p.ranksOn(ha))
        for (int b : p.ranksOn(hb)) {
          if (!lt.m.link(a, b).measured() || explained->count(Link{a, b}) != 0) continue;
          measured.push_back({a, b});
          if (lt.at(a, b).slow) slow.push_back({a, b}), senders.insert(a);
        }
      if (slow.size() < 2 || slow.size() != measured.size()) continue;
      Finding f{"slow_link", {senders.begin(), senders.end()}, {}, slow, 0, "", {}};
      f.factor = summarize(lt, slow, &f.evidence);
      bool now = false;
      for (const Link& l : slow) now = now || lt.at(l.from, l.to).slowNow;
      f.words = format("the path from %s to %s is slow: its %zu links are %.1fx slower than the typical link between "
                       "hosts (median)%s", p.hostText(ha).c_str(), p.hostText(hb).c_str(), slow.size(), f.factor,
                       now ? "" : " over the recorded window, though fine in the latest measurements (it recovered, "
                                  "or it flaps)");
      paths.emplace_back(f.factor, std::move(f));
    }
  std::stable_sort(paths.begin(), paths.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  for (auto& [factor, f] : paths) {
    bool taken = false;  // explained by a slower path (as its reverse) meanwhile
    for (const Link& l : f.links) taken = taken || explained->count(l) != 0;
    if (taken) continue;
    explained->insert(f.links.begin(), f.links.end());
    explainReverse(lt, &f, explained);
    out->push_back(std::move(f));
  }
}

void findSlowLinks(LinkTable& lt, const std::set<Link>& explained, std::vector<Finding>* out) {
  const int n = lt.m.nranks();
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) {
      if (a == b || !lt.at(a, b).slow || explained.count(Link{a, b}) != 0) continue;
      const Judged& j = lt.at(a, b);
      Finding f{"slow_link", {a}, {}, {Link{a, b}}, j.slowness, "", {}};
      f.evidence.push_back(describeLink(lt, a, b));
      f.words = format("link %d -> %d is %.1fx slower than the typical link %s%s", a, b, j.slowness,
                       kKindText[lt.kindOf(a, b)],
                       j.slowNow ? "" : " over the recorded window, though fine in the latest measurements");
      out->push_back(std::move(f));
    }
}

// In a pipeline (or an alltoall that waits for its slowest pair) the links around a very slow one
// slow down too: their senders have data queued, their receivers wait for someone. A slow link is
// taken to be in the wake of the worst slow part of the job when it is far milder than it (below
// kWakeShare of its severity: the slowness over the threshold of the measure that found it, so
// that a window's and a data path's slownesses compare) or held back both its ends far less
// often (below kWakeShare of the largest bottleneck fraction of a finding). It is kept as evidence
// of the worst finding, not named as a culprit of its own (two independent faults of very
// different severity lose the milder one).
constexpr double kWakeShare = 0.25;

struct Weight {
  double severity = 0, bottleneck = -1;  // medians over the finding's links (bottleneck: where known)
};

Weight weightOf(const LinkTable& lt, const Finding& f) {
  std::vector<double> s, b;
  for (const Link& l : f.links) {
    const Judged& j = lt.at(l.from, l.to);
    s.push_back(j.severity);
    if (j.worst().bottleneck >= 0) b.push_back(j.worst().bottleneck);
  }
  return {quantile(s, 0.5), quantile(b, 0.5)};
}

void dropLinksInTheWake(const LinkTable& lt, std::vector<Finding>* out) {
  std::vector<Weight> w;
  double worst = 0, widest = -1;
  size_t worstAt = 0;
  for (size_t i = 0; i < out->size(); ++i) {
    w.push_back(weightOf(lt, (*out)[i]));
    if (w[i].severity > worst) worst = w[i].severity, worstAt = i;
    widest = std::max(widest, w[i].bottleneck);
  }
  std::string wake;
  std::vector<Finding> kept;
  size_t worstKept = SIZE_MAX;
  for (size_t i = 0; i < out->size(); ++i) {
    Finding& f = (*out)[i];
    const bool mild = w[i].severity < kWakeShare * worst ||
                      (w[i].bottleneck >= 0 && w[i].bottleneck < kWakeShare * widest);
    if (f.kind == "slow_link" && mild) {
      for (const Link& l : f.links) wake += format(" link %d -> %d (%.1fx)", l.from, l.to, f.factor);
      continue;
    }
    if (i == worstAt) worstKept = kept.size();
    kept.push_back(std::move(f));
  }
  if (!wake.empty() && worstKept < kept.size()) kept[worstKept].evidence.push_back("slower too, likely in its wake:" + wake);
  *out = std::move(kept);
}

void findIdleStragglers(const Measurements& m, const Thresholds& t, std::vector<Finding>* out) {
  const int n = m.nranks();
  std::vector<double> colls;
  for (const RankMeasure& r : m.ranks)
    if (r.collUs >= 0) colls.push_back(r.collUs);
  const double typicalColl = quantile(colls, 0.5);
  for (int r = 0; r < n; ++r) {
    if (m.ranks[r].idleUs < 0) continue;
    std::vector<double> others;
    for (int q = 0; q < n; ++q)
      if (q != r && m.ranks[q].idleUs >= 0) others.push_back(m.ranks[q].idleUs);
    if (others.empty()) continue;
    const double late = m.ranks[r].idleUs - quantile(others, 0.5);
    if (!isLate(late, typicalColl, t)) continue;
    Finding f{"compute_straggler", {r}, {}, {}, late, "", {}};
    f.words = format("rank %d straggles in compute: it starts collectives %.1f ms after the others (it spends %.1f ms "
                     "between collectives, the others %.1f ms at the median), and the others wait for it",
                     r, late / 1e3, m.ranks[r].idleUs / 1e3, quantile(others, 0.5) / 1e3);
    f.evidence.push_back(format("rank.%d.idle_us = %.0f; the typical collective takes %.0f us", r, m.ranks[r].idleUs,
                                typicalColl));
    if (m.ranks[r].waitUs >= 0)
      f.evidence.push_back(format("rank.%d.wait_us = %.0f: the longest any rank waited for its data per collective",
                                  r, m.ranks[r].waitUs));
    out->push_back(std::move(f));
  }
}

}  // namespace

double quantile(std::vector<double> v, double p) {
  if (v.empty()) return -1;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  std::nth_element(v.begin(), v.begin() + static_cast<long>(k), v.end());
  return v[k];
}

bool isLate(double lateUs, double typicalCollUs, const Thresholds& t) {
  return lateUs >= t.minLateUs && (typicalCollUs <= 0 || lateUs >= t.lateShare * typicalCollUs);
}

std::vector<Finding> analyzePerformance(const Measurements& m, const Thresholds& t, const std::vector<int>* lateRanks) {
  std::vector<Finding> out, stragglers;
  if (m.nranks() < 2) return out;
  std::vector<int> late;
  if (lateRanks != nullptr) {
    late = *lateRanks;
  } else {
    findIdleStragglers(m, t, &stragglers);
    for (const Finding& f : stragglers) late.insert(late.end(), f.ranks.begin(), f.ranks.end());
  }
  LinkTable lt = judgeLinks(m, t, late);
  std::set<Link> explained;
  findSlowHosts(lt, &explained, &out);
  findSlowPaths(lt, &explained, &out);
  findCommStragglers(lt, &explained, &out);
  findSlowLinks(lt, explained, &out);
  dropLinksInTheWake(lt, &out);
  out.insert(out.end(), stragglers.begin(), stragglers.end());
  return out;
}

}  // namespace theseus::doctor
