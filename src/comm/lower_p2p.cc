// Point-to-point: one step per operation, all concurrent; operations with the
// same peer, direction and channel share a connection, so their messages keep
// their issue order (the peer issues the matching operations in the same order).
// Sends to self pair with receives from self in order and become local copies.
//
// An operation the device executor runs of at least THESEUS_DEVICE_CHANNEL_BYTES
// is cut into THESEUS_DEVICE_CHANNELS parts, one per channel, which its thread
// blocks move side by side (exec/device/dev_split.h), as NCCL spreads a large
// send over its channels. The cut depends only on the byte count (64-byte
// aligned), which a send and its receive share, so both sides cut alike.
#include "comm/communicator.h"
#include "comm/engine.h"
#include "exec/device/device_executor.h"

namespace theseus::comm {
namespace {

// Where part k of `parts` of `bytes` starts.
size_t p2pPartStart(size_t bytes, int parts, int k) {
  return k == parts ? bytes : bytes / 64 * static_cast<size_t>(k) / static_cast<size_t>(parts) * 64;
}

}  // namespace

Status Engine::lowerP2p(const OpDesc* ops, size_t n, exec::Plan& plan) {
  const int me = comm_.rank();
  thread_local std::vector<const OpDesc*> selfSends, selfRecvs;  // reused: a warm group allocates nothing
  selfSends.clear();
  selfRecvs.clear();
  size_t total = 0;
  plan.chunked = false;
  plan.rounds = 1;
  plan.elemBytes = 1;
  for (size_t i = 0; i < n; ++i) {
    const OpDesc& op = ops[i];
    size_t bytes = op.count * exec::typeSize(op.type);
    total += bytes;
    bool isSend = op.kind == OpDesc::Kind::kSend;
    if (isSend) plan.addBuffer(op.sendbuff, bytes, op.sendMemory, false, op.stream);
    else plan.addBuffer(op.recvbuff, bytes, op.recvMemory, true, op.stream);
    if (op.peer == me) {
      (isSend ? selfSends : selfRecvs).push_back(&op);
      continue;
    }
    const bool onDevice = exec::deviceExecutorRuns(comm_.deviceExecutor(), isSend ? op.sendMemory : op.recvMemory);
    const int parts = onDevice && bytes > 0 ? memo_.settings().deviceChannelsFor(bytes) : 1;
    for (int k = 0; k < parts; ++k) {
      const size_t at = p2pPartStart(bytes, parts, k);
      exec::PlanStep st;
      st.op = isSend ? schedule::Op::kSend : schedule::Op::kRecv;
      st.index = static_cast<uint32_t>(plan.steps.size());
      st.bytes = p2pPartStart(bytes, parts, k + 1) - at;
      int32_t conn = -1;
      for (size_t c = 0; c < plan.conns.size(); ++c)
        if (plan.conns[c].peer == op.peer && plan.conns[c].isSend == isSend && plan.conns[c].channel == k)
          conn = static_cast<int32_t>(c);
      if (conn < 0) {
        exec::PlanConn pc;
        pc.peer = op.peer;
        pc.isSend = isSend;
        pc.channel = static_cast<uint8_t>(k);
        plan.conns.push_back(pc);
        conn = static_cast<int32_t>(plan.conns.size() - 1);
      }
      uint32_t pos = plan.conns[conn].nsteps++;
      if (isSend) {
        st.sendPeer = op.peer;
        st.hasSrc = true;
        st.src = static_cast<const char*>(op.sendbuff) + at;
        st.outConn = conn;
        st.outPos = pos;
      } else {
        st.recvPeer = op.peer;
        st.hasDst = true;
        st.dst = static_cast<char*>(op.recvbuff) + at;
        st.inConn = conn;
        st.inPos = pos;
      }
      plan.steps.push_back(st);
    }
  }
  if (selfSends.size() != selfRecvs.size())
    return invalidUsage("group has %zu ncclSend to self (rank %d) but %zu ncclRecv from self", selfSends.size(), me,
                        selfRecvs.size());
  for (size_t k = 0; k < selfSends.size(); ++k) {
    size_t sb = selfSends[k]->count * exec::typeSize(selfSends[k]->type);
    size_t rb = selfRecvs[k]->count * exec::typeSize(selfRecvs[k]->type);
    if (sb != rb)
      return invalidUsage("send to self of %zu bytes is matched with a receive from self of %zu bytes", sb, rb);
    exec::PlanStep st;
    st.op = schedule::Op::kCopy;
    st.index = static_cast<uint32_t>(plan.steps.size());
    st.hasSrc = st.hasDst = true;
    st.src = static_cast<const char*>(selfSends[k]->sendbuff);
    st.dst = static_cast<char*>(selfRecvs[k]->recvbuff);
    st.bytes = sb;
    plan.steps.push_back(st);
  }
  plan.tag = exec::kP2pTag;
  plan.stream = n > 0 ? ops[0].stream : nullptr;
  plan.seq = seq_;
  plan.opName = "send/recv";
  plan.scheduleName = "p2p";
  plan.bytes = total;
  return Status::ok();
}

}  // namespace theseus::comm
