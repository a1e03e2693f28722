// Splitting a device plan into parts that thread blocks run side by side.
//
// One block per plan moves what one SM moves (about 1% of an H200's copy
// bandwidth, docs/cuda-executor.md), so a large operation's plan is split the
// way NCCL splits work into channels: into parts that share nothing a block
// would have to coordinate with another block.
//
// What must stay together: a step and its predecessors (a round starts only
// when its predecessors finished it), and the steps of one connection (its
// messages go in (round, position) order, which the connection's cursor in
// one block's run state enforces). Everything else is independent by
// construction: the schedule analysis turns every memory hazard between two
// steps (read after write, write after read, write after write, at chunk
// granularity) into a predecessor edge (schedule/analysis.h), so steps of
// different parts never touch the same memory. The connected components of
// "is a predecessor of" and "shares a connection with" are therefore the
// finest split; the channels of built-in schedules are such components.
//
// Components go to at most `maxParts` parts, heaviest first onto the lightest
// part (the bytes a step's pieces move), so a schedule with more channels than
// blocks still balances. While blocks are left over, a component that is one
// large local step (a copy or reduction nothing waits on and that waits on
// nothing: one rank's whole program, an out-of-place allgather's own block) is
// cut into copies that each move a share of every piece's elements (Step::part),
// at least 1 MiB each. A plan of one unit is not split. Parts keep
// the steps' program indices (errors name them) and the plan's geometry, tag
// and reduction; each has its own steps, predecessor lists and connections,
// renumbered, and fresh run state. A split plan's average is not divided by
// its parts (no part alone knows when the whole result is there): the lane
// runner divides after every block finished the plan (lane_runner.h).
//
// Storage is reused from call to call (a warm enqueue allocates nothing), and
// so is the analysis: plans of one shape (one rank template: the same steps,
// predecessors and connections, other addresses) split the same way, so a
// plan whose shape, size and block count equal the last one's only has its
// parts rebuilt from its own steps.
#pragma once

#include <cstdint>
#include <vector>

#include "exec/device/dev_lower.h"

namespace theseus::exec::dev {

// A unit of work assigned to a part: a component, or one copy of a split local step.
struct SplitUnit {
  uint32_t copy = 0;    // of `copies` (1: the whole component)
  uint32_t copies = 1;
  uint32_t part = 0;
  uint64_t weight = 0;
};

struct SplitPlan {
  LoweredPlan whole;               // lowerForDevice's output
  std::vector<LoweredPlan> parts;  // the first `count` are the parts when count > 1
  uint32_t count = 1;
  // Working storage (kept for reuse).
  std::vector<uint32_t> root, size, index, firstUnit;
  std::vector<uint64_t> weight, load;
  std::vector<SplitUnit> units;
  // The shape the analysis above is for (0: none), with its size and block count, and its result.
  uint64_t shape = 0, shapeBytes = 0;
  uint32_t shapeMaxParts = 0, shapeCount = 1;

  // Part `b` of the plan (the whole plan when it is not split).
  const LoweredPlan& part(uint32_t b) const { return count > 1 ? parts[b] : whole; }
  LoweredPlan& part(uint32_t b) { return count > 1 ? parts[b] : whole; }
};

// Splits `sp.whole` into at most `maxParts` parts (sets sp.count; 1: not split). `shape` (exec::Plan::
// shapeId, 0: unknown) and `bytes` (the plan's size): an equal shape, size and maxParts reuse the
// last analysis of `sp`.
void splitPlan(SplitPlan& sp, uint32_t maxParts, uint64_t shape = 0, uint64_t bytes = 0);

// The part of a plan for a block that has none of its steps: done at once.
Plan emptyPart(const Plan& whole);

// THESEUS_DEVICE_BLOCKS: the most thread blocks (parts) one lane's plan is split into.
uint32_t maxBlocksPerLane();

}  // namespace theseus::exec::dev
