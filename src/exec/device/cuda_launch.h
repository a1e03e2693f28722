// The boundary between the CUDA executor's host code and its kernel
// (cuda_kernel.cu): what one thread block runs and how it reports back.
// Plain data in memory the GPU can address (pinned, mapped host memory).
#pragma once

#include <cstdint>

#include "exec/device/dev_plan.h"
#include "nccl.h"

namespace theseus::exec::dev {

// What a lane's block writes when it stops. A replayed (captured) launch
// keeps a failure: later replays of the lane do nothing until the host has
// reported it (the FIFOs' state after a failure is unknown).
struct LaneResult {
  uint32_t state = 0;       // 0 running, 1 done, 2 failed, 3 aborted, 4 stalled, 5 a peer failed
  uint32_t failedPlan = 0;  // index of the plan that failed
  uint32_t directMessages = 0;  // messages of its plans that peers read in place (zero-copy)
};

// One thread block's work: a lane of plans run in order.
struct LaneLaunch {
  Plan* plans = nullptr;
  // Replayable launches (captured into a CUDA graph): the plans' headers as
  // lowered, from which every replay restarts them (restartPlan); null for a
  // launch that runs once.
  const Plan* pristine = nullptr;
  uint32_t nplans = 0;
  const uint32_t* abortWord = nullptr;  // AbortFlag's mirror: 1 stop (ncclCommAbort), 2 a peer failed
  uint64_t peerFailedIdleNs = 0;        // with 2: stop once idle this long (state 5)
  uint64_t stallNs = 0;                 // no progress for this long: stop with state 4 (0: never)
  LaneResult* result = nullptr;
};

// Launches one block of `threads` threads per lane on `stream`; returns the
// cudaError_t of the launch as an int (0: queued).
int launchLanes(LaneLaunch* lanes, uint32_t nlanes, uint32_t threads, cudaStream_t stream);

}  // namespace theseus::exec::dev
