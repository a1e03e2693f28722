// The schedule verifier: executes a program symbolically and rejects it, with
// an error naming the rank, step index, op and problem, when it
//   * is malformed (checkStructure in analysis.h: peers, channels, ranges,
//     buffers, scratch, geometry of two-operand ops, deps);
//   * has a send without a matching receive or the reverse (messages match in
//     order per (sender, receiver, channel)), or a matched pair whose sizes
//     differ (same chunk count and same start sub-chunk are required);
//   * reads a chunk nobody wrote, counts a contribution twice, or ends with an
//     output chunk that does not hold exactly what the collective defines;
//   * can deadlock under rendezvous with the executor's concurrency
//     (analysis.h): then it reports a wait-for cycle and the blocked steps.
//
// Values are sets of contributions: (rank s, input chunk j) means "chunk j of
// rank s's input". A rank's input chunk j starts as {(rank, j)}; output and
// scratch start empty (unwritten). Receives and copies move sets; reductions
// take disjoint unions (a shared element is a double count). At the end every
// output chunk the collective defines must hold exactly:
//   allreduce      output chunk j on every rank   = {(s, j) : every s}
//   reduce         the same, on the root only
//   broadcast      output chunk j on every rank   = {(root, j)}
//   allgather      output block b on every rank   = rank b's input
//   reducescatter  output chunk j on rank r       = {(s, r*K + j) : every s}  (K chunks per block)
//   alltoall       output block s on rank r       = rank s's input block r
//   gather         output block b on the root     = rank b's input
//   scatter        output on rank r               = the root's input block r
// In-place programs are checked through the aliasing of ir.h inPlaceAlias.
#pragma once

#include "common/status.h"
#include "schedule/ir.h"

namespace theseus::schedule {

struct VerifyOptions {
  // false: skip the final output check (the rest still runs), e.g. for
  // programs that are one phase of a larger schedule.
  bool checkResult = true;
};

// Errors are ncclInvalidArgument and start with programLabel() ("schedule ring
// allreduce nranks=4: rank 2 step 5 (recv from rank 1, channel 0): ...").
Status verifyProgram(const Program& p, const VerifyOptions& options = {});

}  // namespace theseus::schedule
