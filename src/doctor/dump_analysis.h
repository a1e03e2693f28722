// theseus-doctor's reasoning over the flight-recorder dumps of a job's ranks
// (doctor/dump.h), one per rank of a communicator; several communicators: the
// one with the most dumps is analysed, the others are noted.
//
// Hangs and divergence first (a job that stopped has one root cause and many
// victims; these findings name the cause):
//   * mismatch      - the first collective number at which ranks ran different
//                     operations (collective, count or datatype), or ran it
//                     over different FIFOs (buffers of another kind: pageable
//                     host memory where the peers passed device memory on a
//                     CUDA-executor communicator); the ranks of the minority
//                     (all of them when more than two variants);
//   * died          - a rank without a dump that the survivors' errors say
//                     failed first or exited (telemetry: comm/root_cause.h);
//   * never_arrived - ranks whose last collective is older than the newest one
//                     the others started and wait in (not reported when a rank
//                     died: the survivors stopped wherever the failure found them);
//   * missing_dump  - ranks of the communicator without a dump;
//   * waits_for     - the end of a wait chain: a rank stuck operations wait for
//                     ("waits for data from rank 1") that is not stuck itself.
// Then slowness (doctor/performance.h) over the dumps' measurements
// (dump_measurements.h): slow hosts, communication stragglers, slow links,
// and compute stragglers from the per-collective arrival times
// (doctor/arrivals.h).
#pragma once

#include <vector>

#include "doctor/dump.h"
#include "doctor/performance.h"
#include "doctor/verdict.h"

namespace theseus::doctor {

struct Diagnosis {
  Verdict verdict;
  Placement placement;  // of the communicator analysed
};

// `dumps`: parsed dumps (any order). Findings in the order above.
Diagnosis diagnose(const std::vector<RankDump>& dumps, const Thresholds& t = {});

}  // namespace theseus::doctor
