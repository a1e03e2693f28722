// Piece-level execution of steps. Message checks: every received piece must
// carry the plan's tag and exactly the expected size — otherwise the ranks are
// running different operations (or different counts), and we stop with an
// error instead of corrupting the user's buffers.
#include "exec/step_ops.h"

namespace theseus::exec {
namespace {

using schedule::Op;

Status mismatch(const Plan& plan, const PlanStep& step, const transport::RecvMessage& m, size_t expect) {
  if (m.tag != plan.tag) return wrongTagError(plan, step.index, step.recvPeer, m.tag);
  return wrongSizeError(plan, step.index, step.recvPeer, expect, m.bytes);
}

inline size_t elems(const Plan& plan, size_t bytes) { return bytes / plan.elemBytes; }

// dst = src (+) other, scaling src first when it is raw input of a pre-multiplying reduction.
inline void combine(const Primitives& prims, const Plan& plan, const PlanStep& step, void* dst, const void* src,
                    const void* other, size_t bytes) {
  if (step.scaleSrc)
    prims.reduceScaleA(plan.reduction, dst, src, other, elems(plan, bytes));
  else
    prims.reduce(plan.reduction, dst, src, other, elems(plan, bytes));
}

// Publishes final data through an acquired slot: direct when the peer can read it in place.
inline void publish(const Primitives& prims, const Plan& plan, PieceIo& io, const transport::SendSlot& slot,
                    const char* data, size_t bytes) {
  if (bytes >= plan.directMinBytes && io.out->canSendDirect(data, bytes)) {
    io.directTicket = io.out->commitDirect(data, bytes, plan.tag);
  } else {
    prims.copy(slot.data, data, bytes);
    io.out->commitInline(bytes, plan.tag);
  }
}

// Receive half of a fused op that stores its result (two-phase when the send must wait).
void receiveHalf(const Primitives& prims, const Plan& plan, const PlanStep& step, const Piece& p,
                 const transport::RecvMessage& m) {
  if (step.op == Op::kRecvCopySend)
    prims.copy(p.dst, m.data, p.bytes);
  else
    combine(prims, plan, step, p.dst, p.src, m.data, p.bytes);
}

}  // namespace

Status movePiece(const Primitives& prims, const Plan& plan, const PlanStep& step, const Piece& p, PieceIo& io,
                 PieceResult* result) {
  *result = PieceResult::kBlocked;
  io.directTicket = 0;
  transport::RecvMessage m;
  transport::SendSlot slot;
  switch (step.op) {
    case Op::kCopy:
      // A copy onto itself (in place) still scales raw input: that is its one scaling.
      if (step.scaleSrc) prims.scaleCopy(plan.reduction, p.dst, p.src, elems(plan, p.bytes));
      else if (p.dst != p.src) prims.copy(p.dst, p.src, p.bytes);
      *result = PieceResult::kDone;
      return Status::ok();
    case Op::kReduce:
      if (step.scaleDst) prims.scaleCopy(plan.reduction, p.dst, p.dst, elems(plan, p.bytes));
      combine(prims, plan, step, p.dst, p.src, p.dst, p.bytes);
      *result = PieceResult::kDone;
      return Status::ok();
    case Op::kSend:
      if (io.out == nullptr || !io.out->tryAcquire(&slot)) return Status::ok();
      if (step.scaleSrc) {
        prims.scaleCopy(plan.reduction, slot.data, p.src, elems(plan, p.bytes));
        io.out->commitInline(p.bytes, plan.tag);
      } else {
        publish(prims, plan, io, slot, p.src, p.bytes);
      }
      *result = PieceResult::kDone;
      return Status::ok();
    case Op::kRecv:
    case Op::kRecvReduce:
      if (io.in == nullptr || !io.in->tryPeek(&m)) return Status::ok();
      if (m.tag != plan.tag || m.bytes != p.bytes) return mismatch(plan, step, m, p.bytes);
      if (step.op == Op::kRecv) prims.copy(p.dst, m.data, p.bytes);
      else combine(prims, plan, step, p.dst, p.src, m.data, p.bytes);
      io.in->release();
      *result = PieceResult::kDone;
      return Status::ok();
    default:
      break;
  }

  // Fused ops: receive, transform, send on.
  if (io.received) {  // second half of a two-phase piece: the result is in dst
    if (io.out == nullptr || !io.out->tryAcquire(&slot)) return Status::ok();
    publish(prims, plan, io, slot, p.dst, p.bytes);
    *result = PieceResult::kDone;
    return Status::ok();
  }
  if (io.in == nullptr || !io.in->tryPeek(&m)) return Status::ok();
  if (m.tag != plan.tag || m.bytes != p.bytes) return mismatch(plan, step, m, p.bytes);
  bool canSend = io.out != nullptr && io.out->tryAcquire(&slot);
  if (!canSend) {
    // The send must wait (not our turn, or the peer's buffer is full). Ops that
    // store their result take the message now, so the sender is not held up;
    // recv_reduce_send has nowhere to put it and keeps it until it can send.
    if (step.op == Op::kRecvReduceSend) return Status::ok();
    receiveHalf(prims, plan, step, p, m);
    io.in->release();
    *result = PieceResult::kReceived;
    return Status::ok();
  }
  if (step.op == Op::kRecvReduceSend) {
    combine(prims, plan, step, slot.data, p.src, m.data, p.bytes);  // reduce straight into the slot
    io.out->commitInline(p.bytes, plan.tag);
  } else {
    receiveHalf(prims, plan, step, p, m);
    publish(prims, plan, io, slot, p.dst, p.bytes);
  }
  io.in->release();
  *result = PieceResult::kDone;
  return Status::ok();
}

}  // namespace theseus::exec
