// The boundary between the CUDA executor's host code and its kernel
// (cuda_kernel.cu): what a lane's thread blocks run and how they report back.
// Plain data in memory the GPU can address (pinned, mapped host memory).
#pragma once

#include <cstdint>

#include "exec/device/dev_plan.h"
#include "nccl.h"

namespace theseus::exec::dev {

// What each of a lane's blocks writes when it stops. A replayed (captured)
// launch keeps a failure: later replays of the lane do nothing until the host
// has reported it (the FIFOs' state after a failure is unknown). The host
// reads a lane's outcome from all of its blocks' results (laneOutcome).
struct LaneResult {
  uint32_t state = 0;       // 0 running, 1 done, 2 failed, 3 aborted, 4 stalled, 5 a peer failed,
                            // 6 stopped because another block of the lane stopped
  uint32_t failedPlan = 0;  // index of the plan that failed
  uint32_t directMessages = 0;  // messages of its plans that peers read in place (zero-copy)
};
inline constexpr uint32_t kSiblingStopped = 6;

// A block's count of lane barriers passed, on a line of its own.
struct alignas(64) Arrival {
  uint64_t count = 0;
};

// The average of a plan split across blocks: divided by the lane once every
// block finished the plan (each block its share of the elements).
struct LaneDivide {
  char* dst = nullptr;  // null: nothing to divide
  uint64_t elems = 0;
  Reduction red;
};

// A lane's work: its plans run in order by `blocks` thread blocks. Plan i's
// part for block b is plans[i * blocks + b] (dev_split.h); a block with no
// part of a plan has an empty one. With several blocks, the blocks meet at a
// barrier after each plan (a later plan may read what another block of an
// earlier one wrote) and around a split plan's division.
struct LaneLaunch {
  Plan* plans = nullptr;
  // Replayable launches (captured into a CUDA graph): the plans' headers as
  // lowered, from which every replay restarts them (restartPlan); null for a
  // launch that runs once.
  const Plan* pristine = nullptr;
  uint32_t nplans = 0;
  uint32_t blocks = 1;
  uint32_t firstBlock = 0;  // this lane's first block in the launch's grid
  const uint32_t* abortWord = nullptr;  // AbortFlag's mirror: 1 stop (ncclCommAbort), 2 a peer failed
  uint64_t peerFailedIdleNs = 0;        // with 2: stop once idle this long (state 5)
  uint64_t stallNs = 0;                 // no progress for this long: stop with state 4 (0: never)
  LaneResult* results = nullptr;        // one per block
  Arrival* arrivals = nullptr;          // one per block (blocks > 1); zero when first launched
  const LaneDivide* divides = nullptr;  // one per plan (blocks > 1), else null
};

// What the host makes of a lane's block results: 1 when every block finished,
// a failure (2..5) when one block had one, kSiblingStopped alone should not
// happen, 0 while blocks still run. `failedPlan` and `directMessages` likewise.
struct LaneOutcome {
  uint32_t state = 0;
  uint32_t failedPlan = 0;
  uint32_t directMessages = 0;
};
inline LaneOutcome laneOutcome(const LaneResult* results, uint32_t blocks) {
  LaneOutcome o;
  uint32_t done = 0;
  for (uint32_t b = 0; b < blocks; ++b) {
    const uint32_t st = loadAcquire(&results[b].state);
    o.directMessages += results[b].directMessages;
    if (st == 1) ++done;
    if (st >= 2 && (o.state < 2 || (o.state == kSiblingStopped && st != kSiblingStopped))) {
      o.state = st;
      o.failedPlan = results[b].failedPlan;
    }
  }
  if (o.state == 0 && done == blocks) o.state = 1;
  return o;
}

// Block-local memory per block for the plan it runs (lane_runner.h LocalMemory): dynamic shared memory on a GPU.
inline constexpr uint32_t kLocalPlanBytes = 32 << 10;

// How many thread blocks of `threads` threads of the interpreter kernel (with its
// kLocalPlanBytes of shared memory) the current device holds at once: its SMs times
// the blocks one SM holds; 0 when that cannot be told. The blocks that wait for each
// other — a lane's blocks meet at barriers, and a rank's kernel waits for its peers'
// on the same GPU — must all be resident at once, or the waiting ones hold the SMs
// the awaited ones need (the executor caps a lane's blocks by it, cuda_executor.cu).
uint32_t residentBlocks(uint32_t threads);

// Launches every lane's blocks (`nblocks` in all, lanes[l].firstBlock
// numbering them) of `threads` threads on `stream`; returns the cudaError_t
// of the launch as an int (0: queued).
int launchLanes(LaneLaunch* lanes, uint32_t nlanes, uint32_t nblocks, uint32_t threads, cudaStream_t stream);

}  // namespace theseus::exec::dev
