// Policy loading and the checks every policy's output goes through.
#include "policy/policy.h"

#include <algorithm>

#include "common/knobs.h"
#include "common/log.h"
#include "policy/decision_check.h"
#include "policy/default_selector.h"
#include "policy/json_policy.h"
#include "policy/plugin_policy.h"

namespace theseus::policy {
namespace {

const StringKnob kPolicy("THESEUS_POLICY", "static",
                         "Schedule selection policy the leader runs: 'static' (size thresholds), a JSON policy file "
                         "(docs/policy-language.md) or a policy plugin .so (include/theseus/policy_plugin.h)");

const schedule::Collective kCollectives[] = {
    schedule::Collective::kBroadcast, schedule::Collective::kReduce,   schedule::Collective::kAllGather,
    schedule::Collective::kReduceScatter, schedule::Collective::kAllReduce, schedule::Collective::kAlltoAll,
    schedule::Collective::kScatter,   schedule::Collective::kGather};

bool isSharedObject(const std::string& spec) {
  if (spec.ends_with(".so")) return true;
  size_t at = spec.rfind(".so.");
  if (at == std::string::npos) return false;
  for (size_t i = at + 4; i < spec.size(); ++i)
    if (!isdigit(static_cast<unsigned char>(spec[i])) && spec[i] != '.') return false;
  return true;
}

// THESEUS_SCHEDULE: the forced schedule replaces every range of a collective it serves.
void applyForced(DecisionTable* table, int nranks) {
  for (schedule::Collective c : kCollectives) {
    std::string forced = forcedSchedule(c);
    if (forced.empty() || !scheduleServes(forced, c, nranks)) continue;
    DecisionTable out;
    for (int k = 0; k < DecisionTable::kCollectives; ++k) {
      auto kc = static_cast<schedule::Collective>(k);
      for (const auto& r : table->ranges(kc)) {
        if (kc == c) continue;
        (void)out.add(kc, r.minBytes, r.maxBytes, r.decision);
      }
    }
    Decision d;
    d.schedule = forced;
    d.why = "THESEUS_SCHEDULE";
    (void)out.add(c, 0, UINT64_MAX, d);
    *table = std::move(out);
  }
}

}  // namespace

int PolicyInput::nnodes() const {
  if (hostOf.empty()) return 1;
  return *std::max_element(hostOf.begin(), hostOf.end()) + 1;
}

const char* const kStaticChoiceWhy = "static choice";

std::string configuredSpec() { return kPolicy.get().empty() ? std::string("static") : kPolicy.get(); }

Result<std::unique_ptr<Policy>> load(const std::string& spec) {
  if (spec.empty() || spec == "static") {
    auto p = JsonPolicy::parse(staticPolicyText(), "built-in static policy", ".");
    if (!p.isOk()) return p.status();
    return std::unique_ptr<Policy>(p.take());
  }
  if (spec.ends_with(".json")) {
    auto p = JsonPolicy::loadFile(spec);
    if (!p.isOk()) return p.status();
    return std::unique_ptr<Policy>(p.take());
  }
  if (isSharedObject(spec)) {
    auto p = PluginPolicy::load(spec);
    if (!p.isOk()) return p.status();
    return std::unique_ptr<Policy>(p.take());
  }
  return invalidUsage("THESEUS_POLICY='%s': expected \"static\", a JSON policy file (*.json) or a policy plugin "
                      "(*.so)", spec.c_str());
}

DecisionTable defaultTable(int nranks, int nnodes) {
  DecisionTable table;
  const uint64_t small = smallMessageBytes();
  for (schedule::Collective c : kCollectives) {
    Choice low = defaultChoice({c, 0, nranks, nnodes}, AlgoFilter::fromEnv());
    Choice high = defaultChoice({c, 1, nranks, nnodes}, AlgoFilter::fromEnv());
    Decision lo{low.schedule, low.params, 0, kStaticChoiceWhy}, hi{high.schedule, high.params, 0, kStaticChoiceWhy};
    if (lo == hi) {  // one range when both size classes choose alike
      (void)table.add(c, 0, UINT64_MAX, std::move(lo));
      continue;
    }
    (void)table.add(c, 0, small, std::move(lo));
    (void)table.add(c, small + 1, UINT64_MAX, std::move(hi));
  }
  return table;
}

Result<DecisionTable> evaluate(Policy& p, const PolicyInput& in) {
  if (in.view == nullptr) return invalidArgument("policy '%s': evaluated without a view", p.name().c_str());
  if (in.nranks < 1) return invalidArgument("policy '%s': evaluated for %d ranks", p.name().c_str(), in.nranks);
  if (!in.hostOf.empty() && in.hostOf.size() != static_cast<size_t>(in.nranks))
    return invalidArgument("policy '%s': hostOf has %zu entries for %d ranks", p.name().c_str(), in.hostOf.size(),
                           in.nranks);
  TH_ASSIGN(DecisionTable table, p.decide(in));
  // Collectives the policy left out keep the static choice.
  DecisionTable defaults;
  bool defaultsBuilt = false;
  for (schedule::Collective c : kCollectives) {
    if (!table.ranges(c).empty()) continue;
    if (!defaultsBuilt) defaults = defaultTable(in.nranks, in.nnodes());
    defaultsBuilt = true;
    for (const auto& r : defaults.ranges(c)) TH_CHECK(table.add(c, r.minBytes, r.maxBytes, r.decision));
  }
  applyForced(&table, in.nranks);
  table.setVersion(0);
  // A table equal to the current one was checked when it was first produced.
  if (in.current != nullptr && table.sameDecisions(*in.current)) return table;
  for (schedule::Collective c : kCollectives) {
    for (const auto& r : table.ranges(c)) {
      Status st = checkDecision(r.decision, c, in.nranks);
      if (!st.isOk())
        return invalidArgument("policy '%s': %s [%llu, %llu] -> %s: %s", p.name().c_str(),
                               schedule::collectiveName(c), static_cast<unsigned long long>(r.minBytes),
                               static_cast<unsigned long long>(r.maxBytes), r.decision.toString().c_str(),
                               st.message().c_str());
    }
  }
  for (const NicChoice& n : table.nicChoices())
    if (n.rank >= in.nranks)
      return invalidArgument("policy '%s': a NIC choice for rank %d of %d", p.name().c_str(), n.rank, in.nranks);
  return table;
}

}  // namespace theseus::policy
