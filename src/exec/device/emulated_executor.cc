// The emulated device executor: the device interpreter on the calling thread,
// one SoloTeam per part of a lane's plan (dev_split.h: the thread blocks of
// the CUDA executor), polled round-robin so one thread drives every
// communicator of a group (as the GPU runs their blocks side by side). When no
// lane moved for a while it yields the core, and it checks the abort flag, the
// lanes' health and the stall timeout like the host progress engine — a failed
// peer ends a plan at once only while the plan still waits on it.
#include <sched.h>

#include <vector>

#include "common/log.h"
#include "exec/device/dev_lower.h"
#include "exec/device/dev_split.h"
#include "exec/device/device_executor.h"
#include "exec/device/interpreter.h"
#include "exec/progress.h"

namespace theseus::exec {
namespace {

struct LaneState {
  size_t current = 0;
  uint64_t startNs = 0;
  std::vector<uint8_t> partDone;  // per part of the current plan (dev_split.h)
};

class EmulatedDeviceExecutor final : public Executor {
 public:
  const char* name() const override { return "device (emulated)"; }
  bool serves(device::MemoryKindMask kinds) const override { return (kinds & ~device::kHostAccessibleKinds) == 0; }
  Status run(std::vector<Lane>& lanes, const ExecOptions& options) override;
};

// Lowers and splits lane `l`'s current plan (skipping empty ones, which finish at once).
Status beginPlan(Lane& lane, LaneState& st, dev::SplitPlan& sp) {
  while (st.current < lane.plans.size()) {
    const Plan& p = *lane.plans[st.current];
    TH_CHECK(dev::lowerForDevice(p, &sp.whole));
    dev::splitPlan(sp, dev::maxBlocksPerLane(), p.shapeId, p.bytes);
    st.partDone.assign(sp.count, 0);
    st.startNs = nowNs();
    if (sp.whole.plan.nsteps > 0) return Status::ok();
    if (lane.observer) lane.observer->planDone(*lane.plans[st.current], 0, st.startNs);
    ++st.current;
  }
  return Status::ok();
}

// One pass over the unfinished parts of a lane's current plan, as the GPU's
// blocks would run them side by side. Sets *done once every part finished.
Status pollParts(const Plan& plan, dev::SplitPlan& sp, LaneState& st, dev::SoloTeam& team, bool* progressed,
                 bool* done) {
  uint32_t finished = 0;
  for (uint32_t b = 0; b < sp.count; ++b) {
    if (st.partDone[b]) {
      ++finished;
      continue;
    }
    dev::Plan& d = sp.part(b).plan;
    dev::Poll r = dev::pollPlan(d, team);
    if (r == dev::Poll::kFailed) return dev::failureStatus(plan, d);
    if (r == dev::Poll::kIdle) continue;
    *progressed = true;
    if (r == dev::Poll::kDone) {
      st.partDone[b] = 1;
      ++finished;
    }
  }
  *done = finished == sp.count;
  return Status::ok();
}

Status EmulatedDeviceExecutor::run(std::vector<Lane>& lanes, const ExecOptions& options) {
  TH_CHECK(prepareLanes(lanes, device::kHostAccessibleKinds, name()));
  const int64_t stallMs = options.stallTimeoutMs != 0 ? options.stallTimeoutMs : configuredStallTimeoutMs();
  thread_local std::vector<dev::SplitPlan> lowered;
  thread_local std::vector<LaneState> states;
  lowered.resize(lanes.size());
  states.assign(lanes.size(), LaneState{});
  // Every plan is lowered (its FIFOs resolved) before anything moves: a plan that cannot run fails the group whole.
  for (size_t l = 0; l < lanes.size(); ++l)
    for (Plan* p : lanes[l].plans) TH_CHECK(dev::lowerForDevice(*p, &lowered[l].whole));
  for (size_t l = 0; l < lanes.size(); ++l) TH_CHECK(beginPlan(lanes[l], states[l], lowered[l]));

  dev::SoloTeam team;
  thread_local std::vector<int> waitedPeers, partPeers;
  uint64_t lastProgressNs = nowNs(), lastHealthNs = 0;
  uint32_t idle = 0;
  for (;;) {
    bool progressed = false;
    size_t live = 0;
    for (size_t l = 0; l < lanes.size(); ++l) {
      Lane& lane = lanes[l];
      LaneState& st = states[l];
      if (st.current >= lane.plans.size()) continue;
      ++live;
      bool done = false;
      TH_CHECK(pollParts(*lane.plans[st.current], lowered[l], st, team, &progressed, &done));
      if (!done) continue;
      // A split plan's average, divided once all its parts finished (the lane runner's barrier).
      const dev::Plan& w = lowered[l].whole.plan;
      if (lowered[l].count > 1 && w.divideDst != nullptr) dev::divideElems(w.red, w.divideDst, w.divideElems);
      if (lane.observer) {
        uint64_t end = nowNs();
        lane.observer->planDone(*lane.plans[st.current], end - st.startNs, end);
      }
      ++st.current;
      TH_CHECK(beginPlan(lane, st, lowered[l]));
    }
    if (live == 0) return Status::ok();
    if (progressed) {
      idle = 0;
      continue;
    }
    if (++idle < 256) continue;
    sched_yield();  // the emulated peers are other processes: let them run
    uint64_t now = nowNs();
    if (idle == 256) lastProgressNs = now;
    if (now - lastHealthNs < 1000000) continue;
    lastHealthNs = now;
    for (size_t l = 0; l < lanes.size(); ++l) {
      Lane& lane = lanes[l];
      LaneState& st = states[l];
      if (st.current >= lane.plans.size()) continue;
      Plan& p = *lane.plans[st.current];
      if (p.abort != nullptr && p.abort->isSet())
        return remoteError("%s: rank %d: the communicator was aborted", p.describe().c_str(), p.rank);
      if (lane.health) {
        // As the host engine: a failed peer ends the wait at once only while the plan still waits
        // on it (the peers of its unfinished steps), otherwise after a second without progress.
        waitedPeers.clear();
        for (uint32_t b = 0; b < lowered[l].count; ++b) {
          const dev::Plan& d = lowered[l].part(b).plan;
          unfinishedStepPeers(d.steps, d.state, d.nsteps, d.rounds, &partPeers);
          waitedPeers.insert(waitedPeers.end(), partPeers.begin(), partPeers.end());
        }
        if (Status h = lane.health(LaneWait{&waitedPeers, now - lastProgressNs > 1000000000}); !h.isOk()) {
          // The peer may have finished its part and died after the last pass: it counts only
          // if one more pass over the lanes moves nothing.
          bool moved = false;
          for (size_t k = 0; k < lanes.size() && !moved; ++k) {
            if (states[k].current >= lanes[k].plans.size()) continue;
            bool done = false;
            TH_CHECK(pollParts(*lanes[k].plans[states[k].current], lowered[k], states[k], team, &moved, &done));
          }
          if (!moved) return h.withContext(p.describe());
          idle = 0;
          break;
        }
      }
      if (stallMs > 0 && now - lastProgressNs > static_cast<uint64_t>(stallMs) * 1000000)
        return remoteError("%s: rank %d made no progress for %lld ms in the device executor", p.describe().c_str(),
                           p.rank, static_cast<long long>(stallMs));
    }
  }
}

}  // namespace

Executor& emulatedDeviceExecutor() {
  static EmulatedDeviceExecutor executor;
  return executor;
}

}  // namespace theseus::exec
