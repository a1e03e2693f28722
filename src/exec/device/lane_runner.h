// What one lane's thread block runs (cuda_launch.h): its plans in order, each
// polled until done; between idle passes the leader checks the abort word and
// a stall clock; at the end it writes the lane's result. A replayed launch
// (captured into a CUDA graph) first checks that no earlier replay failed —
// a failure stays until the host has reported it, and the FIFOs' state after
// one is unknown — and restarts each plan before running it (restartPlan).
//
// One source for the CUDA kernel (cuda_kernel.cu: a thread block, the
// %globaltimer clock, __nanosleep between passes) and the host launcher of the
// CUDA test double (tests/cuda_double: a host thread per block, the steady
// clock, a yield), so the kernel's control flow runs in CI too. `Wait`
// provides now() in nanoseconds and pause().
#pragma once

#include "exec/device/cuda_launch.h"
#include "exec/device/interpreter.h"

namespace theseus::exec::dev {

template <class Team, class Wait>
TH_HD void runLane(LaneLaunch& lane, Team& team, Wait& wait) {
  if (lane.pristine != nullptr) {
    uint32_t before = 0;
    if (team.leader()) before = loadAcquire(&lane.result->state);
    before = team.share(before);
    if (before >= 2) return;
    if (team.leader()) storeRelease(&lane.result->state, 0u);
  }
  for (uint32_t i = 0; i < lane.nplans; ++i) {
    Plan& p = lane.plans[i];
    if (lane.pristine != nullptr) restartPlan(p, lane.pristine[i], team);
    uint64_t idleSince = 0;
    for (;;) {
      Poll r = pollPlan(p, team);
      if (r == Poll::kDone) {
        if (team.leader()) lane.result->directMessages += p.directSent;
        break;
      }
      if (r == Poll::kFailed) {
        if (team.leader()) {
          lane.result->failedPlan = i;
          storeRelease(&lane.result->state, 2u);
        }
        return;
      }
      if (r == Poll::kProgress) {
        idleSince = 0;
        continue;
      }
      uint32_t stop = 0;
      if (team.leader()) {
        uint64_t now = wait.now();
        if (idleSince == 0) idleSince = now;
        const uint32_t abort = lane.abortWord != nullptr ? loadAcquire(lane.abortWord) : 0;
        if (abort == 1) stop = 3;
        else if (abort == 2 && now - idleSince > lane.peerFailedIdleNs) stop = 5;
        else if (lane.stallNs != 0 && now - idleSince > lane.stallNs) stop = 4;
      }
      stop = team.share(stop);
      if (stop != 0) {
        if (team.leader()) {
          lane.result->failedPlan = i;
          storeRelease(&lane.result->state, stop);
        }
        return;
      }
      wait.pause();
    }
  }
  if (team.leader()) storeRelease(&lane.result->state, 1u);
}

}  // namespace theseus::exec::dev
