// What each thread block of a lane runs (cuda_launch.h): its part of each of
// the lane's plans in order, each polled until done; between idle passes the
// leader checks the abort word, a stall clock and whether another block of
// the lane stopped; at the end it writes its block's result. The blocks of a
// lane meet at a barrier between plans (detail::laneBarrier) and divide a
// split plan's average between them. A replayed launch
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

namespace detail {

// The leader: why the lane must stop now (0: it need not). `idleSince` is
// when this block last moved something (0: it just did).
template <class Wait>
TH_HD uint32_t stopReason(const LaneLaunch& lane, uint32_t block, uint64_t& idleSince, Wait& wait) {
  const uint64_t now = wait.now();
  if (idleSince == 0) idleSince = now;
  const uint32_t abort = lane.abortWord != nullptr ? loadAcquire(lane.abortWord) : 0;
  if (abort == 1) return 3;
  if (abort == 2 && now - idleSince > lane.peerFailedIdleNs) return 5;
  if (lane.stallNs != 0 && now - idleSince > lane.stallNs) return 4;
  for (uint32_t b = 0; b < lane.blocks; ++b)
    if (b != block && loadAcquire(&lane.results[b].state) >= 2) return kSiblingStopped;
  return 0;
}

// The lane barrier: this block's count becomes `target` (release), then the
// leader waits until every block's count reached it (acquire), so whatever
// any block of the lane wrote before arriving — its threads' writes happen
// before its leader's release through the team's barrier — is visible to
// every thread of this block after. Counts only grow (no read-modify-write:
// the words may live in mapped host memory, where a GPU's atomics are not
// guaranteed), and a replayed launch counts on from where the last replay
// left them. Returns the stop reason (0: all arrived).
template <class Team, class Wait>
TH_HD uint32_t laneBarrier(LaneLaunch& lane, uint32_t block, uint64_t target, Team& team, Wait& wait) {
  uint32_t stop = 0;
  if (team.leader()) {
    storeRelease(&lane.arrivals[block].count, target);
    uint64_t idleSince = 0;
    for (;;) {
      uint32_t b = 0;
      while (b < lane.blocks && loadAcquire(&lane.arrivals[b].count) >= target) ++b;
      if (b == lane.blocks) break;
      if ((stop = stopReason(lane, block, idleSince, wait)) != 0) break;
      wait.pause();
    }
  }
  return team.share(stop);
}

template <class Team>
TH_HD void stopLane(LaneLaunch& lane, uint32_t block, uint32_t plan, uint32_t state, Team& team) {
  if (team.leader()) {
    lane.results[block].failedPlan = plan;
    storeRelease(&lane.results[block].state, state);
  }
}

}  // namespace detail

template <class Team, class Wait>
TH_HD void runLane(LaneLaunch& lane, uint32_t block, Team& team, Wait& wait) {
  LaneResult& result = lane.results[block];
  const uint32_t B = lane.blocks;
  if (lane.pristine != nullptr) {
    uint32_t before = 0;
    if (team.leader())
      for (uint32_t b = 0; b < B; ++b) before = before < 2 ? loadAcquire(&lane.results[b].state) : before;
    before = team.share(before);
    if (before >= 2) return;
    if (team.leader()) storeRelease(&result.state, 0u);
  }
  uint64_t passed = 0;  // lane barriers passed (counted on from a replay's last)
  if (B > 1 && team.leader()) passed = loadAcquire(&lane.arrivals[block].count);
  for (uint32_t i = 0; i < lane.nplans; ++i) {
    Plan& p = lane.plans[i * B + block];
    if (lane.pristine != nullptr) restartPlan(p, lane.pristine[i * B + block], team);
    uint64_t idleSince = 0;
    for (;;) {
      Poll r = pollPlan(p, team);
      if (r == Poll::kDone) {
        if (team.leader()) result.directMessages += p.directSent;
        break;
      }
      if (r == Poll::kFailed) return detail::stopLane(lane, block, i, 2u, team);
      if (r == Poll::kProgress) {
        idleSince = 0;
        continue;
      }
      uint32_t stop = 0;
      if (team.leader()) stop = detail::stopReason(lane, block, idleSince, wait);
      stop = team.share(stop);
      if (stop != 0) return detail::stopLane(lane, block, i, stop, team);
      wait.pause();
    }
    if (B == 1) continue;
    // Every block finished plan i before any divides it or starts plan i + 1: plan i + 1 may read what
    // other blocks wrote, and use FIFOs other blocks used in plan i (whose messages must not interleave).
    const LaneDivide* div = lane.divides != nullptr && lane.divides[i].dst != nullptr ? &lane.divides[i] : nullptr;
    const bool last = i + 1 == lane.nplans;
    if (div == nullptr && last) break;
    if (uint32_t stop = detail::laneBarrier(lane, block, ++passed, team, wait); stop != 0)
      return detail::stopLane(lane, block, i, stop, team);
    if (div == nullptr) continue;
    const size_t begin = partStart(div->elems, B, block), end = partStart(div->elems, B, block + 1);
    divideElems(div->red, div->dst + begin * p.elemBytes, end - begin, team.span());
    team.sync();
    if (last) break;
    if (uint32_t stop = detail::laneBarrier(lane, block, ++passed, team, wait); stop != 0)
      return detail::stopLane(lane, block, i, stop, team);
  }
  if (team.leader()) storeRelease(&result.state, 1u);
}

}  // namespace theseus::exec::dev
