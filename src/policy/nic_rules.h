// The "nics" section of JSON policies: which ranks' traffic leaves their own
// NIC port, decided per rank from the attributes.
//
//   "nics": [{"name": "degraded port",
//             "when": "rank.$r.net_rate_gbps < 0.5 * max(rank.*.net_rate_gbps)",
//             "move": "other_nic", "hold": 2}]
//
// Each rule's condition is evaluated once per rank with `$r` replaced by the
// rank (the text is compiled per rank when the communicator's size is first
// seen). A rule applies to a rank after its condition was true for `hold`
// evaluations in a row and stops after it was not true for `hold` in a row,
// with the margin in its favour while it applies (the same hysteresis as the
// schedule rules, kept per rank). A rank whose rules apply gets the strongest
// of their moves (NicChoice: other_nic < any), with the label of the first
// rule that asks for it as the reason; the table then carries it, and every rank applies it at the
// table's epoch boundary (transport/ib/ib_comm.h).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "policy/condition.h"
#include "policy/decision_table.h"

namespace theseus::policy {

struct NicRule {
  int index = 0;
  std::string name;
  std::string when;  // with "$r"
  NicChoice::Move move = NicChoice::kOtherNic;
  int hold = 1;
  double margin = 0;
  // Per rank, built at the first evaluation (and again if the rank count changes).
  std::vector<Condition> perRank;
  std::vector<char> active;
  std::vector<int> streak;

  std::string label() const;  // "nic rule 0 'degraded port'"
  // The condition's text for `rank` ("$r" replaced).
  static std::string forRank(const std::string& text, int rank);
};

// Advances every rule's per-rank hysteresis in `ctx` (its margin and lean are set per rule and
// rank) and adds the resulting choices to `table`. `policy` names the policy in log lines.
Status applyNicRules(std::vector<NicRule>* rules, ConditionContext ctx, const std::string& policy,
                     DecisionTable* table);

}  // namespace theseus::policy
