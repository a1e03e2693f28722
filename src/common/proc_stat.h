// What /proc says about a process on this host.
#pragma once

#include <cstdint>

namespace theseus {

// State letter ('R', 'S', 'D', 'T' stopped, 't' traced, 'Z' zombie, ...) and start time (clock
// ticks since boot) of process `pid`; false when it does not exist (or is not visible here).
bool readProcStat(int pid, char* state, uint64_t* startTime);

}  // namespace theseus
