// The performance measurements of a job from its ranks' dumps
// (doctor/measurements.h):
//   * "now": every dump's attribute snapshot merged into one cluster view, the
//     way the leader merges them (attrs/cluster_view.h: the longest wait, the
//     smaller bottleneck fraction of a link's two ends, ...), as if every
//     snapshot had arrived when its dump was written;
//   * "window": each link's transport counters since the connections opened:
//     throughput = bytes sent over the time the sender was busy with them, and
//     the bottleneck fraction = the smaller of the sender's busy share and the
//     receiver's waiting share of its elapsed time (created_ns .. now_ns).
// Links to or from a rank without a dump are left out (a dead rank's peers
// had data queued for it that never left: that is not a slow link), and so are
// window values of links that carried less than kMinWindowBytes.
#pragma once

#include <vector>

#include "doctor/dump.h"
#include "doctor/measurements.h"

namespace theseus::doctor {

constexpr uint64_t kMinWindowBytes = 1 << 20;

// `ranks`: the dumps of one communicator, sorted by rank.
Measurements measurementsFromDumps(const std::vector<const RankDump*>& ranks, const Placement& placement);

}  // namespace theseus::doctor
