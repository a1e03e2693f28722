// What each thread block of a lane runs (cuda_launch.h): its part of each of
// the lane's plans in order, each polled until done; between idle passes the
// leader checks the abort word, a stall clock and whether another block of
// the lane stopped; at the end it writes its block's result. The blocks of a
// lane meet at a barrier between plans (detail::laneBarrier) and divide a
// split plan's average between them. A plan that fits runs from block-local
// memory (LocalMemory), the rest in place. A replayed launch
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

// Block-local memory (shared memory on a GPU) where a block keeps the plan it
// runs. Plan images live in mapped host memory, where every access of the
// leader to run state, steps or connections crosses PCIe (about a microsecond
// each, dozens per piece); a plan that fits is copied in once by the whole
// team (one bulk transfer) and runs there. Its run state starts fresh there,
// so the image itself is never written and a replay finds it as lowered.
// bytes = 0: plans run in place.
struct LocalMemory {
  void* base = nullptr;
  size_t bytes = 0;
};

namespace detail {

inline constexpr uint64_t kQuietNs = 10000;         // idle this long before reading the abort word
inline constexpr uint64_t kSiblingCheckNs = 50000;  // idle this long before asking whether another block stopped

TH_HD inline size_t align16(size_t x) { return (x + 15) & ~size_t{15}; }

// The bytes a plan's local copy takes: header, steps, predecessors, connections, run state, cursors.
TH_HD inline size_t localBytes(const Plan& p) {
  return align16(sizeof(Plan)) + align16(p.nsteps * sizeof(Step)) + align16(p.npreds * sizeof(uint32_t)) +
         align16(p.nconns * sizeof(Conn)) + align16(p.nsteps * sizeof(StepState)) + align16(p.nconns * sizeof(Cursor));
}

// Zeroes `n` bytes (a multiple of 8 at an 8-aligned address) with the team.
TH_HD inline void zeroWords(void* at, size_t n, Span s) {
  auto* w = static_cast<unsigned long long*>(at);
  for (size_t i = s.first; i < n / 8; i += s.stride) w[i] = 0;
}

// The plan `src` copied by the team into `local`, or null when it does not fit.
template <class Team>
TH_HD Plan* localPlan(const Plan& src, LocalMemory local, Team& team) {
  size_t need = 0;
  if (team.leader()) need = localBytes(src);
  need = team.share(need);
  if (need > local.bytes) return nullptr;
  char* base = static_cast<char*>(local.base);
  Plan* lp = reinterpret_cast<Plan*>(base);
  const Span span = team.span();
  copyBytes(base, reinterpret_cast<const char*>(&src), sizeof(Plan), span);
  team.sync();
  // Every thread reads the copied header (its pointers still the image's) before the leader rewires it.
  size_t at = align16(sizeof(Plan));
  auto place = [&](const void* from, size_t bytes) {
    char* to = base + at;
    if (from != nullptr) copyBytes(to, static_cast<const char*>(from), bytes, span);
    else zeroWords(to, align16(bytes), span);  // fresh run state
    at += align16(bytes);
    return to;
  };
  Step* steps = reinterpret_cast<Step*>(place(lp->steps, lp->nsteps * sizeof(Step)));
  uint32_t* preds = reinterpret_cast<uint32_t*>(place(lp->preds, lp->npreds * sizeof(uint32_t)));
  Conn* conns = reinterpret_cast<Conn*>(place(lp->conns, lp->nconns * sizeof(Conn)));
  StepState* state = reinterpret_cast<StepState*>(place(nullptr, lp->nsteps * sizeof(StepState)));
  Cursor* cursors = reinterpret_cast<Cursor*>(place(nullptr, lp->nconns * sizeof(Cursor)));
  team.sync();
  if (team.leader()) {
    lp->steps = steps;
    lp->preds = preds;
    lp->conns = conns;
    lp->state = state;
    lp->cursors = cursors;
    lp->remaining = lp->nsteps;
    lp->directSent = 0;
    lp->failure = Failure{};
  }
  team.sync();
  return lp;
}

// The leader: why the lane must stop now (0: it need not). `idleSince` is
// when this block last moved something (0: it just did).
template <class Wait>
TH_HD uint32_t stopReason(const LaneLaunch& lane, uint32_t block, uint64_t& idleSince, Wait& wait) {
  const uint64_t now = wait.now();
  if (idleSince == 0) idleSince = now;
  // Nothing below can stop a block that has waited less than this, and each of its reads crosses PCIe: a block
  // waiting for its next message polls its FIFOs undisturbed.
  if (now - idleSince < kQuietNs) return 0;
  const uint32_t abort = lane.abortWord != nullptr ? loadAcquire(lane.abortWord) : 0;
  if (abort == 1) return 3;
  if (abort == 2 && now - idleSince > lane.peerFailedIdleNs) return 5;
  if (lane.stallNs != 0 && now - idleSince > lane.stallNs) return 4;
  // The other blocks' results live in mapped host memory (a PCIe read each): asked only once this block has
  // waited a while, so a block waiting for its next message is not slowed down by them.
  if (now - idleSince < kSiblingCheckNs) return 0;
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
TH_HD uint32_t laneBarrier(const LaneLaunch& lane, uint32_t block, uint64_t target, Team& team, Wait& wait) {
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
TH_HD void stopLane(const LaneLaunch& lane, uint32_t block, uint32_t plan, uint32_t state, Team& team) {
  if (team.leader()) {
    lane.results[block].failedPlan = plan;
    storeRelease(&lane.results[block].state, state);
  }
}

}  // namespace detail

template <class Team, class Wait>
TH_HD void runLane(const LaneLaunch& in, uint32_t block, Team& team, Wait& wait, LocalMemory local = {}) {
  // The descriptor lives in mapped host memory: the leader reads it once, the team shares it.
  const LaneLaunch lane = team.share(team.leader() ? in : LaneLaunch{});
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
    Plan& image = lane.plans[i * B + block];
    Plan* run = local.bytes > 0 ? detail::localPlan(image, local, team) : nullptr;
    if (run == nullptr) {  // in place: a replay first puts the image back as lowered
      if (lane.pristine != nullptr) restartPlan(image, lane.pristine[i * B + block], team);
      run = &image;
    }
    Plan& p = *run;
    uint64_t idleSince = 0;
    for (;;) {
      Poll r = pollPlan(p, team);
      if (r == Poll::kDone) {
        if (team.leader()) result.directMessages += p.directSent;
        break;
      }
      if (r == Poll::kFailed) {
        if (team.leader() && run != &image) image.failure = p.failure;  // what the host may report
        return detail::stopLane(lane, block, i, 2u, team);
      }
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
