// The "nics" section of JSON policies (nic_rules.h).
#include "policy/nic_rules.h"

#include "common/log.h"

namespace theseus::policy {

std::string NicRule::label() const {
  return "nic rule " + std::to_string(index) + (name.empty() ? std::string() : " '" + name + "'");
}

std::string NicRule::forRank(const std::string& text, int rank) {
  std::string out;
  const std::string r = std::to_string(rank);
  for (size_t i = 0; i < text.size(); ++i) {
    if (text.compare(i, 2, "$r") == 0) {
      out += r;
      ++i;
    } else {
      out += text[i];
    }
  }
  return out;
}

Status applyNicRules(std::vector<NicRule>* rules, ConditionContext ctx, const std::string& policy,
                     DecisionTable* table) {
  const int n = ctx.nranks;
  std::vector<NicChoice> choice(static_cast<size_t>(n));
  for (NicRule& rule : *rules) {
    if (static_cast<int>(rule.perRank.size()) != n) {
      rule.perRank.clear();
      for (int r = 0; r < n; ++r) {
        // The text parsed with $r = 0 when the policy loaded; every rank number parses alike.
        TH_ASSIGN(Condition c, Condition::parse(NicRule::forRank(rule.when, r)));
        rule.perRank.push_back(std::move(c));
      }
      rule.active.assign(static_cast<size_t>(n), 0);
      rule.streak.assign(static_cast<size_t>(n), 0);
    }
    ctx.margin = rule.margin;
    for (int r = 0; r < n; ++r) {
      const size_t i = static_cast<size_t>(r);
      ctx.lean = rule.active[i] ? 1 : 0;
      const bool holds = rule.perRank[i].eval(ctx) == true;
      if (holds != static_cast<bool>(rule.active[i])) {
        if (++rule.streak[i] >= rule.hold) {
          rule.active[i] = holds ? 1 : 0;
          rule.streak[i] = 0;
          TH_INFO(log::kPolicy, "policy '%s': %s %s rank %d (%s)", policy.c_str(), rule.label().c_str(),
                  holds ? "now applies to" : "no longer applies to", r, rule.perRank[i].text().c_str());
        }
      } else {
        rule.streak[i] = 0;
      }
      if (rule.active[i] && rule.move > choice[i].move) {
        choice[i].move = rule.move;
        choice[i].why = rule.label();
      }
    }
  }
  for (int r = 0; r < n; ++r) {
    NicChoice& c = choice[static_cast<size_t>(r)];
    if (c.move == NicChoice::kStay) continue;
    c.rank = r;
    TH_CHECK(table->addNicChoice(std::move(c)));
  }
  return Status::ok();
}

}  // namespace theseus::policy
