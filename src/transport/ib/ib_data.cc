// IbComm's data path: CTS credits, RDMA writes with immediate, completions
// (the protocol is described in ib_comm.h).
#include <arpa/inet.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "transport/ib/ib_comm.h"
#include "transport/ib/ib_net.h"
#include "transport/ib/ib_socket_io.h"

namespace theseus::transport::ib {
namespace {

bool remoteStatus(ibv_wc_status s) {
  return s == IBV_WC_RETRY_EXC_ERR || s == IBV_WC_RNR_RETRY_EXC_ERR || s == IBV_WC_REM_ACCESS_ERR ||
         s == IBV_WC_REM_INV_REQ_ERR || s == IBV_WC_REM_OP_ERR || s == IBV_WC_REM_ABORT_ERR ||
         s == IBV_WC_RESP_TIMEOUT_ERR;
}

const char* kindName(uint64_t kind) {
  switch (kind) {
    case kCtsWrite: return "CTS write";
    case kCtsRecv: return "CTS receive";
    case kDataWrite: return "data write";
    case kDataRecv: return "data receive";
    case kFlushRead: return "flush read";
    default: return "unknown work request";
  }
}

}  // namespace

ncclResult_t IbComm::fail(Status s) {
  if (error_.isOk()) {
    error_ = std::move(s);
    TH_WARN("%s", error_.message().c_str());
  }
  return failed();
}

ncclResult_t IbComm::failed() const {
  ibSetLastError(error_.message());
  return error_.code();
}

IbRequest* IbComm::freeRequest() {
  for (IbRequest& r : requests_)
    if (r.kind == IbRequest::kFree) return &r;
  return nullptr;
}

// Drains the CQ; an IB failure (the port down, a failed completion) moves the connection to
// TCP when it can (ib_failover.cc). Every millisecond without completions it also looks at the
// set-up socket, where the peer announces a failover it saw first.
Status IbComm::poll() {
  if (mode_ != Mode::kIb) return progressTcp();
  if (!dev_->up.load(std::memory_order_relaxed))
    return failOver(remoteError("IB: %s: the port is down", where(-1).c_str()));
  // A move when the connection is away from home or the policy asks for one (no clock read otherwise).
  if (IbDevice* to = dev_ != home_ || home_->policyMove() != 0 ? moveTarget() : dev_; to != dev_) {
    if (to == home_)
      TH_INFO(log::kNet, "IB: %s: its own port %s:%d is usable again (up, and no policy moves traffic off it); the "
              "connection moves back to it", where(-1).c_str(), home_->name.c_str(), home_->port);
    else
      TH_INFO(log::kNet, "IB: %s: the policy moves traffic off its own port %s:%d; the connection moves to %s",
              where(-1).c_str(), home_->name.c_str(), home_->port, to != nullptr ? to->name.c_str() : "TCP");
    return failOver(Status::ok(), /*planned=*/true);
  }
  ibv_wc wcs[16];
  for (;;) {
    int n = ibv_poll_cq(cq_, 16, wcs);
    if (n < 0)
      return failOver(systemError("IB: %s: ibv_poll_cq failed (CQ overrun or device error)", where(-1).c_str()));
    for (int i = 0; i < n; ++i) {
      const ibv_wc& wc = wcs[i];
      if (wc.status != IBV_WC_SUCCESS) {
        int qp = -1;
        for (size_t q = 0; q < qps_.size(); ++q)
          if (qps_[q]->qp_num == wc.qp_num) qp = static_cast<int>(q);
        return failOver(errorStatus(remoteStatus(wc.status) ? ncclRemoteError : ncclSystemError,
                                    "IB: %s: %s completed with status %d (%s), vendor error 0x%x", where(qp).c_str(),
                                    kindName(wc.wr_id >> 56), static_cast<int>(wc.status),
                                    v_->statusText(wc.status), wc.vendor_err));
      }
      TH_CHECK(onCompletion(wc));
    }
    if (n == 16) continue;
    if (n == 0 && sock_ >= 0) {
      const uint64_t now = nowNs();
      if (now - lastSocketCheckNs_ >= 1000000) {
        lastSocketCheckNs_ = now;
        return checkSocket();
      }
    }
    return Status::ok();
  }
}

Status IbComm::onCompletion(const ibv_wc& wc) {
  const uint64_t kind = wc.wr_id >> 56, index = wc.wr_id & ((uint64_t{1} << 56) - 1);
  int qp = -1;
  for (size_t i = 0; i < qps_.size(); ++i)
    if (qps_[i]->qp_num == wc.qp_num) qp = static_cast<int>(i);
  switch (kind) {
    case kCtsRecv: {  // sender: the receiver posted a buffer (one credit)
      const uint32_t slot = ntohl(wc.imm_data);
      if ((wc.wc_flags & IBV_WC_WITH_IMM) == 0 || slot != ctsArrived_ % kFifoDepth)
        return remoteError("IB: %s: protocol error: CTS for slot %u where %llu was due", where(qp).c_str(), slot,
                           static_cast<unsigned long long>(ctsArrived_ % kFifoDepth));
      ++ctsArrived_;
      return postCtsReceive();
    }
    case kDataRecv: {  // receiver: one QP's chunk of the oldest message it has not delivered
      if (qp < 0 || (wc.wc_flags & IBV_WC_WITH_IMM) == 0)
        return remoteError("IB: %s: protocol error: a data write without immediate", where(qp).c_str());
      const uint64_t m = arrived_[static_cast<size_t>(qp)]++;
      IbRequest* r = bySlot_[m % kFifoDepth];
      if (r == nullptr || r->seq != m || r->pending <= 0)
        return remoteError("IB: %s: protocol error: data for message %llu, which was not posted", where(qp).c_str(),
                           static_cast<unsigned long long>(m));
      r->size += ntohl(wc.imm_data);
      if (--r->pending == 0) bySlot_[m % kFifoDepth] = nullptr;
      return postDataReceive(qp);
    }
    case kDataWrite: {  // sender: a chunk was acknowledged
      if (index >= kFifoDepth || requests_[index].kind != IbRequest::kSend || requests_[index].pending <= 0)
        return internalError("IB: %s: completion of a send that is not in flight", where(qp).c_str());
      --requests_[index].pending;
      return Status::ok();
    }
    case kCtsWrite:  // receiver: a CTS entry left; its slot may be reused
      ++ctsWritten_;
      return Status::ok();
    case kFlushRead: {  // receiver: a flush's read-back completed (ib_flush.cc)
      if (index >= kFifoDepth || requests_[index].kind != IbRequest::kFlush || requests_[index].pending <= 0)
        return internalError("IB: %s: completion of a flush that is not in flight", where(-1).c_str());
      --requests_[index].pending;
      return Status::ok();
    }
    default:
      return internalError("IB: %s: completion of an unknown work request 0x%llx", where(qp).c_str(),
                           static_cast<unsigned long long>(wc.wr_id));
  }
}

ncclResult_t IbComm::isend(void* data, size_t size, int tag, void* mhandle, void** request) {
  *request = nullptr;
  std::lock_guard lock(mu_);
  if (!error_.isOk()) return failed();
  if (Status s = poll(); !s.isOk()) return fail(s);
  // "Retry": failing over, until the receiver said where to resume; moving back to IB, until its
  // QPs are connected (credits it granted before the failover are void: it grants them again).
  if (mode_ == Mode::kFailingOver || mode_ == Mode::kRecovering) return ncclSuccess;
  if (mode_ == Mode::kTcp) {
    if (mhandle != nullptr && static_cast<IbMemory*>(mhandle)->device())
      return fail(remoteError("IB: %s runs over TCP since its HCA failed, and a message from GPU memory (GPUDirect "
                              "RDMA) cannot take that path", where(-1).c_str()));
    IbRequest* r = freeRequest();
    if (r == nullptr) return ncclSuccess;
    *r = IbRequest{IbRequest::kSend, this, 1, static_cast<int64_t>(size), sent_, static_cast<char*>(data), 0, tag, 0};
    sendBySlot_[sent_ % kFifoDepth] = r;
    tcpQueue_.push_back(r);
    ++sent_;
    *request = r;
    if (Status s = progressTcp(); !s.isOk()) return fail(s);
    return ncclSuccess;
  }
  if (ctsArrived_ <= sent_) return ncclSuccess;  // no credit yet: "retry"
  IbRequest* r = freeRequest();
  if (r == nullptr) return ncclSuccess;
  const wire::CtsEntry cts = fifo_[sent_ % kFifoDepth];
  if (cts.seq != static_cast<uint32_t>(sent_))
    return fail(remoteError("IB: %s: protocol error: CTS entry for message %u where %llu was due", where(0).c_str(),
                            cts.seq, static_cast<unsigned long long>(sent_)));
  if (cts.tag != tag)
    return fail(internalError("IB: %s: message %llu has tag %d but the receive posted for it tag %d", where(0).c_str(),
                              static_cast<unsigned long long>(sent_), tag, cts.tag));
  if (cts.size < 0 || static_cast<uint64_t>(cts.size) < size)
    return fail(invalidUsage("IB: %s: a message of %zu bytes for a receive of %lld bytes (truncated)",
                             where(0).c_str(), size, static_cast<long long>(cts.size)));
  if (size > 0 && mhandle == nullptr) return fail(internalError("IB: isend of %zu bytes without a registration", size));
  auto* mem = static_cast<IbMemory*>(mhandle);
  uint32_t lkey = 0;
  if (mem != nullptr) {
    auto mr = mem->on(dev_);  // made here only for the first message after a move to another HCA
    if (!mr.isOk()) return fail(mr.status().withContext("IB: " + where(-1)));
    lkey = mr.value()->lkey;
  }
  // Chunk i of the message goes on QP i; every QP carries one write (maybe empty) per message.
  const size_t nqps = qps_.size();
  const size_t chunk = ((size + nqps - 1) / nqps + 127) / 128 * 128;
  const uint64_t index = static_cast<uint64_t>(r - requests_);
  *r = IbRequest{IbRequest::kSend, this, static_cast<int>(nqps), static_cast<int64_t>(size), sent_,
                 static_cast<char*>(data), 0, tag, 0, mem};
  sendBySlot_[sent_ % kFifoDepth] = r;
  for (size_t q = 0; q < nqps; ++q) {
    const size_t off = std::min(size, q * chunk), len = std::min(size - off, chunk);
    ibv_sge sge{};
    sge.addr = reinterpret_cast<uintptr_t>(data) + off;
    sge.length = static_cast<uint32_t>(len);
    sge.lkey = lkey;
    ibv_send_wr wr{};
    wr.wr_id = wrId(kDataWrite, index);
    wr.sg_list = len > 0 ? &sge : nullptr;
    wr.num_sge = len > 0 ? 1 : 0;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(static_cast<uint32_t>(len));
    wr.wr.rdma.remote_addr = cts.addr + off;
    wr.wr.rdma.rkey = cts.rkey;
    ibv_send_wr* bad = nullptr;
    if (int rc = ibv_post_send(qps_[q], &wr, &bad))
      return fail(errnoStatus(rc, "IB: %s: posting a data write", where(static_cast<int>(q)).c_str()));
  }
  ++sent_;
  *request = r;
  return ncclSuccess;
}

ncclResult_t IbComm::irecv(void* data, size_t size, int tag, void* mhandle, void** request) {
  *request = nullptr;
  std::lock_guard lock(mu_);
  if (!error_.isOk()) return failed();
  if (Status s = poll(); !s.isOk()) return fail(s);
  if (bySlot_[posted_ % kFifoDepth] != nullptr) return ncclSuccess;
  if (mode_ == Mode::kIb && posted_ - ctsWritten_ >= kFifoDepth) return ncclSuccess;
  IbRequest* r = freeRequest();
  if (r == nullptr) return ncclSuccess;
  if (size > 0 && mhandle == nullptr) return fail(internalError("IB: irecv of %zu bytes without a registration", size));
  auto* mem = static_cast<IbMemory*>(mhandle);
  if (mode_ == Mode::kTcp && mem != nullptr && mem->device())
    return fail(remoteError("IB: %s runs over TCP since its HCA failed, and a receive into GPU memory (GPUDirect "
                            "RDMA) cannot take that path", where(-1).c_str()));
  // Over the socket a message is one piece; on IB (or once a move back to it completes) one per QP.
  *r = IbRequest{IbRequest::kRecv, this, static_cast<int>(mode_ == Mode::kTcp ? 1 : qps_.size()), 0, posted_,
                 static_cast<char*>(data), static_cast<int64_t>(size), tag, 0, mem};
  bySlot_[posted_ % kFifoDepth] = r;
  ++posted_;
  *request = r;
  // On IB the receive is announced to the sender now; otherwise the socket fills it, in order
  // (and a move back to IB announces it then).
  Status s = mode_ == Mode::kIb ? postCts(r) : progressTcp();
  if (!s.isOk()) return fail(s);
  return ncclSuccess;
}

Status IbComm::postCts(IbRequest* r) {
  const uint64_t slot = r->seq % kFifoDepth;
  uint32_t rkey = 0;
  if (r->mem != nullptr) {
    TH_ASSIGN(ibv_mr* mr, r->mem->on(dev_));  // the key in the HCA the connection uses now
    rkey = mr->rkey;
  }
  wire::CtsEntry& e = ctsLocal_[slot];
  e.addr = reinterpret_cast<uintptr_t>(r->data);
  e.rkey = rkey;
  e.seq = static_cast<uint32_t>(r->seq);
  e.size = r->capacity;
  e.tag = r->tag;
  e.reserved = 0;
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(&e);
  sge.length = sizeof(e);
  sge.lkey = ctsMr_->lkey;
  ibv_send_wr wr{};
  wr.wr_id = wrId(kCtsWrite, slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(static_cast<uint32_t>(slot));
  wr.wr.rdma.remote_addr = remote_.fifoAddr + slot * sizeof(wire::CtsEntry);
  wr.wr.rdma.rkey = remote_.fifoRkey;
  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(qps_[0], &wr, &bad))
    return errnoStatus(rc, "IB: %s: posting a CTS write", where(0).c_str());
  return Status::ok();
}

ncclResult_t IbComm::test(IbRequest* r, int* done, int* size) {
  *done = 0;
  std::lock_guard lock(mu_);
  if (!error_.isOk()) return failed();
  if (Status s = poll(); !s.isOk()) return fail(s);
  if (r->kind == IbRequest::kFlush && r->pending > 0 && mode_ != Mode::kIb)
    return fail(remoteError("IB: %s: a flush of GPU memory was cut off: the connection left its HCA",
                            where(-1).c_str()));
  if (r->pending > 0) return ncclSuccess;
  *done = 1;
  if (size != nullptr) *size = static_cast<int>(std::min<int64_t>(r->size, INT32_MAX));
  r->kind = IbRequest::kFree;
  return ncclSuccess;
}

}  // namespace theseus::transport::ib
