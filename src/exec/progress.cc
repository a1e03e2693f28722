#include "exec/progress.h"

#include <sched.h>

#include "common/knobs.h"
#include "common/log.h"
#include "common/tls.h"
#include "exec/step_ops.h"
#include "transport/transport_manager.h"

namespace theseus::exec {
namespace {

constexpr uint64_t kLongYieldNs = 1000000;  // 1 ms: the core went to someone else for a time slice

const IntKnob kStallTimeoutMs("THESEUS_STALL_TIMEOUT_MS", 600000,
                              "An operation that makes no progress for this long fails with an error naming the "
                              "peer and step it waits for (0 or negative: never)");
const IntKnob kSpinIters("THESEUS_SPIN_ITERS", 2000,
                         "Idle passes the executor spins before it sleeps on the transports' doorbell (at most 16 when "
                         "peers are reached over TCP and this machine's ranks outnumber its cores)");
const IntKnob kSleepUs("THESEUS_IDLE_SLEEP_US", 1000, "Longest single sleep of an idle executor, in microseconds");

constexpr uint32_t kMaxPiecesPerVisit = 16;
constexpr uint32_t kMaxPendingRounds = 64;  // direct rounds awaiting release, per step

// Runtime state of one step.
struct StepRun {
  uint32_t round = 0;            // round being worked on
  uint32_t piece = 0;            // next piece of that round
  uint32_t received = 0;         // pieces of the round whose receive half is done
  bool pieceReceived = false;    // two-phase fused piece: receive half done, send pending
  bool inAdvanced = false;       // the receive cursor moved on for this round
  uint32_t finishedRounds = 0;   // rounds whose memory effects are final (direct reads released)
  uint64_t roundTicket = 0;      // last direct ticket of the current round (0: none)
  uint32_t pendHead = 0, pendCount = 0;
  uint32_t pendRound[kMaxPendingRounds];  // only [pendHead, pendHead + pendCount) is meaningful
  uint64_t pendTicket[kMaxPendingRounds];
  // Fresh state for a new plan; the pending arrays are left as they are (about
  // 800 bytes a step that a small collective would otherwise clear every time).
  void reset() {
    round = piece = received = 0;
    pieceReceived = inAdvanced = false;
    finishedRounds = 0;
    roundTicket = 0;
    pendHead = pendCount = 0;
  }
};

struct Cursor {
  uint32_t round = 0;
  uint32_t pos = 0;
};

struct LaneRun {
  Lane* lane = nullptr;
  const Primitives* prims = nullptr;
  size_t current = 0;
  std::vector<StepRun> steps;
  std::vector<Cursor> cursors;
  uint32_t remaining = 0;   // steps not finished
  uint64_t startNs = 0;
  bool finished() const { return current >= lane->plans.size(); }
  Plan& plan() { return *lane->plans[current]; }
};

inline void cpuRelax() { __builtin_ia32_pause(); }

inline bool myTurn(const Cursor& c, uint32_t round, uint32_t pos) { return c.round == round && c.pos == pos; }

inline void advanceCursor(const PlanConn& conn, Cursor& c) {
  if (++c.pos == conn.nsteps) {
    c.pos = 0;
    ++c.round;
  }
}

// A connection whose slots the primitives cannot touch (device FIFOs for the host executor).
inline bool accessible(const Primitives& prims, device::MemoryKind kind) {
  return (prims.accessible & device::maskOf(kind)) != 0;
}
Status accessError(const Primitives& prims, const Plan& p, device::MemoryKind kind, const char* what, int peer) {
  return internalError("%s: %s %d keeps its slots in %s memory, which the %s executor cannot access",
                       p.describe().c_str(), what, peer, device::memoryKindName(kind), prims.name);
}

// Resolves the plan's connections and resets the per-step state.
Status beginPlan(LaneRun& lr) {
  while (!lr.finished()) {
    Plan& p = lr.plan();
    for (PlanConn& c : p.conns) {
      if (c.isSend && c.send == nullptr) {
        auto r = p.transports->sendConnection(c.peer, c.channel);
        if (!r.isOk()) return r.status().withContext(p.describe() + ": connecting to rank " + std::to_string(c.peer));
        c.send = r.value();
        if (c.send->slotBytes() < p.sliceBytes)
          return internalError("%s: the connection to rank %d has %zu-byte slots, smaller than the %zu-byte slices",
                               p.describe().c_str(), c.peer, c.send->slotBytes(), p.sliceBytes);
        if (!accessible(*lr.prims, c.send->memory()))
          return accessError(*lr.prims, p, c.send->memory(), "the connection to rank", c.peer);
      } else if (!c.isSend && c.recv == nullptr) {
        auto r = p.transports->recvConnection(c.peer, c.channel);
        if (!r.isOk())
          return r.status().withContext(p.describe() + ": connecting from rank " + std::to_string(c.peer));
        c.recv = r.value();
        if (!accessible(*lr.prims, c.recv->memory()))
          return accessError(*lr.prims, p, c.recv->memory(), "the connection from rank", c.peer);
      }
    }
    lr.steps.resize(p.steps.size());  // keeps this thread's capacity: no allocation per collective
    for (StepRun& s : lr.steps) s.reset();
    lr.cursors.assign(p.conns.size(), Cursor{});
    lr.remaining = static_cast<uint32_t>(p.steps.size());
    lr.startNs = nowNs();
    if (lr.lane->observer) lr.lane->observer->planStarted(p, lr.startNs);
    if (lr.remaining > 0) return Status::ok();
    if (lr.lane->observer) lr.lane->observer->planDone(p, 0, lr.startNs);
    ++lr.current;
  }
  return Status::ok();
}

// Direct messages of finished rounds that the receiver has released.
void retireTickets(const Plan& p, const PlanStep& st, StepRun& run) {
  while (run.pendCount > 0) {
    uint32_t i = run.pendHead;
    if (run.pendTicket[i] != 0 && !p.conns[st.outConn].send->consumed(run.pendTicket[i])) return;
    run.finishedRounds = run.pendRound[i] + 1;
    run.pendHead = (i + 1) % kMaxPendingRounds;
    --run.pendCount;
  }
}

// Ends the current round of a step: cursors move on, memory effects final (now or once released).
void endRound(LaneRun& lr, const PlanStep& st, StepRun& run) {
  Plan& p = lr.plan();
  if (st.inConn >= 0 && !run.inAdvanced) advanceCursor(p.conns[st.inConn], lr.cursors[st.inConn]);
  if (st.outConn >= 0) advanceCursor(p.conns[st.outConn], lr.cursors[st.outConn]);
  if (run.roundTicket != 0 || run.pendCount > 0) {  // keep rounds finishing in order
    uint32_t slot = (run.pendHead + run.pendCount) % kMaxPendingRounds;
    run.pendRound[slot] = run.round;
    run.pendTicket[slot] = run.roundTicket;
    ++run.pendCount;
  } else if (run.pendCount == 0) {
    run.finishedRounds = run.round + 1;
  }
  ++run.round;
  run.piece = 0;
  run.received = 0;
  run.inAdvanced = false;
  run.roundTicket = 0;
}

// Moves what a step can move now. Returns true when something moved.
Status visitStep(LaneRun& lr, uint32_t s, bool* progressed) {
  Plan& p = lr.plan();
  const PlanStep& st = p.steps[s];
  StepRun& run = lr.steps[s];
  uint32_t budget = kMaxPiecesPerVisit;
  while (run.round < p.rounds && budget > 0) {
    if (run.pendCount == kMaxPendingRounds) break;
    bool ready = true;
    for (uint32_t i = st.predBegin; i < st.predEnd && ready; ++i)
      ready = lr.steps[p.preds[i]].finishedRounds > run.round;
    if (!ready) break;
    const uint32_t npieces = piecesPerRound(p, st);
    PieceIo io;
    if (st.inConn >= 0 && myTurn(lr.cursors[st.inConn], run.round, st.inPos)) io.in = p.conns[st.inConn].recv;
    if (st.outConn >= 0 && myTurn(lr.cursors[st.outConn], run.round, st.outPos)) io.out = p.conns[st.outConn].send;
    while (run.piece < npieces && budget > 0) {
      Piece pc = pieceOf(p, st, run.round, run.piece);
      bool recvHalf = false, pieceDone = false;
      if (pc.bytes == 0) {
        // Empty on both sides: nothing travels, but the step still takes its turns in order.
        if (st.inConn >= 0 && !run.pieceReceived) {
          if (io.in == nullptr) break;
          recvHalf = true;
        }
        if (st.outConn >= 0 && io.out == nullptr) {
          if (!recvHalf) break;
        } else {
          pieceDone = true;
        }
      } else {
        io.received = run.pieceReceived;
        PieceResult res;
        TH_CHECK(movePiece(*lr.prims, p, st, pc, io, &res));
        if (res == PieceResult::kBlocked) break;
        *progressed = true;
        if (p.stepTimes != nullptr && p.stepTimes[s].firstNs == 0) p.stepTimes[s].firstNs = nowNs();  // traced
        --budget;
        if (io.directTicket != 0) run.roundTicket = io.directTicket;
        if (res == PieceResult::kReceived) {
          recvHalf = true;
        } else {
          pieceDone = true;
          recvHalf = st.inConn >= 0 && !run.pieceReceived;
        }
      }
      if (recvHalf) {
        run.pieceReceived = true;
        ++run.received;
      }
      if (pieceDone) {
        run.pieceReceived = false;
        ++run.piece;
      }
      // All receives of the round done: let the next step of that connection receive.
      if (st.inConn >= 0 && !run.inAdvanced && run.received == npieces) {
        advanceCursor(p.conns[st.inConn], lr.cursors[st.inConn]);
        run.inAdvanced = true;
        io.in = nullptr;
      }
      if (!pieceDone) break;  // the send half waits for its turn or for space
    }
    if (run.piece < npieces) break;
    // A round without pieces (a zero-byte point-to-point step) still takes its turns.
    if (st.inConn >= 0 && !run.inAdvanced && io.in == nullptr) break;
    if (st.outConn >= 0 && io.out == nullptr) break;
    endRound(lr, st, run);
    *progressed = true;
  }
  if (run.pendCount > 0) {
    uint32_t before = run.finishedRounds;
    retireTickets(p, st, run);
    if (run.finishedRounds != before) *progressed = true;
  }
  return Status::ok();
}

Status finishPlan(LaneRun& lr) {
  Plan& p = lr.plan();
  if (p.divideDst != nullptr && p.divideElems > 0) lr.prims->divide(p.reduction, p.divideDst, p.divideElems);
  if (lr.lane->observer) {
    uint64_t end = nowNs();
    lr.lane->observer->planDone(p, end - lr.startNs, end);
  }
  ++lr.current;
  return beginPlan(lr);
}

Status pass(LaneRun& lr, bool* progressed) {
  if (lr.finished()) return Status::ok();
  Plan& p = lr.plan();
  for (uint32_t s = 0; s < p.steps.size(); ++s) {
    StepRun& run = lr.steps[s];
    if (run.finishedRounds == p.rounds) continue;
    TH_CHECK(visitStep(lr, s, progressed));
    if (run.finishedRounds == p.rounds) {
      --lr.remaining;
      if (p.stepTimes != nullptr) p.stepTimes[s].endNs = nowNs();  // a traced plan (THESEUS_TRACE_STEPS)
    }
  }
  if (lr.remaining == 0) {
    TH_CHECK(finishPlan(lr));
    *progressed = true;
  }
  return Status::ok();
}

std::string describeWaits(LaneRun& lr) {
  Plan& p = lr.plan();
  std::string out;
  for (uint32_t s = 0; s < p.steps.size(); ++s) {
    const StepRun& run = lr.steps[s];
    const PlanStep& st = p.steps[s];
    if (run.finishedRounds == p.rounds) continue;
    if (!out.empty()) out += "; ";
    out += "step " + std::to_string(s) + " (" + schedule::opName(st.op) + ") round " + std::to_string(run.round) +
           "/" + std::to_string(p.rounds);
    bool blockedByPred = false;
    for (uint32_t i = st.predBegin; i < st.predEnd; ++i)
      if (run.round < p.rounds && lr.steps[p.preds[i]].finishedRounds <= run.round) blockedByPred = true;
    if (blockedByPred) out += " waits for an earlier step";
    else if (run.round >= p.rounds || run.pendCount > 0)
      out += " waits for rank " + std::to_string(st.sendPeer) + " to read its data";
    else if (st.inConn >= 0 && !run.inAdvanced && !run.pieceReceived)
      out += " waits for data from rank " + std::to_string(st.recvPeer);
    else if (st.outConn >= 0)
      out += " waits for buffer space at rank " + std::to_string(st.sendPeer);
  }
  return out;
}

}  // namespace

int64_t configuredStallTimeoutMs() {
  static const int64_t ms = kStallTimeoutMs.get();
  return ms;
}

Status progressLanes(std::vector<Lane>& lanes, const Primitives& prims, const ExecOptions& options) {
  int64_t stallMs = options.stallTimeoutMs != 0 ? options.stallTimeoutMs : configuredStallTimeoutMs();
  static const int64_t spinIters = kSpinIters.get();
  static const int64_t sleepUs = kSleepUs.get();

  thread_local std::vector<LaneRun> tRuns;
  std::vector<LaneRun>& runs = keptAddress(tRuns);  // one look-up of the thread-local (common/tls.h)
  runs.resize(lanes.size());
  transport::TransportManager* onlyManager = nullptr;
  bool oneManager = true;
  for (size_t i = 0; i < lanes.size(); ++i) {
    LaneRun& r = runs[i];  // reused: its vectors keep their capacity
    r.lane = &lanes[i];
    r.prims = &prims;
    r.current = 0;
    r.remaining = 0;
    r.startNs = 0;
    TH_CHECK(beginPlan(runs[i]));
    for (Plan* p : lanes[i].plans) {
      if (p->transports == nullptr) continue;
      if (onlyManager == nullptr) onlyManager = p->transports;
      else if (p->transports != onlyManager) oneManager = false;
    }
  }

  // Idle passes spin on the core, or, when this host's ranks outnumber its
  // cores, hand it over with sched_yield: the peer we wait for may need this
  // very core (4 ranks on 2 cores, 8 B allreduce: 157 us spinning, ~15 us
  // yielding; futex sleeps cost tens of microseconds per wake-up there).
  const bool yieldIdle = oneManager && onlyManager != nullptr && onlyManager->sharesCores();
  const int64_t passesBeforeSleep =
      oneManager && onlyManager != nullptr ? onlyManager->idlePassesBeforeSleep(spinIters) : spinIters;
  int64_t idle = 0;
  // The clock is read only when idle: progress just marks that the stall
  // interval restarts at the next idle look.
  uint64_t lastProgressNs = nowNs(), lastHealthNs = 0, lastWaitNoteNs = 0;
  bool progressedSinceLook = false;
  std::vector<int> waitedPeers;  // for the lanes' health checks
  for (;;) {
    bool sleepy = idle >= passesBeforeSleep && oneManager && onlyManager != nullptr;
    uint64_t token = sleepy ? onlyManager->activityToken() : 0;
    bool progressed = false;
    size_t live = 0;
    for (LaneRun& lr : runs) {
      TH_CHECK(pass(lr, &progressed));
      if (!lr.finished()) ++live;
    }
    if (live == 0) return Status::ok();
    if (progressed) {
      idle = 0;
      progressedSinceLook = true;
      continue;
    }
    // Nothing moved: let the transports report errors (a corrupt message, a dead socket).
    // A receive connection whose messages this plan has all taken is not asked: its
    // sender may have finished and closed it (an orderly goodbye, not an error).
    for (LaneRun& lr : runs) {
      if (lr.finished()) continue;
      Plan& p = lr.plan();
      for (size_t i = 0; i < p.conns.size(); ++i) {
        PlanConn& c = p.conns[i];
        if (!c.isSend && lr.cursors[i].round >= p.rounds) continue;
        Status s = c.isSend ? (c.send ? c.send->progress() : Status::ok()) : (c.recv ? c.recv->progress() : Status::ok());
        if (!s.isOk()) return s.withContext(p.describe() + ": rank " + std::to_string(p.rank));
      }
    }
    // On a loaded machine a yield can give the core away for a whole time slice, so the passes
    // before sleep may take seconds: the checks below run by time, not only once the passes are
    // spent (yielding passes read the clock each time, spinning ones every 256). A yield that took
    // that long means another process holds the core: the next pass sleeps on the doorbell, so
    // this rank wakes when its peer moves, not when the scheduler next gets round to it.
    const bool spent = ++idle >= passesBeforeSleep;
    uint64_t now;
    if (spent) {
      now = nowNs();
    } else if (yieldIdle) {
      const uint64_t before = nowNs();
      sched_yield();
      now = nowNs();
      if (now - before > kLongYieldNs) idle = passesBeforeSleep;
    } else {
      cpuRelax();
      if ((idle & 255) != 0) continue;
      now = nowNs();
    }
    // Idle: check health (at most every millisecond), the abort flag and the stall timeout, then sleep.
    if (progressedSinceLook) {
      lastProgressNs = now;
      progressedSinceLook = false;
    }
    if (now - lastHealthNs > 1000000) {
      lastHealthNs = now;
      // Idle for 100 ms: tell the flight recorders what the plans wait for (every 100 ms).
      const bool noteWaits = now - lastProgressNs > 100000000 && now - lastWaitNoteNs > 100000000;
      if (noteWaits) lastWaitNoteNs = now;
      bool movedAfterAll = false;
      for (LaneRun& lr : runs) {
        if (lr.finished()) continue;
        Plan& p = lr.plan();
        if (p.abort != nullptr && p.abort->isSet())
          return remoteError("%s: rank %d: the communicator was aborted", p.describe().c_str(), p.rank);
        if (lr.lane->health) {
          unfinishedStepPeers(p.steps.data(), lr.steps.data(), static_cast<uint32_t>(p.steps.size()), p.rounds,
                              &waitedPeers);
          const LaneWait wait{&waitedPeers, now - lastProgressNs > 1000000000};
          if (Status h = lr.lane->health(wait); !h.isOk()) {
            // A peer may have finished its part and died between the last pass and this look (a
            // loaded machine can hold this thread that long): the failure counts only if one more
            // pass moves nothing.
            for (LaneRun& other : runs) TH_CHECK(pass(other, &movedAfterAll));
            if (!movedAfterAll) return h.withContext(p.describe());
            break;
          }
        }
        if (noteWaits && lr.lane->observer) lr.lane->observer->planWaiting(p, describeWaits(lr));
        if (stallMs > 0 && now - lastProgressNs > static_cast<uint64_t>(stallMs) * 1000000)
          return timeoutError("%s: rank %d made no progress for %lld ms: %s", p.describe().c_str(), p.rank,
                             static_cast<long long>(stallMs), describeWaits(lr).c_str());
      }
      if (movedAfterAll) {
        idle = 0;
        progressedSinceLook = true;
        continue;
      }
    }
    if (!spent) continue;
    if (sleepy) onlyManager->waitForActivity(token, sleepUs);
    else sched_yield();
  }
}

}  // namespace theseus::exec
