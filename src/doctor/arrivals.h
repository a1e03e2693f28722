// Compute stragglers from the flight-recorder dumps' per-collective times.
//
// A rank's *idle time* before collective k is the time from the end of its
// previous collective to the start of k: what it did outside the library (its
// compute). Ranks that run the same program have about the same idle time; a
// rank that arrives late has more, and the others wait inside k for it. The
// comparison uses each rank's own clock only (an interval on one clock), so it
// holds across hosts whose clocks are not aligned.
//
// For every collective k that every dumped rank recorded with its previous
// one: late_k(r) = idle_k(r) - the median idle_k of the other ranks, and k is
// late for r when isLate(late_k(r), the median duration of k) holds
// (performance.h: at least 1 ms and a fifth of the collective). A rank is a
// compute straggler when it was late in at least a quarter of those
// collectives (and at least 3), or in a run of at least 5 in a row (a rank
// that straggled for a while). The finding says how late (median over its
// late collectives), which collectives, and whether it arrives on time again
// since (its last 5 or more collectives were not late: it recovered).
#pragma once

#include <vector>

#include "doctor/dump.h"
#include "doctor/performance.h"
#include "doctor/verdict.h"

namespace theseus::doctor {

// `ranks`: the dumps of one communicator, sorted by rank. Returns whether the
// dumps had enough collectives to judge (at least 5 complete ones).
bool findLateArrivals(const std::vector<const RankDump*>& ranks, const Thresholds& t, std::vector<Finding>* out);

}  // namespace theseus::doctor
