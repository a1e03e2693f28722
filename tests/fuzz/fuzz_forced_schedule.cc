// Fuzz target: THESEUS_SCHEDULE, the forced schedule names
// (policy/default_selector.h): "ring", or per collective
// "allreduce:my_allreduce;allgather:direct".
//
// The bytes are the variable's value. parseForcedSchedules splits it into
// entries (a collective prefix where one is named, otherwise the entry is a
// name for every collective), forcedFor picks the entry for each collective,
// and then the name is resolved as the engine resolves it: a built-in, or a
// user schedule, possibly by path ("file:x.json", anything with '/'), which
// loads the file (user_schedules.h). For every collective and a few rank
// counts the decision the forced name makes must pass, or fail cleanly, the
// check every table goes through before it ships (decision_check.h).
// Inputs that mention ".so" are skipped, so the fuzzer never dlopens a library
// it happened to name.
#include <string>

#include "fuzz_util.h"
#include "policy/decision_check.h"
#include "policy/default_selector.h"
#include "schedule/user/user_schedules.h"

using namespace theseus;
using schedule::Collective;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (fuzz::tooLong(size, 4 << 10)) return 0;
  const std::string text = fuzz::text(data, size);
  if (text.find(".so") != std::string::npos) return 0;
  const std::vector<policy::ForcedSchedule> entries = policy::parseForcedSchedules(text);
  for (const policy::ForcedSchedule& e : entries) FUZZ_CHECK(!e.schedule.empty() || e.collective >= 0, "an empty entry");
  for (Collective c : schedule::kEveryCollective) {
    const std::string forced = policy::forcedFor(entries, c);
    if (forced.empty()) continue;
    (void)schedule::user::knows(forced);
    for (int n : {1, 3, 4}) {
      if (!policy::scheduleServes(forced, c, n)) continue;
      policy::Decision d;
      d.schedule = forced;
      d.why = "THESEUS_SCHEDULE";
      Status st = policy::checkDecision(d, c, n);
      FUZZ_CHECK(st.isOk() || !st.message().empty(), "a rejection without a message");
    }
  }
  return 0;
}
