// Fuzz target: JSON policies (docs/policy-language.md), the THESEUS_POLICY
// files the leader runs, with their `when` conditions.
//
// The bytes are a policy document. JsonPolicy::parse checks its structure,
// sizes ("64K", "$small_msg_bytes"), rank and node ranges, orders, roots,
// schedule references and parses every condition (condition.h); a rule's
// schedules must serve the collectives it lists, which generates small
// instances of the built-ins. A policy that loads is then run as the leader
// runs it: policy::evaluate on each scenario of fuzz_view.h (1 rank; 4 ranks
// on 2 hosts with a slow link, an unhealthy NIC and a straggler; 13 ranks on 3
// hosts; a fresh instance of the policy for each, as each communicator's
// leader loads its own), three rounds each so hysteresis (`hold`) and dwell advance, with
// the previous table as the current one. Every table must survive the wire
// format the epoch protocol ships it in (DecisionTable::serialize ->
// deserialize gives the same decisions).
//
// Schedules named by file path ("file:x.json", anything with '/') are loaded
// by the policy; inputs that mention ".so" are skipped so the fuzzer never
// dlopens a library it happened to name.
#include <string>

#include "fuzz_util.h"
#include "fuzz_view.h"
#include "policy/json_policy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace theseus;
  if (fuzz::tooLong(size, 16 << 10)) return 0;
  const std::string text = fuzz::text(data, size);
  if (text.find(".so") != std::string::npos) return 0;
  auto p = policy::JsonPolicy::parse(text, "fuzz.json", "/nonexistent");
  if (!p.isOk()) {
    FUZZ_CHECK(!p.status().message().empty(), "an error without a message");
    return 0;
  }
  (void)p.value()->describe();
  bool first = true;
  for (const fuzz::Scenario& s : fuzz::scenarios()) {
    if (!first) {
      p = policy::JsonPolicy::parse(text, "fuzz.json", "/nonexistent");
      FUZZ_CHECK(p.isOk(), "a policy that loaded once does not load again: %s", p.status().message().c_str());
    }
    first = false;
    policy::DecisionTable current;
    bool haveCurrent = false;
    for (int round = 0; round < 3; ++round) {
      policy::PolicyInput in = s.input((2 + round) * fuzz::kSecond);
      in.current = haveCurrent ? &current : nullptr;
      in.currentAgeNs = round * fuzz::kSecond / 2;
      auto t = policy::evaluate(*p.value(), in);
      if (!t.isOk()) {
        FUZZ_CHECK(!t.status().message().empty(), "an evaluation error without a message");
        break;
      }
      auto back = policy::DecisionTable::deserialize(t.value().serialize());
      FUZZ_CHECK(back.isOk(), "a table does not survive its wire format: %s", back.status().message().c_str());
      FUZZ_CHECK(back.value().sameDecisions(t.value()), "the wire format changed a table");
      (void)t.value().describe();
      current = t.take();
      haveCurrent = true;
    }
  }
  return 0;
}
