// Fuzz target: JSON schedules (docs/schedule-format.md), the files
// THESEUS_SCHEDULES loads.
//
// The bytes are a schedule document. parseJsonSchedule reads it strictly
// (every index is bounds-checked where it is written) and then verifies every
// program in every layout it claims (verifier.h: symbolic execution of the
// results plus the rendezvous deadlock simulation) and checks that the
// executor can run it (checkRunnable). Those later stages are where deep bugs
// live. A document that loads is then used as the engine and the tools use it
// (fuzz_schedules.h: generate for every layout and root, verify again,
// executor templates, export and reload). Any error must be a Status with a
// message, never a crash, a sanitizer report or an exception.
#include "fuzz_schedules.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace theseus;
  if (fuzz::tooLong(size, 16 << 10)) return 0;
  auto s = schedule::user::parseJsonSchedule(fuzz::text(data, size), "fuzz.json");
  if (!s.isOk()) {
    FUZZ_CHECK(!s.status().message().empty(), "an error without a message");
    return 0;
  }
  fuzz::exerciseSchedule(*s.value());
  return 0;
}
