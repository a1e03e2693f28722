// JSON policies: ordered rules over collectives, sizes, rank counts and
// attribute conditions (docs/policy-language.md, docs/schemas/policy.schema.json).
//
// Evaluation. Every call first advances each rule's hysteresis state: a rule
// with a condition becomes active after its condition was true for `hold`
// consecutive evaluations and inactive after it was not true (false or
// unknown) for `hold` consecutive ones; while active, the condition is
// evaluated with the rule's margin in its favour (condition.h). Then, for
// every collective, the size axis is cut at every rule's min_bytes and
// max_bytes + 1 and at the static threshold, and each piece gets the first
// rule (in file order) that is active, covers the collective, the piece, the
// rank count and the node count, and has a schedule that serves the
// collective at this rank count (a preference list takes the first such
// schedule NCCL_ALGO allows). Pieces no rule claims get the static choice.
// Neighbouring pieces with the same decision merge.
//
// Links. When a rule uses "order": "avoid_slow_links", "fastest" or its
// condition counts slow_links, every evaluation first updates the per-link
// verdicts (ring_order.h) from the view; all of them use those verdicts.
//
// Fastest. A rule whose use is {"fastest": [candidates]} decides per size: at
// sample sizes (powers of 4 from 1 KiB to 1 GiB inside the rule's range) every
// candidate's schedule, with its parameters resolved as for any rule, gets a
// predicted time from the alpha-beta cost model over the verdicts' link model
// (cost_estimator.h); "root": "any" makes every rank (up to 16 of them, evenly
// spread, on larger communicators) a root to try. The lowest time wins; the
// choice in use at that size stays while it is predicted within 10% of the
// best (measurements scatter). Each choice covers the sizes up to half-way
// (geometrically) to the next sample.
//
// NICs. The "nics" section (nic_rules.h) decides per rank whether its traffic
// leaves its own NIC port; the choices travel in the table.
//
// Dwell. A table that differs from the current one is returned only when the
// current one has been in effect for at least min_dwell_ms; before that the
// current table comes back unchanged (the rules' states still advance).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "policy/condition.h"
#include "policy/cost_estimator.h"
#include "policy/nic_rules.h"
#include "policy/policy.h"
#include "policy/ring_order.h"

namespace theseus::policy {

struct PolicySettings {
  uint64_t minDwellNs = 0;
  int hold = 1;
  double margin = 0;
  uint64_t maxAgeNs = 0;   // attributes older than this are ignored (0: none)
  double slowRatio = 0.5;  // avoid_slow_links: a link below this fraction of the median is slow
};

// What a rule chooses.
struct RuleUse {
  enum class Order { kDefault, kIdentity, kExplicit, kAvoidSlowLinks, kByHost, kByRail };
  enum class Root { kNone, kRank, kStraggler, kAny };  // kAny: only in `fastest` candidates
  std::vector<std::string> schedules;  // preference list; "default" = the static choice
  Order order = Order::kDefault;
  std::vector<int> explicitOrder;
  Root root = Root::kNone;
  int rootRank = 0;
  int channels = 0;                    // 0: the schedule's default
  std::optional<bool> bidirectional;
  int pipeline = 0;
  uint64_t sliceBytes = 0;
  // "fastest": candidates (each a use of its own, without "fastest"); at every
  // size the rule takes the one with the lowest predicted time (json_policy.cc).
  std::vector<RuleUse> fastest;
};

struct Rule {
  int index = 0;
  std::string name;
  uint32_t collectives = 0;            // bit (1 << Collective)
  uint64_t minBytes = 0, maxBytes = UINT64_MAX;
  int minRanks = 1, maxRanks = INT32_MAX;
  int minNodes = 1, maxNodes = INT32_MAX;
  std::optional<Condition> when;
  int hold = 1;
  double margin = 0;
  RuleUse use;
  // Hysteresis state.
  bool active = false;
  int streak = 0;

  std::string label() const;  // "rule 2 'avoid slow links'"
};

class JsonPolicy final : public Policy {
 public:
  // Parses a policy document. `where` names it in errors (the file path);
  // relative schedule file paths resolve against `baseDir`.
  static Result<std::unique_ptr<JsonPolicy>> parse(const std::string& text, const std::string& where,
                                                   const std::string& baseDir);
  static Result<std::unique_ptr<JsonPolicy>> loadFile(const std::string& path);

  const std::string& name() const override { return name_; }
  std::string describe() const override;
  bool usesLinkMeasurements() const override { return usesLinks_; }
  Result<DecisionTable> decide(const PolicyInput& in) override;

  const std::vector<Rule>& rules() const { return rules_; }
  const std::vector<NicRule>& nicRules() const { return nicRules_; }
  const PolicySettings& settings() const { return settings_; }

 private:
  friend class JsonPolicyParser;
  JsonPolicy() = default;

  ConditionContext conditionContext(const PolicyInput& in, int slowLinks) const;
  void advanceHysteresis(const PolicyInput& in, int slowLinks);
  Result<DecisionTable> buildTable(const PolicyInput& in, const LinkCosts* costs);

  std::string name_;
  std::string description_;
  std::string where_;
  PolicySettings settings_;
  std::vector<Rule> rules_;
  std::vector<NicRule> nicRules_;
  bool usesLinks_ = false;  // a rule orders rings around slow links, counts slow_links or predicts times
  LinkVerdicts verdicts_;
  CostEstimator estimator_;  // `fastest` rules' programs
};

// "65536", "64K", "1M", "2G", "1T" (binary multiples), "inf", "$small_msg_bytes".
Result<uint64_t> parseSize(const std::string& text);

}  // namespace theseus::policy
