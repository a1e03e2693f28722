#include "doctor/performance.h"

#include <algorithm>
#include <set>

namespace theseus::doctor {
namespace {

enum Kind { kIntra = 0, kInter = 1 };
const char* const kKindText[] = {"within a host", "between hosts"};

// One link's judgement.
struct Judged {
  double slowness = 0;      // typical / measured (the worst accepted measure); 0: no verdict
  double gbps = -1;         // the measurement that gave it
  double typical = -1;      // and its reference
  const char* by = "";      // "now", "probe", "window"
  double bottleneck = -1;   // the bottleneck fraction that let a data-path value count
  bool slowNow = false;     // slow by a current measure (data path now, or probe)
  bool slow = false;
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

// Judges one measure of every link against its kind's typical value (narrative in performance.h).
template <typename Get, typename Gate>
void judgeMeasure(LinkTable& lt, const char* by, bool current, double slowFactor, Get get, Gate gate) {
  double typical[2];
  typicalByKind(lt, get, typical);
  const int n = lt.m.nranks();
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) {
      if (a == b || (lt.late[a] && std::string(by) != "probe")) continue;
      const LinkMeasure& l = lt.m.link(a, b);
      const double value = get(l), ref = typical[lt.kindOf(a, b)];
      if (value <= 0 || ref <= 0) continue;
      const double bottleneck = gate(l);
      if (bottleneck >= 0 && bottleneck < lt.t.minBottleneck) continue;  // held back by another part
      const double s = ref / value;
      Judged& j = lt.at(a, b);
      if (s >= slowFactor) {
        j.slow = true;
        j.slowNow = j.slowNow || current;
      }
      if (s > j.slowness) j = Judged{s, value, ref, by, bottleneck, j.slowNow, j.slow};
    }
}

LinkTable judgeLinks(const Measurements& m, const Thresholds& t, const std::vector<int>& late) {
  LinkTable lt{m, t, std::vector<Judged>(static_cast<size_t>(m.nranks()) * m.nranks()),
               std::vector<bool>(m.nranks(), false)};
  for (int r : late)
    if (r >= 0 && r < m.nranks()) lt.late[r] = true;
  judgeMeasure(lt, "now", true, t.slowFactor, [](const LinkMeasure& l) { return l.gbps; },
               [](const LinkMeasure& l) { return l.bottleneck; });
  // Probes only for links the data path does not measure now: a probe that competes with a
  // collective on a busy link, or on a CPU-starved host, can look ten times slow.
  judgeMeasure(lt, "probe", true, t.slowFactor, [](const LinkMeasure& l) { return l.gbps < 0 ? l.probeGbps : -1.0; },
               [](const LinkMeasure&) { return -1.0; });
  judgeMeasure(lt, "window", false, t.windowSlowFactor, [](const LinkMeasure& l) { return l.windowGbps; },
               [](const LinkMeasure& l) { return l.windowBottleneck; });
  return lt;
}

std::string describeLink(const LinkTable& lt, int a, int b) {
  const Judged& j = lt.at(a, b);
  const Placement& p = lt.m.placement;
  std::string s = format("link %d -> %d", a, b);
  if (lt.kindOf(a, b) == kInter)
    s += format(" (host %d -> host %d)", p.hostIndex(a), p.hostIndex(b));
  s += format(": %.3g GB/s %s, %.1fx below the typical link %s (%.3g GB/s)",
              j.gbps, std::string(j.by) == "now" ? "now" : std::string(j.by) == "probe" ? "by probe" : "over the window",
              j.slowness, kKindText[lt.kindOf(a, b)], j.typical);
  if (j.bottleneck >= 0) s += format("; it held back both its ends %.0f%% of the time", 100 * j.bottleneck);
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

// In a pipeline the links around a very slow one slow down too (their senders starve, their
// receivers wait): a slow link far milder than the worst slow part of the job (below
// kWakeShare of its slowness) is most likely in its wake. It is kept as evidence of the worst
// finding, not named as a culprit of its own (two independent faults of very different
// severity lose the milder one).
constexpr double kWakeShare = 0.25;

void dropLinksInTheWake(std::vector<Finding>* out) {
  double worst = 0;
  for (const Finding& f : *out) worst = std::max(worst, f.factor);
  std::string wake;
  std::vector<Finding> kept;
  for (Finding& f : *out) {
    if (f.kind == "slow_link" && f.factor < kWakeShare * worst) {
      for (const Link& l : f.links) wake += format(" link %d -> %d (%.1fx)", l.from, l.to, f.factor);
    } else {
      kept.push_back(std::move(f));
    }
  }
  for (Finding& f : kept)
    if (!wake.empty() && f.factor == worst) {
      f.evidence.push_back("slower too, likely in its wake:" + wake);
      break;
    }
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
  dropLinksInTheWake(&out);
  out.insert(out.end(), stragglers.begin(), stragglers.end());
  return out;
}

}  // namespace theseus::doctor
