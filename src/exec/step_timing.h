// When one step of a traced plan (THESEUS_TRACE_STEPS, telemetry/trace_writer.h)
// first moved data and when it finished (steady clock, ns; 0 = not yet). The
// progress engine fills it only for plans whose Plan::stepTimes is set.
#pragma once

#include <cstdint>

namespace theseus::exec {

struct StepTiming {
  uint64_t firstNs = 0;
  uint64_t endNs = 0;
};

}  // namespace theseus::exec
