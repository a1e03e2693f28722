#include "comm/validate.h"

#include <cstddef>
#include <cstdint>
#include <string>

#include "comm/collective_engine.h"
#include "comm/communicator.h"
#include "exec/reduce.h"
#include "schedule/ir.h"

namespace theseus::comm {
namespace {

const char* opKindName(const OpDesc& op) {
  switch (op.kind) {
    case OpDesc::Kind::kSend: return "ncclSend";
    case OpDesc::Kind::kRecv: return "ncclRecv";
    default: return schedule::collectiveName(op.collective);
  }
}

// The largest buffer of the call in elements per `count`: n for the gathered or
// scattered side of allgather, reducescatter, alltoall, gather and scatter.
size_t bufferFactor(const OpDesc& op, int nranks) {
  if (op.kind != OpDesc::Kind::kCollective) return 1;
  switch (op.collective) {
    case schedule::Collective::kAllGather:
    case schedule::Collective::kReduceScatter:
    case schedule::Collective::kAlltoAll:
    case schedule::Collective::kGather:
    case schedule::Collective::kScatter: return static_cast<size_t>(nranks);
    default: return 1;
  }
}

// count x element size (x ranks for the large side) must be a byte count, and the
// buffers must fit in the address space: a count that wraps would move a few bytes
// and report success, or wait for data nobody sends.
Status checkSize(const char* what, const OpDesc& op, int nranks) {
  const size_t elem = exec::typeSize(op.type);
  const size_t factor = bufferFactor(op, nranks);
  constexpr size_t kMaxBytes = size_t(PTRDIFF_MAX);
  if (op.count == 0 || elem == 0) return Status::ok();
  if (op.count > kMaxBytes / elem / factor)
    return invalidArgument("%s: count %zu of %zu-byte elements%s is more than any buffer can hold", what, op.count,
                           elem, factor > 1 ? (" x " + std::to_string(factor) + " ranks").c_str() : "");
  const size_t bytes = op.count * elem * factor;
  for (const void* buf : {static_cast<const void*>(op.sendbuff), static_cast<const void*>(op.recvbuff)}) {
    if (buf == nullptr) continue;
    const uintptr_t start = reinterpret_cast<uintptr_t>(buf);
    if (start + bytes < start)
      return invalidArgument("%s: a buffer of %zu bytes at %p wraps around the address space", what, bytes, buf);
  }
  return Status::ok();
}

}  // namespace

Status validateOp(ncclComm_t handle, const OpDesc& op, Communicator** out) {
  Communicator* c;
  TH_ASSIGN(c, fromHandle(handle));
  const char* what = opKindName(op);
  switch (c->lifecycle()) {
    case Lifecycle::kReady: break;
    case Lifecycle::kInitializing:
      return invalidUsage("%s: communicator %p is still initialising", what, static_cast<void*>(handle));
    case Lifecycle::kFinalizing:
    case Lifecycle::kFinalized:
      return invalidUsage("%s: communicator %p was finalized", what, static_cast<void*>(handle));
    case Lifecycle::kFailed:
      return invalidUsage("%s: communicator %p has failed (%s); abort or destroy it", what,
                          static_cast<void*>(handle), c->asyncErrorMessage().c_str());
  }
  if (ncclResult_t err = c->asyncError(); err != ncclSuccess && err != ncclInProgress)
    return Status(err, std::string(what) + ": communicator is in error state: " + c->asyncErrorMessage());
  if (static_cast<int>(op.type) < 0 || op.type >= ncclNumTypes)
    return invalidArgument("%s: invalid datatype %d", what, static_cast<int>(op.type));

  const int n = c->nranks();
  TH_CHECK(checkSize(what, op, n));
  if (op.kind == OpDesc::Kind::kSend || op.kind == OpDesc::Kind::kRecv) {
    if (op.peer < 0 || op.peer >= n)
      return invalidArgument("%s: peer %d out of range [0, %d)", what, op.peer, n);
    const void* buf = op.kind == OpDesc::Kind::kSend ? op.sendbuff : op.recvbuff;
    if (buf == nullptr && op.count > 0) return invalidArgument("%s: buffer is NULL with count %zu", what, op.count);
    *out = c;
    return Status::ok();
  }

  if (schedule::isReducing(op.collective) && !c->engine()->redOpIsValid(op.op))
    return invalidArgument("%s: invalid reduction operation %d", what, static_cast<int>(op.op));
  if (schedule::isRooted(op.collective) && (op.root < 0 || op.root >= n))
    return invalidArgument("%s: root %d out of range [0, %d)", what, op.root, n);
  if (op.count > 0) {
    // Non-root ranks of rooted collectives may pass NULL for the buffer they do not use.
    bool needSend = true, needRecv = true;
    int me = c->rank();
    switch (op.collective) {
      case schedule::Collective::kBroadcast: needSend = (me == op.root); break;
      case schedule::Collective::kReduce: needRecv = (me == op.root); break;
      case schedule::Collective::kGather: needRecv = (me == op.root); break;
      case schedule::Collective::kScatter: needSend = (me == op.root); break;
      default: break;
    }
    if (needSend && op.sendbuff == nullptr) return invalidArgument("%s: sendbuff is NULL", what);
    if (needRecv && op.recvbuff == nullptr) return invalidArgument("%s: recvbuff is NULL", what);
  }
  *out = c;
  return Status::ok();
}

}  // namespace theseus::comm
