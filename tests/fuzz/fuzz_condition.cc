// Fuzz target: the condition language of policy rules (`"when"` in a JSON
// policy; policy/condition.h), on its own so the fuzzer spends its time in
// the expression grammar rather than in JSON syntax.
//
// The bytes are one expression: or/and/not (also ||, &&, !), comparisons,
// arithmetic, numbers, nranks/nnodes/slow_links, attribute names (quoted or
// not) and the aggregates min/max/mean/median/sum/count/exists over name
// patterns (attrs/pattern.h). Parsing bounds nesting (64) and operators
// (4,096), so a hostile condition is an error, not a stack overflow in the
// parser, in evaluation or in the tree's destruction. A condition that parses
// is evaluated on every scenario of fuzz_view.h with the three leans
// hysteresis uses (margin in favour of true, exact, against) and a margin,
// with slow_links known and unknown; evaluation is total (true, false or
// unknown), and a parsed condition is always a boolean.
#include <string>

#include "fuzz_util.h"
#include "fuzz_view.h"
#include "policy/condition.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace theseus;
  if (fuzz::tooLong(size, 8 << 10)) return 0;
  auto c = policy::Condition::parse(fuzz::text(data, size));
  if (!c.isOk()) {
    FUZZ_CHECK(c.status().message().rfind("at character ", 0) == 0, "an error that does not say where: %s",
               c.status().message().c_str());
    return 0;
  }
  (void)c.value().usesSlowLinks();
  for (const fuzz::Scenario& s : fuzz::scenarios()) {
    for (int lean = -1; lean <= 1; ++lean) {
      policy::ConditionContext ctx;
      ctx.view = &s.view;
      ctx.nowNs = 3 * fuzz::kSecond;
      ctx.maxAgeNs = lean == 0 ? 0 : 2 * fuzz::kSecond;
      ctx.nranks = s.nranks;
      ctx.nnodes = static_cast<int>(s.hostNames.size());
      ctx.slowLinks = lean < 0 ? -1 : 1;
      ctx.margin = 0.25;
      ctx.lean = lean;
      (void)c.value().eval(ctx);
    }
  }
  return 0;
}
