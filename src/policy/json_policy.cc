// Evaluating JSON policies (the algorithm is described in json_policy.h).
#include "policy/json_policy.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "common/log.h"
#include "policy/cost_estimator.h"
#include "policy/decision_check.h"
#include "policy/default_selector.h"
#include "policy/ring_order.h"

namespace theseus::policy {
namespace {

const schedule::Collective kCollectives[] = {
    schedule::Collective::kBroadcast, schedule::Collective::kReduce,   schedule::Collective::kAllGather,
    schedule::Collective::kReduceScatter, schedule::Collective::kAllReduce, schedule::Collective::kAlltoAll,
    schedule::Collective::kScatter,   schedule::Collective::kGather};

// Orders computed at most once per evaluation.
struct OrderMemo {
  const LinkCosts* costs = nullptr;  // the link verdicts with host health
  std::map<std::pair<int, std::vector<int>>, std::vector<int>> avoid;  // (bidirectional, order in use) -> order
  std::optional<std::vector<int>> byHost;
  std::optional<std::vector<int>> byRail;
  std::optional<int> straggler;
};

bool isIdentity(const std::vector<int>& order) {
  for (size_t i = 0; i < order.size(); ++i)
    if (order[i] != static_cast<int>(i)) return false;
  return true;
}

}  // namespace

std::string Rule::label() const {
  return "rule " + std::to_string(index) + (name.empty() ? std::string() : " '" + name + "'");
}

std::string JsonPolicy::describe() const {
  std::string out = "JSON policy '" + name_ + "' (" + where_ + ", " + std::to_string(rules_.size()) + " rules";
  if (!nicRules_.empty()) out += ", " + std::to_string(nicRules_.size()) + " NIC rules";
  out += ")";
  if (!description_.empty()) out += ": " + description_;
  return out;
}

ConditionContext JsonPolicy::conditionContext(const PolicyInput& in, int slowLinks) const {
  ConditionContext ctx;
  ctx.slowLinks = slowLinks;
  ctx.view = in.view;
  ctx.nowNs = in.nowNs;
  ctx.maxAgeNs = settings_.maxAgeNs;
  ctx.nranks = in.nranks;
  ctx.nnodes = in.nnodes();
  return ctx;
}

void JsonPolicy::advanceHysteresis(const PolicyInput& in, int slowLinks) {
  ConditionContext ctx = conditionContext(in, slowLinks);
  for (Rule& r : rules_) {
    if (!r.when) continue;
    ctx.margin = r.margin;
    ctx.lean = r.active ? 1 : 0;
    const bool holds = r.when->eval(ctx) == true;
    if (holds == r.active) {
      r.streak = 0;
      continue;
    }
    if (++r.streak < r.hold) continue;
    r.active = holds;
    r.streak = 0;
    TH_INFO(log::kPolicy, "policy '%s': %s %s (%s)", name_.c_str(), r.label().c_str(),
            holds ? "now applies" : "no longer applies", r.when->text().c_str());
  }
}

Result<DecisionTable> JsonPolicy::decide(const PolicyInput& in) {
  if (in.view == nullptr || in.nranks < 1) return invalidArgument("policy '%s': no view or no ranks", name_.c_str());
  LinkCosts costs;
  int slowLinks = -1;
  if (usesLinks_) {
    OrderOptions o;
    o.slowRatio = settings_.slowRatio;
    o.maxAgeNs = settings_.maxAgeNs;
    verdicts_.update(measureLinks(in, o), in.nowNs, settings_.maxAgeNs, settings_.slowRatio);
    slowLinks = verdicts_.slowLinks(settings_.slowRatio);
    costs = verdicts_.current();
    applyHostHealth(&costs, in, o);
  }
  advanceHysteresis(in, slowLinks);
  TH_ASSIGN(DecisionTable table, buildTable(in, usesLinks_ ? &costs : nullptr));
  if (!nicRules_.empty()) TH_CHECK(applyNicRules(&nicRules_, conditionContext(in, slowLinks), name_, &table));
  if (in.current != nullptr && in.currentAgeNs < settings_.minDwellNs && !table.sameDecisions(*in.current)) {
    TH_INFO(log::kPolicy, "policy '%s': a new table is ready but the current one stays %.1f s more (min_dwell_ms)",
            name_.c_str(), static_cast<double>(settings_.minDwellNs - in.currentAgeNs) / 1e9);
    DecisionTable keep = *in.current;
    return keep;
  }
  return table;
}

namespace {

// The parameters a rule asks for, resolved for this evaluation; false when the
// rule cannot apply at this rank count (a root outside it).
bool resolveParams(const RuleUse& use, const PolicyInput& in, const PolicySettings& settings, OrderMemo& memo,
                   schedule::Collective c, uint64_t minBytes, schedule::ScheduleParams* out) {
  const int n = in.nranks;
  std::vector<int> order;
  switch (use.order) {
    case RuleUse::Order::kDefault:
    case RuleUse::Order::kIdentity: break;
    case RuleUse::Order::kExplicit: order = use.explicitOrder; break;
    case RuleUse::Order::kByHost:
      if (!memo.byHost) memo.byHost = byHostOrder(n, in.hostOf);
      order = *memo.byHost;
      break;
    case RuleUse::Order::kByRail:
      if (!memo.byRail) {
        std::vector<int> rails(static_cast<size_t>(n), -1);  // rank.<r>.rail, from the NIC choice (networks.md)
        for (int r = 0; r < n; ++r) {
          auto v = in.view->value("rank." + std::to_string(r) + ".rail", in.nowNs);
          if (v && *v >= 0 && *v < 1024) rails[static_cast<size_t>(r)] = static_cast<int>(*v);
        }
        memo.byRail = byRailOrder(n, in.hostOf, rails);
      }
      order = *memo.byRail;
      break;
    case RuleUse::Order::kAvoidSlowLinks: {
      const int bidir = use.bidirectional.value_or(false) ? 1 : 0;
      if (memo.costs == nullptr) return false;  // cannot happen: such rules make the policy track links
      // The order this collective uses now at the rule's sizes, so that an equally good ring stays.
      std::vector<int> inUse;
      if (in.current != nullptr) {
        const Decision* d = in.current->lookup(c, std::max(minBytes, smallMessageBytes() + 1));
        if (d != nullptr && d->params.bidirectional == use.bidirectional.value_or(false) &&
            std::find(use.schedules.begin(), use.schedules.end(), d->schedule) != use.schedules.end()) {
          inUse = d->params.order;
          if (inUse.empty()) {  // the identity ring
            inUse.resize(in.nranks);
            std::iota(inUse.begin(), inUse.end(), 0);
          }
        }
      }
      auto key = std::make_pair(bidir, inUse);
      auto it = memo.avoid.find(key);
      if (it == memo.avoid.end())
        it = memo.avoid.emplace(key, avoidSlowLinksOrder(*memo.costs, bidir != 0, settings.slowRatio,
                                                         inUse.empty() ? nullptr : &inUse)).first;
      order = it->second;
      break;
    }
  }
  int root = -1;
  if (use.root == RuleUse::Root::kRank) {
    if (use.rootRank >= n) return false;
    root = use.rootRank;
  } else if (use.root == RuleUse::Root::kStraggler) {
    if (!memo.straggler) memo.straggler = slowestRank(in, settings.maxAgeNs);
    root = *memo.straggler;
  }
  if (root >= 0) {
    if (order.empty()) {
      order.resize(n);
      std::iota(order.begin(), order.end(), 0);
    }
    order = rootedOrder(order, root);
  }
  if (isIdentity(order)) order.clear();
  out->order = std::move(order);
  out->channels = use.channels ? use.channels : 1;
  out->bidirectional = use.bidirectional.value_or(false);
  out->pipelineChunks = use.pipeline;
  return true;
}

// The options of a "fastest" rule for collective c: each candidate's first
// usable schedule with its resolved parameters, once per root to try for
// "root": "any" (every rank, or kAnyRoots of them spread evenly).
constexpr int kAnyRoots = 16;
constexpr double kKeepWithin = 1.10;  // the choice in use stays while predicted within 10% of the best
constexpr int kMinSampleLog2 = 10, kMaxSampleLog2 = 30;  // sample sizes 1 KiB .. 1 GiB, powers of 4

// "tree(order=1,2,3,0) predicted 1.93 ms at 64 MiB" (no size when `bytes` is 0).
std::string predictionText(const Decision& d, double us, uint64_t bytes) {
  char buf[96];
  if (us >= 1e6) snprintf(buf, sizeof(buf), " %.3g s", us / 1e6);
  else if (us >= 1e3) snprintf(buf, sizeof(buf), " %.3g ms", us / 1e3);
  else snprintf(buf, sizeof(buf), " %.3g us", us);
  std::string out = d.toString() + (bytes != 0 ? " predicted" : "") + buf;
  if (bytes != 0) {
    snprintf(buf, sizeof(buf), " at %llu %s", static_cast<unsigned long long>(bytes >= (1u << 20) ? bytes >> 20 : bytes >> 10),
             bytes >= (1u << 20) ? "MiB" : "KiB");
    out += buf;
  }
  return out;
}

std::vector<Decision> fastestOptions(const Rule& r, const PolicyInput& in, const PolicySettings& settings,
                                     OrderMemo& memo, schedule::Collective c, const AlgoFilter& filter) {
  const int n = in.nranks;
  std::vector<Decision> out;
  for (const RuleUse& use : r.use.fastest) {
    schedule::ScheduleParams params;
    if (!resolveParams(use, in, settings, memo, c, r.minBytes, &params)) continue;
    std::vector<schedule::ScheduleParams> variants;
    if (use.root == RuleUse::Root::kAny) {
      std::vector<int> base = params.order;
      if (base.empty()) {
        base.resize(n);
        std::iota(base.begin(), base.end(), 0);
      }
      const int tries = std::min(n, kAnyRoots);
      for (int i = 0; i < tries; ++i) {
        schedule::ScheduleParams v = params;
        v.order = rootedOrder(base, base[static_cast<size_t>(i) * n / tries]);
        if (isIdentity(v.order)) v.order.clear();
        variants.push_back(std::move(v));
      }
    } else {
      variants.push_back(params);
    }
    for (const std::string& name : use.schedules) {
      if (name == "default") {
        Choice choice = defaultChoice({c, sizeClass(smallMessageBytes() + 1), n, in.nnodes()}, filter);
        Decision d;
        d.schedule = choice.schedule;
        d.params = choice.params;
        d.sliceBytes = use.sliceBytes;
        out.push_back(std::move(d));
        break;
      }
      if (!scheduleServes(name, c, n) || !filter.allows(c, name)) continue;
      bool any = false;
      for (const schedule::ScheduleParams& v : variants) {
        if (!paramsUsable(name, c, n, v)) continue;
        Decision d;
        d.schedule = name;
        d.params = v;
        d.sliceBytes = use.sliceBytes;
        out.push_back(std::move(d));
        any = true;
      }
      if (any) break;
    }
  }
  return out;
}

// A "fastest" rule's choices for collective c: (first size, decision) pieces,
// from the predicted times at the sample sizes inside the rule's range (the
// range's ends when no sample falls inside). Empty when no candidate is usable
// or no time could be predicted.
std::vector<std::pair<uint64_t, Decision>> fastestBySize(const Rule& r, const PolicyInput& in,
                                                         const PolicySettings& settings, const std::string& policy,
                                                         CostEstimator& estimator, OrderMemo& memo,
                                                         schedule::Collective c, const AlgoFilter& filter) {
  std::vector<std::pair<uint64_t, Decision>> pieces;
  if (memo.costs == nullptr) return pieces;  // cannot happen: such rules make the policy track links
  const std::vector<Decision> options = fastestOptions(r, in, settings, memo, c, filter);
  if (options.empty()) return pieces;
  std::vector<uint64_t> samples;
  for (int k = kMinSampleLog2; k <= kMaxSampleLog2; k += 2) {
    const uint64_t s = uint64_t(1) << k;
    if (s >= r.minBytes && s <= r.maxBytes) samples.push_back(s);
  }
  if (samples.empty()) samples.push_back(std::max<uint64_t>(r.minBytes, 1));
  const schedule::user::LinkParams link = verdictLinkModel(in, *memo.costs, settings.maxAgeNs, settings.slowRatio);
  for (size_t i = 0; i < samples.size(); ++i) {
    const uint64_t bytes = samples[i];
    const Decision* inUse = in.current != nullptr ? in.current->lookup(c, bytes) : nullptr;
    const Decision *best = nullptr, *second = nullptr;
    double bestUs = 0, secondUs = 0, inUseUs = -1;
    for (const Decision& d : options) {
      Result<double> t = estimator.timeUs(d.schedule, c, in.nranks, in.hostOf, d.params, bytes, link);
      if (!t.isOk()) {
        TH_INFO(log::kPolicy, "policy '%s': %s: no predicted time for %s: %s", policy.c_str(), r.label().c_str(),
                d.toString().c_str(), t.status().message().c_str());
        continue;
      }
      if (best == nullptr || t.value() < bestUs) {
        second = best, secondUs = bestUs;
        best = &d;
        bestUs = t.value();
      } else if (second == nullptr || t.value() < secondUs) {
        second = &d, secondUs = t.value();
      }
      if (inUse != nullptr && *inUse == d) inUseUs = t.value();
      TH_TRACE(log::kPolicy, "policy '%s': %s: %s", policy.c_str(), r.label().c_str(),
               predictionText(d, t.value(), bytes).c_str());
    }
    if (best == nullptr) continue;
    Decision chosen = *best;
    double chosenUs = bestUs;
    if (inUseUs >= 0 && inUseUs <= kKeepWithin * bestUs) chosen = *inUse, chosenUs = inUseUs;
    // The reason names the prediction that decided, so a decision log says why a tree won.
    const Decision* other = chosen == *best ? second : best;
    chosen.why = r.label() + ": " + predictionText(chosen, chosenUs, bytes) +
                 (other != nullptr ? ", " + predictionText(*other, chosen == *best ? secondUs : bestUs, 0) : "");
    // Each sample's choice starts half-way (geometrically) after the previous sample.
    const uint64_t from = pieces.empty() ? r.minBytes : samples[i - 1] * 2;
    if (!pieces.empty() && pieces.back().second == chosen) {
      pieces.back().second.why = std::move(chosen.why);  // a piece cites its largest sample
      continue;
    }
    pieces.emplace_back(pieces.empty() ? r.minBytes : from, std::move(chosen));
  }
  return pieces;
}

}  // namespace

// The first rule (in order) that applies at each size, by a sweep over the cut
// points of the rules' ranges: a rule enters the active set at its minBytes and
// leaves after its maxBytes, and a piece takes the lowest-numbered active rule
// that has a usable schedule. What a rule decides does not depend on the size
// (except "default", the static choice of the piece's size class), so it is
// worked out once per collective. O(rules log rules) per collective; scanning
// every rule for every piece was quadratic (32,000 rules took seconds).
Result<DecisionTable> JsonPolicy::buildTable(const PolicyInput& in, const LinkCosts* costs) {
  const int n = in.nranks, nodes = in.nnodes();
  const AlgoFilter& filter = AlgoFilter::fromEnv();
  OrderMemo memo;
  memo.costs = costs;
  DecisionTable table;
  const uint64_t small = smallMessageBytes();
  for (schedule::Collective c : kCollectives) {
    const uint32_t bit = 1u << static_cast<unsigned>(c);
    // A rule's decision for this collective: the first usable name of its list, or none.
    struct Candidate {
      bool usable = false;
      bool isDefault = false;  // the static choice, resolved per piece
      Decision decision;
      std::vector<std::pair<uint64_t, Decision>> bySize;  // a "fastest" rule's: (first size, decision)
    };
    std::vector<Candidate> cand(rules_.size());
    std::vector<std::pair<uint64_t, long>> events;  // (cut, +1 + index: enters; -(1 + index): leaves)
    std::vector<uint64_t> cuts = {0};
    if (small < UINT64_MAX) cuts.push_back(small + 1);
    for (size_t i = 0; i < rules_.size(); ++i) {
      const Rule& r = rules_[i];
      if (!(r.collectives & bit)) continue;
      cuts.push_back(r.minBytes);
      if (r.maxBytes < UINT64_MAX) cuts.push_back(r.maxBytes + 1);
      if (n < r.minRanks || n > r.maxRanks || nodes < r.minNodes || nodes > r.maxNodes || (r.when && !r.active))
        continue;
      schedule::ScheduleParams params;
      if (!resolveParams(r.use, in, settings_, memo, c, r.minBytes, &params)) continue;
      Candidate& k = cand[i];
      if (!r.use.fastest.empty()) {
        k.bySize = fastestBySize(r, in, settings_, name_, estimator_, memo, c, filter);
        k.usable = !k.bySize.empty();
        for (const auto& piece : k.bySize) cuts.push_back(piece.first);
      }
      for (const std::string& name : r.use.schedules) {
        if (name == "default") {
          k.isDefault = true;
        } else {
          if (!scheduleServes(name, c, n) || !filter.allows(c, name) || !paramsUsable(name, c, n, params)) continue;
          k.decision.schedule = name;
          k.decision.params = params;
        }
        k.decision.sliceBytes = r.use.sliceBytes;
        k.decision.why = r.label();
        k.usable = true;
        break;
      }
      if (!k.usable) continue;
      events.emplace_back(r.minBytes, static_cast<long>(i) + 1);
      if (r.maxBytes < UINT64_MAX) events.emplace_back(r.maxBytes + 1, -(static_cast<long>(i) + 1));
    }
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    std::sort(events.begin(), events.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::set<size_t> active;
    size_t next = 0;
    std::vector<DecisionTable::Range> pieces;
    for (size_t i = 0; i < cuts.size(); ++i) {
      const uint64_t lo = cuts[i], hi = i + 1 < cuts.size() ? cuts[i + 1] - 1 : UINT64_MAX;
      for (; next < events.size() && events[next].first <= lo; ++next) {
        const long e = events[next].second;
        if (e > 0) active.insert(static_cast<size_t>(e - 1));
        else active.erase(static_cast<size_t>(-e - 1));
      }
      Decision d;
      if (!active.empty()) {
        const Candidate& k = cand[*active.begin()];
        d = k.decision;
        for (const auto& [from, choice] : k.bySize)
          if (from <= lo) d = choice;
        if (k.isDefault) {
          Choice choice = defaultChoice({c, sizeClass(lo), n, nodes}, filter);
          d.schedule = choice.schedule;
          d.params = choice.params;
        }
      } else {
        Choice choice = defaultChoice({c, sizeClass(lo), n, nodes}, filter);
        d.schedule = choice.schedule;
        d.params = choice.params;
        d.why = kStaticChoiceWhy;
      }
      if (!pieces.empty() && pieces.back().decision == d && pieces.back().decision.why == d.why) {
        pieces.back().maxBytes = hi;
        continue;
      }
      pieces.push_back({lo, hi, std::move(d)});
    }
    for (auto& p : pieces) TH_CHECK(table.add(c, p.minBytes, p.maxBytes, std::move(p.decision)));
  }
  return table;
}

}  // namespace theseus::policy
