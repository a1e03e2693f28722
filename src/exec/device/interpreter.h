// The device executor's step interpreter and flag protocol: one source that a
// CUDA thread block runs on a GPU and a host thread runs in the emulation CI
// uses (hd.h). It runs a device plan (dev_plan.h) with the semantics of the
// host progress engine (exec/progress.h): slice-major rounds, a step starts
// round r when its predecessors finished round r, messages on a connection go
// in (round, program order), fused steps reduce straight into the outgoing
// slot, and a two-phase fused step takes its message before it can send so the
// sender is never held up.
//
// Threads. The threads of a Team (a thread block) run pollPlan together. The
// leader alone reads and writes run state and flags and decides the next
// action; it shares the action with the team, every thread moves its share
// of the elements (Span), the team synchronises, and the leader completes the
// action (publishes the message, releases the slot, advances the state).
//
// Flag protocol (one FIFO, dev_plan.h), with system-scope atomics:
//   sender:   tail = loadAcquire(&ctl->tail); if head - tail < slots: the team
//             writes the payload into slot head % slots; team barrier; the
//             leader writes the slot header, then storeRelease(&ctl->head, head + 1).
//   receiver: head = loadAcquire(&ctl->head); if head > tail: the leader checks
//             the header (tag, size); team barrier; the team reads the payload
//             (copy or reduce); team barrier; storeRelease(&ctl->tail, tail + 1).
// The release store publishes everything the team wrote before the barrier
// (release is cumulative over what happens-before it, and the barrier orders
// the other threads' writes before the leader's store); the acquire load
// followed by the barrier orders the team's reads after the sender's writes.
// The slot is reused only after the receiver's release of it is acquired by
// the sender, so a payload is never overwritten while it is read.
//
// Direct messages (zero-copy). When the data a step sends lies in a buffer
// the application registered and the receiver has mapped it (its ack for the
// export equals the generation the plan was lowered with, acquired), the
// sender publishes only a header naming it (kSlotDirectDevice: export entry,
// offset) and the receiver reads the sender's memory in place through its own
// mapping (transport/shm/device_exports.h). The receiver's release of the
// message then means "read": the sender's round is final (finishedRounds,
// which successors and plan completion wait on) only once the FIFO's tail
// reached the round's last direct message, so no later step or operation
// overwrites memory a peer still reads — the host engine's rule.
//
// pollPlan never waits: it moves what can move and returns kIdle when nothing
// could, so one thread can drive several plans (lanes) at once and the caller
// decides how to wait (spin, back off, check the abort flag and timeouts).
#pragma once

#include "exec/device/dev_plan.h"

namespace theseus::exec::dev {

// A team of one: the host emulation's thread block.
struct SoloTeam {
  TH_HD bool leader() const { return true; }
  TH_HD Span span() const { return Span{0, 1}; }
  TH_HD void sync() {}
  template <class T>
  TH_HD T share(const T& v) {
    return v;
  }
};

enum class Poll : uint8_t { kIdle, kProgress, kDone, kFailed };

namespace detail {

// One data movement over elements (or bytes for plain copies).
enum : uint8_t { kMoveNone = 0, kMoveCopy, kMoveScale, kMoveReduce, kMoveReduceScaleA };
struct Move {
  uint8_t how = kMoveNone;
  void* dst = nullptr;
  const void* a = nullptr;
  const void* b = nullptr;
  size_t bytes = 0;
};

// What the leader decided for the team: up to two movements, then what to publish.
struct Action {
  uint8_t any = 0;        // something to do
  uint8_t publish = 0;    // commit a message of `bytes` on the step's out connection
  uint8_t release = 0;    // release the message of the step's in connection
  uint8_t received = 0;   // the receive half of the piece happened
  uint8_t pieceDone = 0;  // the piece is complete
  uint32_t step = 0;
  uint64_t bytes = 0;
  const char* direct = nullptr;  // publish a direct message for this data instead of a slot payload
  Move first, second;
};

template <class Team>
TH_HD inline void runMove(const Plan& p, const Move& m, Team& team) {
  if (m.how == kMoveNone || m.bytes == 0) return;
  const Span s = team.span();
  if (m.how == kMoveCopy) {
    if (m.dst == m.a) return;
    char* d = static_cast<char*>(m.dst);
    const char* a = static_cast<const char*>(m.a);
#if defined(__CUDA_ARCH__)
    copyBytes(d, a, m.bytes, s);
#else
    if (s.stride == 1) memcpy(d, a, m.bytes);
    else copyBytes(d, a, m.bytes, s);  // a team of host threads: the kernel's code
#endif
    return;
  }
  const size_t n = m.bytes / p.elemBytes;
  if (m.how == kMoveScale) scaleElems(p.red, m.dst, m.a, n, s);
  else reduceElems(p.red, m.dst, m.a, m.b, n, m.how == kMoveReduceScaleA, s);
}

TH_HD inline bool myTurn(const Cursor& c, uint32_t round, uint32_t pos) { return c.round == round && c.pos == pos; }

TH_HD inline void advanceCursor(const Conn& conn, Cursor& c) {
  if (++c.pos == conn.nsteps) {
    c.pos = 0;
    ++c.round;
  }
}

// Slot `index` of a FIFO.
TH_HD inline char* slotData(const Fifo& f, uint64_t message) { return f.data + (message % f.slots) * f.slotBytes; }

// dst = scale?(src) (op) other, as a Move.
TH_HD inline Move combineMove(const Step& st, void* dst, const void* src, const void* other, size_t bytes) {
  return Move{st.scaleSrc ? kMoveReduceScaleA : kMoveReduce, dst, src, other, bytes};
}

// Whether the receiver may read `data` in place: its memory is exported, the
// receiver mapped that export (acquire: its mapping happens-before our head,
// which it acquires before reading), and the piece is worth a release wait.
TH_HD inline bool canSendDirect(const Plan& p, const Step& st, const char* data, uint64_t bytes) {
  if (st.exportEntry < 0 || data == nullptr || bytes < p.directMinBytes) return false;
  uint64_t* acks = p.conns[st.outConn].acks;
  return acks != nullptr && loadAcquire(&acks[st.exportEntry]) == st.exportGen;
}

TH_HD inline void fail(Plan& p, uint32_t code, const Step& st, uint32_t gotTag, uint64_t gotBytes, uint64_t want) {
  p.failure.code = code;
  p.failure.step = st.index;
  p.failure.peer = st.recvPeer;
  p.failure.gotTag = gotTag;
  p.failure.gotBytes = gotBytes;
  p.failure.wantBytes = want;
}

// The leader: the next action of step s for its current piece (a.any = 0: none now).
// Returns false when the plan failed (a mismatched message).
TH_HD inline bool decide(Plan& p, uint32_t s, Action* a) {
  *a = Action{};
  a->step = s;
  const Step& st = p.steps[s];
  StepState& run = p.state[s];
  if (run.round >= p.rounds) return true;
  for (uint32_t i = st.predBegin; i < st.predEnd; ++i)
    if (p.state[p.preds[i]].finishedRounds <= run.round) return true;
  const uint32_t npieces = piecesPerRound(p, st);
  if (run.piece >= npieces) return true;  // the round only waits for its turns (see finishRound)
  const bool inTurn = st.inConn >= 0 && !run.inAdvanced && myTurn(p.cursors[st.inConn], run.round, st.inPos);
  const bool outTurn = st.outConn >= 0 && myTurn(p.cursors[st.outConn], run.round, st.outPos);
  const Piece pc = pieceOf(p, st, run.round, run.piece);

  if (pc.bytes == 0) {  // nothing travels, but the step still takes its turns in order
    bool recvHalf = false;
    if (st.inConn >= 0 && !run.pieceReceived) {
      if (!inTurn) return true;
      recvHalf = true;
    }
    if (st.outConn >= 0 && !outTurn) {
      if (!recvHalf) return true;
      a->any = a->received = 1;
    } else {
      a->any = a->pieceDone = 1;
      a->received = recvHalf;
    }
    return true;
  }

  // Free slot on the out connection / message on the in connection, leader's view.
  Fifo* out = st.outConn >= 0 ? &p.conns[st.outConn].fifo : nullptr;
  Fifo* in = st.inConn >= 0 ? &p.conns[st.inConn].fifo : nullptr;
  uint64_t outHead = 0, inTail = 0;
  auto canSend = [&]() {
    if (!outTurn) return false;
    outHead = loadRelaxed(&out->ctl->head);
    return outHead - loadAcquire(&out->ctl->tail) < out->slots;
  };
  auto message = [&](const char** data) -> int {  // 1: there, 0: not yet, -1: mismatch
    if (!inTurn) return 0;
    inTail = loadRelaxed(&in->ctl->tail);
    if (loadAcquire(&in->ctl->head) <= inTail) return 0;
    const SlotHeader& h = in->headers[inTail % in->slots];
    if (h.tag != p.tag || h.bytes != pc.bytes) {
      fail(p, h.tag != p.tag ? kWrongTag : kWrongSize, st, h.tag, h.bytes, pc.bytes);
      return -1;
    }
    if (h.kind == kSlotDirectDevice) {  // the sender's memory, through this rank's mapping of its export
      const Import* imports = p.conns[st.inConn].imports;
      const Import im = imports != nullptr && h.regionId < kMaxExports ? imports[h.regionId] : Import{nullptr, 0};
      if (im.base == nullptr || h.offset > im.bytes || h.bytes > im.bytes - h.offset) {
        fail(p, kBadDirect, st, static_cast<uint32_t>(h.regionId), h.bytes, h.offset);
        return -1;
      }
      *data = im.base + h.offset;
      return 1;
    }
    if (h.kind != kSlotInline) {
      fail(p, kBadDirect, st, h.kind, h.bytes, 0);
      return -1;
    }
    *data = slotData(*in, inTail);
    return 1;
  };
  const char* m = nullptr;
  switch (st.op) {
    case kOpCopy:
      a->first = Move{st.scaleSrc ? kMoveScale : kMoveCopy, pc.dst, pc.src, nullptr, pc.bytes};
      a->any = a->pieceDone = 1;
      return true;
    case kOpReduce:
      if (st.scaleDst) a->first = Move{kMoveScale, pc.dst, pc.dst, nullptr, pc.bytes};
      a->second = combineMove(st, pc.dst, pc.src, pc.dst, pc.bytes);
      a->any = a->pieceDone = 1;
      return true;
    case kOpSend:
      if (!canSend()) return true;
      if (!st.scaleSrc && canSendDirect(p, st, pc.src, pc.bytes))
        a->direct = pc.src;
      else
        a->first = Move{st.scaleSrc ? kMoveScale : kMoveCopy, slotData(*out, outHead), pc.src, nullptr, pc.bytes};
      a->any = a->publish = a->pieceDone = 1;
      a->bytes = pc.bytes;
      return true;
    case kOpRecv:
    case kOpRecvReduce: {
      int got = message(&m);
      if (got < 0) return false;
      if (got == 0) return true;
      a->first = st.op == kOpRecv ? Move{kMoveCopy, pc.dst, m, nullptr, pc.bytes}
                                  : combineMove(st, pc.dst, pc.src, m, pc.bytes);
      a->any = a->release = a->received = a->pieceDone = 1;
      return true;
    }
    default:
      break;
  }
  // Fused ops: receive, transform, send on.
  if (run.pieceReceived) {  // second half of a two-phase piece: the result is in dst
    if (!canSend()) return true;
    if (canSendDirect(p, st, pc.dst, pc.bytes))
      a->direct = pc.dst;
    else
      a->first = Move{kMoveCopy, slotData(*out, outHead), pc.dst, nullptr, pc.bytes};
    a->any = a->publish = a->pieceDone = 1;
    a->bytes = pc.bytes;
    return true;
  }
  int got = message(&m);
  if (got < 0) return false;
  if (got == 0) return true;
  const bool sendNow = canSend();
  if (!sendNow && st.op == kOpRecvReduceSend) return true;  // nowhere to put the sum: keep the message
  // The receive half: dst = message (copy-send) or src (op) message (reduce-copy-send).
  Move half = st.op == kOpRecvCopySend ? Move{kMoveCopy, pc.dst, m, nullptr, pc.bytes}
                                       : combineMove(st, pc.dst, pc.src, m, pc.bytes);
  a->any = a->release = a->received = 1;
  if (!sendNow) {
    a->first = half;
    return true;
  }
  if (st.op == kOpRecvReduceSend) {
    a->first = combineMove(st, slotData(*out, outHead), pc.src, m, pc.bytes);  // straight into the slot
  } else {
    a->first = half;
    if (canSendDirect(p, st, pc.dst, pc.bytes))
      a->direct = pc.dst;
    else
      a->second = Move{kMoveCopy, slotData(*out, outHead), pc.dst, nullptr, pc.bytes};
  }
  a->publish = a->pieceDone = 1;
  a->bytes = pc.bytes;
  return true;
}

// The leader, after the team moved the data of `a`.
TH_HD inline void complete(Plan& p, const Action& a) {
  const Step& st = p.steps[a.step];
  StepState& run = p.state[a.step];
  if (a.publish) {
    Fifo& out = p.conns[st.outConn].fifo;
    uint64_t head = loadRelaxed(&out.ctl->head);
    SlotHeader& h = out.headers[head % out.slots];
    h.bytes = a.bytes;
    h.tag = p.tag;
    h.kind = kSlotInline;
    if (a.direct != nullptr) {
      h.kind = kSlotDirectDevice;
      h.regionId = static_cast<uint64_t>(st.exportEntry);
      h.offset = static_cast<uint64_t>(a.direct - st.exportBase);
      h.address = reinterpret_cast<uint64_t>(a.direct);
      run.roundTicket = head + 1;
      ++p.directSent;
    }
    storeRelease(&out.ctl->head, head + 1);
  }
  if (a.release) {
    Fifo& in = p.conns[st.inConn].fifo;
    storeRelease(&in.ctl->tail, loadRelaxed(&in.ctl->tail) + 1);
  }
  if (a.received) {
    run.pieceReceived = 1;
    ++run.received;
  }
  if (a.pieceDone) {
    run.pieceReceived = 0;
    ++run.piece;
  }
  // Every receive of the round done: the next step on that connection may receive.
  const uint32_t npieces = piecesPerRound(p, st);
  if (st.inConn >= 0 && !run.inAdvanced && run.received == npieces) {
    advanceCursor(p.conns[st.inConn], p.cursors[st.inConn]);
    run.inAdvanced = 1;
  }
}

// The leader: ends the step's round when its pieces moved and it had its turns.
TH_HD inline bool finishRound(Plan& p, uint32_t s) {
  const Step& st = p.steps[s];
  StepState& run = p.state[s];
  if (run.round >= p.rounds || run.piece < piecesPerRound(p, st)) return false;
  for (uint32_t i = st.predBegin; i < st.predEnd; ++i)
    if (p.state[p.preds[i]].finishedRounds <= run.round) return false;
  if (st.inConn < 0 && st.outConn < 0 && piecesPerRound(p, st) == 0) {
    // Nothing to move and no turns to take (a copy onto itself): every round its predecessors finished ends now.
    uint32_t upTo = p.rounds;
    for (uint32_t i = st.predBegin; i < st.predEnd; ++i)
      upTo = p.state[p.preds[i]].finishedRounds < upTo ? p.state[p.preds[i]].finishedRounds : upTo;
    run.round = run.finishedRounds = upTo;
    if (upTo == p.rounds) --p.remaining;
    run.piece = run.received = 0;
    return true;
  }
  // A round without pieces (a zero-byte step) still takes its turns.
  const bool inTurn = st.inConn >= 0 && !run.inAdvanced && myTurn(p.cursors[st.inConn], run.round, st.inPos);
  const bool outTurn = st.outConn >= 0 && myTurn(p.cursors[st.outConn], run.round, st.outPos);
  if (st.inConn >= 0 && !run.inAdvanced && !inTurn) return false;
  if (st.outConn >= 0 && !outTurn) return false;
  if (st.inConn >= 0 && !run.inAdvanced) advanceCursor(p.conns[st.inConn], p.cursors[st.inConn]);
  if (st.outConn >= 0) advanceCursor(p.conns[st.outConn], p.cursors[st.outConn]);
  ++run.round;
  if (run.roundTicket != 0 || run.pendTicket != 0) {  // final once the receiver read it (retire)
    if (run.roundTicket != 0) run.pendTicket = run.roundTicket;
    run.pendRounds = run.round;
  } else {
    run.finishedRounds = run.round;
    if (run.round == p.rounds) --p.remaining;
  }
  run.roundTicket = 0;
  run.piece = run.received = 0;
  run.inAdvanced = 0;
  return true;
}

// The leader: ended rounds whose direct messages the receiver has released
// become final. Tickets on one FIFO are released in order, so the latest
// covers the earlier ones.
TH_HD inline bool retire(Plan& p, uint32_t s) {
  StepState& run = p.state[s];
  if (run.pendTicket == 0) return false;
  const Fifo& out = p.conns[p.steps[s].outConn].fifo;
  if (loadAcquire(&out.ctl->tail) < run.pendTicket) return false;
  run.pendTicket = 0;
  run.finishedRounds = run.pendRounds;
  if (run.finishedRounds == p.rounds) --p.remaining;
  return true;
}

}  // namespace detail

// One pass over the plan's unfinished steps: moves every piece that can move.
// kDone once every step finished every round (and an integer average was
// divided); kFailed with p.failure set.
template <class Team>
TH_HD Poll pollPlan(Plan& p, Team& team) {
  constexpr uint32_t kMaxPiecesPerVisit = 16;
  // Every branch below is taken on values the leader shared, so all threads
  // of the team go through the same barriers.
  struct Decision {
    uint8_t verdict;  // 0 nothing now, 1 action, 2 round ended, 3 step finished, 4 failed
    detail::Action action;
  };
  bool progressed = false;
  // A device-resident PreMulSum scalar: read once, when the plan starts. Every
  // thread tests scalarSource before the leader changes it (after the barriers
  // in share), so the team takes this branch together.
  if (p.red.scalarSource != nullptr) {
    Reduction resolved = p.red;
    uint8_t ok = 1;
    if (team.leader()) ok = resolveScalar(resolved) ? 1 : 0;
    ok = team.share(ok);
    if (team.leader()) {
      if (ok) p.red = resolved;
      else p.failure.code = kBadScalar;
    }
    team.sync();
    if (!ok) return Poll::kFailed;
  }
  for (uint32_t s = 0; s < p.nsteps; ++s) {
    for (uint32_t budget = kMaxPiecesPerVisit; budget > 0; --budget) {
      Decision d{};
      if (team.leader()) {
        if (p.state[s].finishedRounds == p.rounds) {
          d.verdict = 3;
        } else {
          const bool retired = detail::retire(p, s);
          if (!detail::decide(p, s, &d.action)) d.verdict = 4;
          else if (d.action.any) d.verdict = 1;
          else d.verdict = detail::finishRound(p, s) || retired ? 2 : 0;
        }
      }
      d = team.share(d);
      if (d.verdict == 4) return Poll::kFailed;
      if (d.verdict == 3 || d.verdict == 0) break;
      progressed = true;
      if (d.verdict == 2) continue;  // the next round may be ready at once
      detail::runMove(p, d.action.first, team);
      team.sync();
      detail::runMove(p, d.action.second, team);
      team.sync();
      if (team.leader()) detail::complete(p, d.action);
      team.sync();
    }
  }
  struct End {
    uint8_t done, divide;
  };
  End e{};
  if (team.leader()) {
    e.done = p.remaining == 0;
    e.divide = e.done && p.divideDst != nullptr && p.divideElems > 0;
  }
  e = team.share(e);
  if (!e.done) return progressed ? Poll::kProgress : Poll::kIdle;
  if (e.divide) {
    divideElems(p.red, p.divideDst, p.divideElems, team.span());
    team.sync();
    if (team.leader()) p.divideDst = nullptr;
    team.sync();
  }
  return Poll::kDone;
}

// Replays (CUDA graphs). A plan image runs once per launch, but a captured
// launch is replayed many times from the same image, and a run leaves its
// marks in it: run state and cursors advance, a device-resident scalar is
// resolved into `red`, the average's `divideDst` is cleared, `remaining`
// counts down. restartPlan puts the image back as the lowering made it — the
// header from `pristine` (a copy of it taken before any run), run state and
// cursors zeroed (their lowered values) — so every replay starts afresh, and
// re-reads a device scalar that the stream may have changed since. The FIFO
// counters are not touched: they live in the FIFOs and carry on from whatever
// ran before, as for any launch. The leader writes; the team meets after.
template <class Team>
TH_HD void restartPlan(Plan& p, const Plan& pristine, Team& team) {
  if (team.leader()) {
    p = pristine;
    for (uint32_t s = 0; s < p.nsteps; ++s) p.state[s] = StepState{};
    for (uint32_t c = 0; c < p.nconns; ++c) p.cursors[c] = Cursor{};
  }
  team.sync();
}

}  // namespace theseus::exec::dev
