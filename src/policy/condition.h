// Conditions of JSON policy rules: a small expression language over attributes.
//
//   min(link.*.*.gbps) < 0.5 * median(link.*.*.gbps) or max(link.*.*.penalty) > 1
//   count(node.*.nic.*.healthy) > 0 and min(node.*.nic.*.healthy) == 0
//   not exists(rank.*.wait_us) or max(rank.*.wait_us) > 3 * median(rank.*.wait_us)
//
// Grammar (lowest precedence first):
//   expr    := and ('or' and)*                 also ||
//   and     := not ('and' not)*                also &&
//   not     := 'not' not | compare             also !
//   compare := sum [('<' | '<=' | '>' | '>=' | '==' | '!=') sum]
//   sum     := product (('+' | '-') product)*
//   product := unary (('*' | '/') unary)*
//   unary   := '-' unary | primary
//   primary := number | 'true' | 'false' | 'nranks' | 'nnodes' | 'slow_links' | attribute
//            | aggregate '(' pattern ')' | 'exists' '(' pattern ')' | '(' expr ')'
//   aggregate := min | max | mean | median | sum | count
// An attribute is a dotted name (link.0.3.gbps); names with characters other
// than [A-Za-z0-9_.:] (a '-' in a host name) are written in single quotes.
// Function arguments are name patterns (attrs/pattern.h), quoted or not.
// slow_links is the number of links whose verdict is slow (ring_order.h:
// throughput, bottleneck fraction, penalty; a verdict stays until the link
// is measured again or its measurement expires).
//
// Types are checked when the policy loads: comparisons and 'exists' are
// booleans, everything else numbers; and/or/not take booleans, arithmetic and
// comparisons numbers; a rule's condition must be a boolean.
//
// Missing values. An attribute that is absent (or older than the policy's
// max_age_ms), an aggregate over no value (count excepted: 0) and a division
// by zero are *unknown*; arithmetic and comparisons with an unknown are
// unknown; 'and' is false if either side is false, 'or' true if either side is
// true, 'not unknown' is unknown (Kleene logic). A rule applies only when its
// condition is true, so a rule never fires on missing data.
//
// Margin. Hysteresis evaluates an active rule's condition with a relative
// margin in its favour: while active, `a < b` holds up to a < b + margin*|b|,
// `a > b` down to a > b - margin*|b| (and likewise for <=, >=), with the
// direction flipped under 'not'; == and != are exact.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "attrs/cluster_view.h"
#include "common/status.h"

namespace theseus::policy {

struct ConditionContext {
  const attrs::ClusterView* view = nullptr;
  uint64_t nowNs = 0;
  uint64_t maxAgeNs = 0;  // 0: values of any age count
  int nranks = 1;
  int nnodes = 1;
  int slowLinks = -1;     // -1: not computed (slow_links is unknown)
  double margin = 0;      // relative margin
  int lean = 0;           // +1: apply the margin in favour of true; 0: exact
};

class Condition {
 public:
  struct Node;

  // Errors: "at character N: <problem>".
  static Result<Condition> parse(const std::string& text);

  // true, false, or nothing when unknown.
  std::optional<bool> eval(const ConditionContext& ctx) const;
  const std::string& text() const { return text_; }
  bool usesSlowLinks() const;

 private:
  std::string text_;
  std::shared_ptr<const Node> root_;
};

}  // namespace theseus::policy
