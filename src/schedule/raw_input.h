// Raw-input tracking of one rank's program.
//
// A PreMulSum (and a floating-point average) multiplies every rank's *input*
// by a scalar exactly once, whatever the schedule. The executor does it when a
// step first reads this rank's raw input: a step whose source is still raw
// input scales it on the way (scaleSrc); a local reduce whose accumulator is
// still raw input scales that too (scaleDst). So for every step we need to
// know whether its source (and a reduce's destination) is raw input — never
// written by an earlier step of the rank — or already partial results.
//
// The rank's chunk space is physical: in place, input and output are one
// address space (schedule::physicalRange), so a step that writes the output
// overwrites the input it aliases. A step that reads a range that is partly
// raw and partly written cannot be scaled exactly once; such programs are
// rejected (split the step) — for user schedules when they load.
#pragma once

#include <vector>

#include "common/status.h"
#include "schedule/ir.h"

namespace theseus::schedule {

struct RawInputUse {
  bool srcIsRawInput = false;  // the step's source is this rank's untouched input
  bool dstIsRawInput = false;  // a kReduce whose accumulator is still untouched input (in place)
};

// One entry per step of `rank` (all false for collectives that do not reduce).
// Error: a step reads a range that is partly raw input and partly partial results.
Result<std::vector<RawInputUse>> rawInputUses(const Program& program, int rank);

}  // namespace theseus::schedule
