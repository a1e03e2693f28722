#include "policy/ring_order.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <numeric>
#include <string>

#include "common/log.h"

namespace theseus::policy {


namespace {

constexpr double kHostEdge = 0.01;  // extra cost of a ring link between hosts (tie-breaker)
// The ring in use stays unless another costs less than 1/kStickyFactor of it (and kStickiness
// less): slowness enters the cost as s^4, so a factor 2 is only ~19% of a slow link's slowness,
// within the scatter of two measurements of the same slow links.
constexpr double kStickiness = 0.5;
constexpr double kStickyFactor = 2.0;
constexpr double kMaxWeight = 1e12;
constexpr int kOwnReferenceHosts = 8;  // probes: up to this many hosts, a reference without the link's hosts

// "12" -> 12 when it is a rank below n; -1 otherwise.
int parseRank(std::string_view s, int n) {
  if (s.empty() || s.size() > 9) return -1;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v < n ? v : -1;
}

// The fixed patterns this file aggregates over.
const attrs::Pattern& gbpsPattern() {
  static const attrs::Pattern p = attrs::Pattern::compile("link.*.*.gbps").take();
  return p;
}
const attrs::Pattern& penaltyPattern() {
  static const attrs::Pattern p = attrs::Pattern::compile("link.*.*.penalty").take();
  return p;
}
const attrs::Pattern& probePattern() {
  static const attrs::Pattern p = attrs::Pattern::compile("link.*.*.probe_gbps").take();
  return p;
}
const attrs::Pattern& bottleneckPattern() {
  static const attrs::Pattern p = attrs::Pattern::compile("link.*.*.bottleneck").take();
  return p;
}
const attrs::Pattern& waitPattern() {
  static const attrs::Pattern p = attrs::Pattern::compile("rank.*.wait_us").take();
  return p;
}

size_t links1(const LinkCosts& c) { return static_cast<size_t>(std::max(c.nranks, 1)); }

double weight(double s, double slowRatio) {
  if (!(s > 1.0 / slowRatio)) return 1.0;
  return std::min(s * s * s * s, kMaxWeight);
}

// The cost of ring link a -> b.
double edgeCost(const LinkCosts& c, int a, int b, bool bidirectional, double slowRatio) {
  double w = weight(c.at(a, b), slowRatio);
  if (bidirectional) w = std::max(w, weight(c.at(b, a), slowRatio));
  return w + (c.hostOf[a] != c.hostOf[b] ? kHostEdge : 0.0);
}

// Exact minimum over all rings, by dynamic programming over the set of ranks
// visited so far and the last one (Held-Karp), starting from base[0].
std::vector<int> exactRing(const LinkCosts& c, const std::vector<int>& base, bool bidir, double ratio) {
  const int n = c.nranks, m = n - 1, start = base[0];
  std::vector<int> others(base.begin() + 1, base.end());
  const size_t full = size_t(1) << m;
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> dp(full * m, inf);
  std::vector<int8_t> parent(full * m, -1);
  for (int j = 0; j < m; ++j) dp[(size_t(1) << j) * m + j] = edgeCost(c, start, others[j], bidir, ratio);
  for (size_t mask = 1; mask < full; ++mask) {
    for (int j = 0; j < m; ++j) {
      double cur = dp[mask * m + j];
      if (!(mask >> j & 1) || cur == inf) continue;
      for (int k = 0; k < m; ++k) {
        if (mask >> k & 1) continue;
        size_t next = (mask | (size_t(1) << k)) * m + k;
        double v = cur + edgeCost(c, others[j], others[k], bidir, ratio);
        if (v < dp[next]) {
          dp[next] = v;
          parent[next] = static_cast<int8_t>(j);
        }
      }
    }
  }
  int last = 0;
  double best = inf;
  for (int j = 0; j < m; ++j) {
    double v = dp[(full - 1) * m + j] + edgeCost(c, others[j], start, bidir, ratio);
    if (v < best) {
      best = v;
      last = j;
    }
  }
  std::vector<int> order(n);
  order[0] = start;
  size_t mask = full - 1;
  for (int pos = n - 1; pos >= 1; --pos) {
    order[pos] = others[last];
    int prev = parent[mask * m + last];
    mask &= ~(size_t(1) << last);
    last = prev;
  }
  return order;
}

// Local search for large rings: swap a rank at either end of a slow link with
// any other rank while that lowers the cost.
std::vector<int> searchRing(const LinkCosts& c, std::vector<int> order, bool bidir, double ratio) {
  const int n = c.nranks;
  auto at = [&](int p) { return order[((p % n) + n) % n]; };
  auto around = [&](int p, int q) {  // cost of the links touching positions p and q, each once
    double sum = 0;
    int ps[4] = {p - 1, p, q - 1, q};
    for (int i = 0; i < 4; ++i) {
      int x = ((ps[i] % n) + n) % n;
      bool dup = false;
      for (int j = 0; j < i; ++j) dup |= (((ps[j] % n) + n) % n) == x;
      if (!dup) sum += edgeCost(c, at(x), at(x + 1), bidir, ratio);
    }
    return sum;
  };
  for (int pass = 0; pass < 4 * n; ++pass) {
    bool improved = false;
    for (int i = 0; i < n && !improved; ++i) {
      if (weight(c.at(at(i), at(i + 1)), ratio) == 1.0 &&
          (!bidir || weight(c.at(at(i + 1), at(i)), ratio) == 1.0))
        continue;
      for (int end : {i, i + 1}) {
        int p = end % n;
        for (int q = 0; q < n && !improved; ++q) {
          if (q == p) continue;
          double before = around(p, q);
          std::swap(order[p], order[q]);
          if (around(p, q) < before - 1e-9) improved = true;
          else std::swap(order[p], order[q]);
        }
        if (improved) break;
      }
    }
    if (!improved) break;
  }
  return order;
}

// The median of `values`, which it reorders; nullopt when empty.
std::optional<double> medianOf(std::vector<double>& values) {
  if (values.empty()) return std::nullopt;
  const size_t m = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + m, values.end());
  double hi = values[m];
  if (values.size() % 2) return hi;
  return (*std::max_element(values.begin(), values.begin() + m) + hi) / 2;
}

// Active probes: each link's latest against a reference, the median probe of
// the links that touch neither of its hosts when there are at most
// kOwnReferenceHosts hosts (with few hosts one slow host's links are a large
// share of all links - half of them with 4 hosts - and drag a median of all
// links down to their level), else (or when no such link was probed) the
// median of all links.
void probeSlowness(const PolicyInput& in, const OrderOptions& options, LinkCosts* c) {
  const int n = c->nranks;
  struct Probe {
    size_t k;
    double gbps;
    uint64_t ns;
  };
  std::vector<Probe> probes;
  int a, b;
  in.view->forEach(probePattern(), in.nowNs, options.maxAgeNs, [&](const std::string& name, const attrs::ViewEntry& e) {
    if (parseLinkName(name, n, &a, &b) && e.value > 0)
      probes.push_back({static_cast<size_t>(a) * n + b, e.value, e.timestampNs});
  });
  if (probes.empty()) return;
  std::vector<double> values;
  for (const Probe& p : probes) values.push_back(p.gbps);
  const std::optional<double> all = medianOf(values);
  const int hosts = c->hostOf.empty() ? 1 : *std::max_element(c->hostOf.begin(), c->hostOf.end()) + 1;
  const bool validHosts = std::all_of(c->hostOf.begin(), c->hostOf.end(), [](int h) { return h >= 0; });
  std::vector<std::optional<double>> own;  // [ha * hosts + hb]: the reference of links between ha and hb
  const bool exclude = validHosts && hosts >= 3 && hosts <= kOwnReferenceHosts;
  if (exclude) {
    own.resize(static_cast<size_t>(hosts) * hosts);
    for (int ha = 0; ha < hosts; ++ha) {
      for (int hb = 0; hb < hosts; ++hb) {
        values.clear();
        for (const Probe& p : probes) {
          const int x = c->hostOf[p.k / n], y = c->hostOf[p.k % n];
          if (x != ha && x != hb && y != ha && y != hb) values.push_back(p.gbps);
        }
        own[static_cast<size_t>(ha) * hosts + hb] = medianOf(values);
      }
    }
  }
  for (const Probe& p : probes) {
    std::optional<double> ref = all;
    if (exclude) {
      const auto& mine = own[static_cast<size_t>(c->hostOf[p.k / n]) * hosts + c->hostOf[p.k % n]];
      if (mine) ref = mine;
    }
    if (!ref || !(*ref > 0)) continue;
    c->probeSlowness[p.k] = std::min(std::max(1.0, *ref / p.gbps), LinkCosts::kUnusable);
    c->probedNs[p.k] = p.ns;
  }
}

}  // namespace

bool parseLinkName(const std::string& name, int n, int* a, int* b) {
  size_t d1 = name.find('.'), d2 = name.find('.', d1 + 1), d3 = name.find('.', d2 + 1);
  if (d1 == std::string::npos || d2 == std::string::npos || d3 == std::string::npos) return false;
  std::string_view v(name);
  *a = parseRank(v.substr(d1 + 1, d2 - d1 - 1), n);
  *b = parseRank(v.substr(d2 + 1, d3 - d2 - 1), n);
  return *a >= 0 && *b >= 0 && *a != *b;
}

LinkCosts measureLinks(const PolicyInput& in, const OrderOptions& options) {
  const int n = in.nranks;
  LinkCosts c;
  c.nranks = n;
  c.slowness.assign(static_cast<size_t>(n) * n, 1.0);
  c.measuredNs.assign(static_cast<size_t>(n) * n, 0);
  c.probeSlowness.assign(static_cast<size_t>(n) * n, 1.0);
  c.probedNs.assign(static_cast<size_t>(n) * n, 0);
  c.hostOf = in.hostOf.size() == static_cast<size_t>(n) ? in.hostOf : std::vector<int>(n, 0);
  const attrs::ClusterView& view = *in.view;
  const uint64_t now = in.nowNs, age = options.maxAgeNs;
  const size_t links = static_cast<size_t>(n) * n;
  std::vector<double> gbps(links, -1.0), bottleneck(links, -1.0), penalty(links, 1.0);  // -1: not measured
  int a, b;
  auto collect = [&](const attrs::Pattern& p, std::vector<double>& into) {
    view.forEach(p, now, age, [&](const std::string& name, const attrs::ViewEntry& e) {
      if (!parseLinkName(name, n, &a, &b)) return;
      size_t k = static_cast<size_t>(a) * n + b;
      into[k] = e.value;
      c.measuredNs[k] = std::max(c.measuredNs[k], e.timestampNs);
    });
  };
  collect(gbpsPattern(), gbps);
  collect(bottleneckPattern(), bottleneck);
  collect(penaltyPattern(), penalty);
  auto gbpsMedian = view.aggregate(gbpsPattern(), attrs::Aggregate::kMedian, now, age);
  auto busyMedian = view.aggregate(bottleneckPattern(), attrs::Aggregate::kMedian, now, age);
  for (size_t k = 0; k < links; ++k) {
    if (c.measuredNs[k] == 0) continue;
    double s = 1.0;
    const bool busyKnown = bottleneck[k] >= 0;
    // A link that holds both its ends back much more than the others is slow.
    if (busyKnown && bottleneck[k] > 0.5 && busyMedian)
      s = std::max(s, bottleneck[k] / std::max(*busyMedian, 0.05));
    // Low throughput counts unless the link's own bottleneck fraction clears it
    // (its sender only looked slow because its receiver was held up downstream).
    if (gbpsMedian && *gbpsMedian > 0 && (!busyKnown || !busyMedian || bottleneck[k] > *busyMedian)) {
      if (gbps[k] == 0) s = LinkCosts::kUnusable;  // measured, and nothing gets through
      else if (gbps[k] > 0) s = std::max(s, *gbpsMedian / gbps[k]);
    }
    s *= penalty[k] > 0 ? penalty[k] : 1.0;
    c.slowness[k] = std::min(s, LinkCosts::kUnusable);
  }
  for (int x = 0; x < n; ++x) c.slowness[static_cast<size_t>(x) * n + x] = 1.0;
  probeSlowness(in, options, &c);
  return c;
}

void applyHostHealth(LinkCosts* c, const PolicyInput& in, const OrderOptions& options) {
  const int n = c->nranks, hosts = in.nnodes();
  const attrs::ClusterView& view = *in.view;
  std::vector<double> floor(hosts, 1.0);
  for (int h = 0; h < hosts && h < static_cast<int>(in.hostNames.size()); ++h) {
    const std::string prefix = "node." + in.hostNames[h];
    auto healthy = view.value(prefix + ".healthy", in.nowNs, options.maxAgeNs);
    auto nics = attrs::Pattern::compile(prefix + ".nic.*.healthy");
    std::optional<double> nic;
    if (nics.isOk()) nic = view.aggregate(nics.value(), attrs::Aggregate::kMin, in.nowNs, options.maxAgeNs);
    if (nic && *nic == 0) floor[h] = 2.0 / options.slowRatio;
    if (healthy && *healthy == 0) floor[h] = LinkCosts::kUnusable;
  }
  for (int x = 0; x < n; ++x) {
    for (int y = 0; y < n; ++y) {
      int hx = c->hostOf[x], hy = c->hostOf[y];
      if (x == y || hx == hy || hx < 0 || hy < 0 || hx >= hosts || hy >= hosts) continue;
      double& s = c->slowness[static_cast<size_t>(x) * n + y];
      s = std::min(std::max({s, floor[hx], floor[hy]}), LinkCosts::kUnusable);
    }
  }
}

LinkCosts linkCosts(const PolicyInput& in, const OrderOptions& options) {
  LinkCosts c = measureLinks(in, options);
  applyHostHealth(&c, in, options);
  return c;
}

// A link turns slow: log it and count a relapse when it had cleared recently.
void LinkVerdicts::markSlow(size_t k, double slowness, uint64_t nowNs, const char* by) {
  State& st = state_[k];
  const bool relapse = st.clearedNs != 0 && nowNs - st.clearedNs < kRelapseNs;
  TH_INFO(log::kPolicy, "link %zu->%zu: slow (%.1fx the usual, %s)%s", k / links1(verdicts_), k % links1(verdicts_),
          slowness, by, relapse ? ", again soon after it cleared" : "");
  verdicts_.slowness[k] = slowness;
  st.clean = 0;
  st.spreadFrom = -1;
  if (relapse) st.relapses = std::min(st.relapses + 1, kMaxRelapses);
  st.clearedNs = 0;
}

void LinkVerdicts::update(const LinkCosts& measured, uint64_t nowNs, uint64_t maxAgeNs, double slowRatio) {
  if (verdicts_.nranks != measured.nranks || verdicts_.hostOf != measured.hostOf) verdicts_ = LinkCosts{};
  const size_t links = measured.slowness.size();
  const bool probed = measured.probedNs.size() == links;
  if (verdicts_.nranks == 0) {
    verdicts_ = measured;
    verdicts_.slowness.assign(links, 1.0);
    verdicts_.measuredNs.assign(links, 0);
    state_.assign(links, State{});
  }
  const double slow = 1.0 / slowRatio, fine = kProbeFineFactor * slow;
  // Data path (s) and probe (p) agree that a link is slow: the data path past the threshold and
  // the probe past the clean limit (between clean and that, a probe neither clears nor confirms),
  // or the data path leaning slow and the probe far past it.
  auto agrees = [&](double s, double p) {
    return (s > slow && p > fine) || (s > kLeaningFactor * slow && p > kLeaningProbeFactor * slow);
  };
  for (size_t k = 0; k < links; ++k) {
    State& st = state_[k];
    double& verdict = verdicts_.slowness[k];
    if (st.relapses > 0 && st.clearedNs != 0 && nowNs > st.clearedNs && nowNs - st.clearedNs > kQuietNs) {
      st.relapses = 0;
      st.clearedNs = 0;
    }
    // 1. A new probe: remember what it says.
    bool newProbe = false;
    const uint64_t prevProbeNs = st.probeNs;
    if (probed && measured.probedNs[k] > st.probeNs) {
      newProbe = true;
      st.probeNs = measured.probedNs[k];
      st.probeSlowness = measured.probeSlowness[k];
      st.slowProbes = st.probeSlowness > fine ? st.slowProbes + 1 : 0;
    }
    const bool hasProbes = probed && measured.probedNs[k] != 0;  // a probe within max_age_ms
    const bool probeClean = hasProbes && !(st.probeSlowness > fine);
    // 2. A new data-path measurement. On a probed link it makes the link slow only when the
    //    latest probe agrees (the pipeline effect and TCP slow start can make a healthy link
    //    look 2x slow); it clears a slow verdict only on links without probes (a probed link's
    //    last data-path samples after a swap left it are its tail, not a measurement of it).
    const bool dataNew = measured.measuredNs[k] > verdicts_.measuredNs[k];
    if (dataNew) {
      verdicts_.measuredNs[k] = st.aliveNs = measured.measuredNs[k];
      const double s = measured.slowness[k];
      if (!hasProbes) {
        if (s > slow && !(verdict > slow)) markSlow(k, s, nowNs, "data path");
        else verdict = s;
      } else {
        // Both sources agree, or the data path leans slow and the probe is far past the threshold
        // (in a ring every link moves data at the slow one's pace, so the data path alone sees
        // even a much slower link only a little below the median). The verdict is the worse of
        // the two: it ranks the link among the slow ones when rings are scored.
        const double p = st.probeSlowness, both = std::max(s, p);
        const bool agree = agrees(s, p);
        st.agreeing = agree ? st.agreeing + 1 : 0;
        if (verdict > slow) {
          if (agree) {
            verdict = both;
            st.spreadFrom = -1;  // measured slow itself
          }
        } else if (agree && st.agreeing >= kAgreeSamples) {
          markSlow(k, both, nowNs, "data path and probe");
        } else {
          verdict = std::min(s, slow);  // one agreeing sample, or a disagreeing probe: not slow (yet)
        }
      }
    }
    // 3. A probe that comes after a data-path sample (taken since the previous probe, and since
    //    the verdict last cleared) and agrees with it: the data path's last sample may be from just
    //    before a swap stopped measuring the link.
    if (newProbe && !dataNew && !(verdict > slow) && hasProbes && measured.measuredNs[k] > prevProbeNs &&
        measured.measuredNs[k] > st.clearedNs && agrees(measured.slowness[k], st.probeSlowness)) {
      markSlow(k, std::max(measured.slowness[k], st.probeSlowness), nowNs, "probe confirming the data path");
      st.aliveNs = std::max(st.aliveNs, st.probeNs);
      continue;
    }
    // 4. Probes keep a slow verdict alive and count clean ones in a row (clearReadyVerdicts
    //    clears it once there are enough).
    if (newProbe && verdict > slow) {
      st.aliveNs = std::max(st.aliveNs, st.probeNs);
      if (!probeClean) st.clean = 0;
      else ++st.clean;
      continue;
    }
    // 5. Nothing refreshed it for max_age_ms: a fresh chance.
    if (st.aliveNs != 0 && maxAgeNs != 0 && nowNs > st.aliveNs && nowNs - st.aliveNs > maxAgeNs) {
      if (verdict > 1.0)
        TH_INFO(log::kPolicy, "link %zu->%zu: verdict (%.1fx) expired unmeasured (max_age_ms)", k / links1(verdicts_),
                k % links1(verdicts_), verdict);
      verdict = 1.0;
      verdicts_.measuredNs[k] = 0;
      st.aliveNs = 0;
      st.clean = 0;
    }
  }
  clearReadyVerdicts(measured, nowNs, slowRatio);
  spreadHostVerdicts(measured, nowNs, slowRatio);
}

// Probed slow links clear after enough clean probes in a row, by host: a link whose count
// suffices still waits while another probed slow link of one of its two hosts does not. So
// a slow host's (or NIC's) links - the ones the data path found and those that followed
// them - clear at one evaluation, and the policy returns to its usual schedule in one swap
// instead of one per link as their probes happen to come in, each swap after min_dwell_ms
// (4 hosts, one at 400 Mbit/s healed: tree -> ring(0,2,3,1) -> ring took 2.9 s). The same
// holds a followed verdict while the link it followed is slow. The price: of two unrelated
// slow links that share a host, the first to heal waits for the other.
void LinkVerdicts::clearReadyVerdicts(const LinkCosts& measured, uint64_t nowNs, double slowRatio) {
  const int n = verdicts_.nranks;
  const std::vector<int>& hostOf = verdicts_.hostOf;
  const size_t links = verdicts_.slowness.size();
  if (measured.probedNs.size() != links || hostOf.size() != static_cast<size_t>(n)) return;
  const double slow = 1.0 / slowRatio;
  auto probedSlow = [&](size_t k) { return verdicts_.slowness[k] > slow && measured.probedNs[k] != 0; };
  auto between = [&](size_t k) {  // a link between two hosts (the ones grouped by host)
    const int hx = hostOf[k / n], hy = hostOf[k % n];
    return hx >= 0 && hy >= 0 && hx != hy;
  };
  auto ready = [&](size_t k) { return state_[k].clean >= kConfirm << state_[k].relapses; };
  std::vector<char> waiting(static_cast<size_t>(*std::max_element(hostOf.begin(), hostOf.end()) + 1), 0);
  for (size_t k = 0; k < links; ++k)
    if (probedSlow(k) && between(k) && !ready(k)) waiting[hostOf[k / n]] = waiting[hostOf[k % n]] = 1;
  for (size_t k = 0; k < links; ++k) {
    if (!probedSlow(k) || !ready(k) || (between(k) && (waiting[hostOf[k / n]] || waiting[hostOf[k % n]]))) continue;
    State& st = state_[k];
    TH_INFO(log::kPolicy, "link %zu->%zu: slow verdict (%.1fx) cleared by %d clean probe(s) in a row (probe %.2fx "
            "the reference)", k / n, k % n, verdicts_.slowness[k], st.clean, st.probeSlowness);
    verdicts_.slowness[k] = 1.0;
    st.clean = 0;
    st.clearedNs = nowNs;
    st.spreadFrom = -1;
  }
}

// A slow host or NIC: every link out of (or into) host h to other hosts probes
// slow and the data path confirmed one of them (a schedule only measures the
// few it uses; the others would each be found slow by a swap to them). Probes
// keep and clear the verdicts as usual. A link the data path measures at the
// usual pace right now does not follow: its probes compete with the data the
// schedule moves over it (after a swap around one slow link 0 -> 1, the new
// ring's links out of host 0 and into host 1 probed 6-8x slow while they
// carried 0.3 GB/s, and following them made a tree look faster than the ring).
// Nor does a link on one slow probe: kFollowProbes in a row give the data path
// time to measure the links a swap just started using.
void LinkVerdicts::spreadHostVerdicts(const LinkCosts& measured, uint64_t nowNs, double slowRatio) {
  const int n = verdicts_.nranks;
  const std::vector<int>& hostOf = verdicts_.hostOf;
  if (measured.probedNs.size() != static_cast<size_t>(n) * n || hostOf.size() != static_cast<size_t>(n)) return;
  const double slow = 1.0 / slowRatio, fine = kProbeFineFactor * slow;
  const int hosts = *std::max_element(hostOf.begin(), hostOf.end()) + 1;
  for (int h = 0; h < hosts; ++h) {
    for (bool out : {true, false}) {
      std::vector<size_t> links;  // every link between h and another host, in this direction
      bool confirmed = false, allSlow = true;
      for (int x = 0; x < n && allSlow; ++x) {
        for (int y = 0; y < n && allSlow; ++y) {
          const int mine = out ? x : y, other = out ? y : x;
          if (hostOf[mine] != h || hostOf[other] == h || hostOf[other] < 0) continue;
          const size_t k = static_cast<size_t>(x) * n + y;
          links.push_back(k);
          confirmed = confirmed || (verdicts_.slowness[k] > slow && state_[k].spreadFrom < 0);
          allSlow = measured.probedNs[k] != 0 && state_[k].probeSlowness > fine &&
                    (verdicts_.slowness[k] > slow || state_[k].slowProbes >= kFollowProbes);
        }
      }
      if (!confirmed || !allSlow || links.size() < 2) continue;
      for (size_t k : links) {
        if (verdicts_.slowness[k] > slow) continue;
        if (measured.measuredNs[k] != 0 && !(measured.slowness[k] > slow)) continue;  // busy, not slow
        char by[96];
        snprintf(by, sizeof by, "probes of every link %s host %d agree with its slow link", out ? "out of" : "into", h);
        markSlow(k, state_[k].probeSlowness, nowNs, by);
        state_[k].aliveNs = std::max(state_[k].aliveNs, state_[k].probeNs);
        state_[k].spreadFrom = h;
      }
    }
  }
}

int LinkVerdicts::probesToClear(int a, int b) const {
  const size_t k = static_cast<size_t>(a) * verdicts_.nranks + b;
  return k < state_.size() ? kConfirm << state_[k].relapses : kConfirm;
}

int LinkVerdicts::slowLinks(double slowRatio) const {
  int count = 0;
  for (double s : verdicts_.slowness) count += s > 1.0 / slowRatio;
  return count;
}

std::vector<int> byHostOrder(int nranks, const std::vector<int>& hostOf) {
  std::vector<int> order(nranks);
  std::iota(order.begin(), order.end(), 0);
  if (hostOf.size() == static_cast<size_t>(nranks))
    std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return hostOf[x] < hostOf[y]; });
  return order;
}

std::vector<int> byRailOrder(int nranks, const std::vector<int>& hostOf, const std::vector<int>& rails) {
  auto railOf = [&](int r) {
    const int rail = static_cast<size_t>(r) < rails.size() ? rails[static_cast<size_t>(r)] : -1;
    return rail < 0 ? INT32_MAX : rail;
  };
  std::vector<int> order = byHostOrder(nranks, hostOf);
  std::vector<int> out;
  out.reserve(order.size());
  size_t begin = 0;
  for (int h = 0; begin < order.size(); ++h) {
    size_t end = begin;
    const int host = hostOf.size() == static_cast<size_t>(nranks) ? hostOf[static_cast<size_t>(order[begin])] : 0;
    while (end < order.size() &&
           (hostOf.size() != static_cast<size_t>(nranks) || hostOf[static_cast<size_t>(order[end])] == host))
      ++end;
    std::vector<int> ranks(order.begin() + static_cast<std::ptrdiff_t>(begin),
                           order.begin() + static_cast<std::ptrdiff_t>(end));
    std::sort(ranks.begin(), ranks.end(), [&](int x, int y) {
      return railOf(x) != railOf(y) ? railOf(x) < railOf(y) : x < y;
    });
    if (h % 2 == 1) std::reverse(ranks.begin(), ranks.end());
    out.insert(out.end(), ranks.begin(), ranks.end());
    begin = end;
  }
  return out;
}

double ringCost(const LinkCosts& costs, const std::vector<int>& order, bool bidirectional, double slowRatio) {
  double sum = 0;
  const size_t n = order.size();
  for (size_t i = 0; i < n && n > 1; ++i) sum += edgeCost(costs, order[i], order[(i + 1) % n], bidirectional, slowRatio);
  return sum;
}

namespace {

// Slow links the ring uses (both directions of each when bidirectional).
int slowRingLinks(const LinkCosts& costs, const std::vector<int>& order, bool bidirectional, double slowRatio) {
  int count = 0;
  const size_t n = order.size();
  for (size_t i = 0; i < n && n > 1; ++i) {
    const int x = order[i], y = order[(i + 1) % n];
    count += weight(costs.at(x, y), slowRatio) > 1.0;
    if (bidirectional) count += weight(costs.at(y, x), slowRatio) > 1.0;
  }
  return count;
}

}  // namespace

std::vector<int> avoidSlowLinksOrder(const LinkCosts& costs, bool bidirectional, double slowRatio,
                                     const std::vector<int>* preferred) {
  const int n = costs.nranks;
  std::vector<int> base = byHostOrder(n, costs.hostOf);
  if (n <= 2) return base;
  const double baseCost = ringCost(costs, base, bidirectional, slowRatio);
  bool anySlow = false;
  for (int i = 0; i < n && !anySlow; ++i) {
    int x = base[i], y = base[(i + 1) % n];
    anySlow = weight(costs.at(x, y), slowRatio) > 1.0 || (bidirectional && weight(costs.at(y, x), slowRatio) > 1.0);
  }
  if (!anySlow) return base;
  std::vector<int> best = n <= kExactRanks ? exactRing(costs, base, bidirectional, slowRatio)
                                           : searchRing(costs, base, bidirectional, slowRatio);
  if (!(ringCost(costs, best, bidirectional, slowRatio) < baseCost - 1e-9)) best = base;
  // Stickiness: the ring in use stays while it is about as good (another ring around the
  // same slow link would be a swap for nothing).
  if (preferred != nullptr && preferred->size() == static_cast<size_t>(n)) {
    std::vector<bool> seen(n, false);
    bool permutation = true;
    for (int r : *preferred) permutation = permutation && r >= 0 && r < n && !seen[r] && (seen[r] = true);
    if (permutation && (ringCost(costs, *preferred, bidirectional, slowRatio) <=
                            kStickyFactor * ringCost(costs, best, bidirectional, slowRatio) + kStickiness ||
                        slowRingLinks(costs, *preferred, bidirectional, slowRatio) <=
                            slowRingLinks(costs, best, bidirectional, slowRatio)))
      return *preferred;
  }
  return best;
}

int slowestRank(const PolicyInput& in, uint64_t maxAgeNs) {
  int best = -1;
  double most = 0;
  in.view->forEach(waitPattern(), in.nowNs, maxAgeNs, [&](const std::string& name, const attrs::ViewEntry& e) {
    size_t d1 = name.find('.'), d2 = name.find('.', d1 + 1);
    int r = parseRank(std::string_view(name).substr(d1 + 1, d2 - d1 - 1), in.nranks);
    if (r >= 0 && e.value > most) {
      most = e.value;
      best = r;
    }
  });
  return best;
}

std::vector<int> rootedOrder(const std::vector<int>& order, int root) {
  std::vector<int> out;
  const size_t n = order.size();
  size_t at = 0;
  while (at < n && order[at] != root) ++at;
  if (at == n) return order;
  for (size_t i = 0; i < n; ++i) out.push_back(order[(at + i) % n]);
  return out;
}

}  // namespace theseus::policy
