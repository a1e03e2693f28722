// IbComm's failover to TCP over the set-up socket (the protocol is described in ib_comm.h).
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <arpa/inet.h>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "transport/ib/ib_comm.h"
#include "transport/ib/ib_settings.h"
#include "transport/ib/ib_socket_io.h"

namespace theseus::transport::ib {

void IbComm::adoptSocket(int fd) {
  sock_ = fd;
  failoverEnabled_ = IbSettings::get().failover;
  otherHcas_ = IbSettings::get().failoverHca;
}

Status IbComm::sendAll(const void* data, size_t bytes, const char* what) {
  size_t done = 0;
  // A few hundred bytes at a moment the sender's queue is empty: the kernel takes them at once,
  // or within a few retries.
  for (int spins = 0; done < bytes; ++spins) {
    auto n = moveNow(sock_, const_cast<char*>(static_cast<const char*>(data)) + done, bytes - done, true, what);
    if (!n.isOk()) return n.status().withContext("IB: " + where(-1));
    done += n.value();
    if (n.value() == 0) {
      if (spins > 100000) return remoteError("IB: %s: %s: the socket takes nothing", where(-1).c_str(), what);
      usleep(10);
    }
  }
  return Status::ok();
}

Status IbComm::sendControl(wire::TcpType type, uint64_t seq, int32_t flags) {
  wire::TcpHeader h{wire::kTcpMagic, type, seq, 0, flags, 0};
  return sendAll(&h, sizeof(h), "sending a failover message");
}

void IbComm::quiesceQps() {
  for (ibv_qp* qp : qps_) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    v_->modifyQp(qp, &a, IBV_QP_STATE);
  }
  // What completed before the QPs stopped still counts; errors and flushes do not.
  ibv_wc wcs[16];
  int n;
  while ((n = ibv_poll_cq(cq_, 16, wcs)) > 0) {
    for (int i = 0; i < n; ++i) {
      const ibv_wc& wc = wcs[i];
      if (wc.status != IBV_WC_SUCCESS) continue;
      const uint64_t kind = wc.wr_id >> 56, index = wc.wr_id & ((uint64_t{1} << 56) - 1);
      if (kind == kDataWrite && index < kFifoDepth && requests_[index].pending > 0) {
        --requests_[index].pending;
      } else if (kind == kDataRecv) {
        for (size_t q = 0; q < qps_.size(); ++q) {
          if (qps_[q]->qp_num != wc.qp_num) continue;
          const uint64_t m = arrived_[q]++;
          IbRequest* r = bySlot_[m % kFifoDepth];
          if (r != nullptr && r->seq == m && r->pending > 0) {
            r->size += ntohl(wc.imm_data);
            if (--r->pending == 0) bySlot_[m % kFifoDepth] = nullptr;
          }
        }
      }
    }
  }
}

Status IbComm::failOver(const Status& why, bool planned) {
  if (!failoverEnabled_ || sock_ < 0) return planned ? Status::ok() : why;
  if (mode_ != Mode::kIb) return Status::ok();
  planned_ = planned;
  if (planned) {  // the side that moves said why; the other was told by the peer
    nextRecoveryNs_ = nowNs();
  } else {
    TH_WARN("%s; the connection moves to TCP", why.message().c_str());
    dev_->failovers.fetch_add(1);
    nextRecoveryNs_ = nowNs() + static_cast<uint64_t>(recoveryBackoffMs_) * 1000000;
  }
  quiesceQps();
  if (side_ == kSender) {
    TH_CHECK(sendControl(wire::kFailover, sent_, planned ? wire::kPlanned : 0));
    mode_ = Mode::kFailingOver;
    return progressTcp();
  }
  uint64_t first = *std::min_element(arrived_.begin(), arrived_.end());
  const IbDevice* next = usableDevice();
  TH_CHECK(sendControl(wire::kResume, first,
                       (planned ? wire::kPlanned : 0) | (next != nullptr && next != dev_ ? wire::kPortUp : 0)));
  for (IbRequest& r : requests_) {
    if (r.kind == IbRequest::kRecv && r.pending > 0 && r.seq >= first) {
      r.pending = 1;  // the whole message comes again, over the socket
      r.size = 0;
      r.moved = 0;
    }
  }
  tcpNext_ = first;
  mode_ = Mode::kTcp;
  return progressTcp();
}

Status IbComm::onResume(uint64_t first, int32_t flags) {
  const bool planned = (flags & wire::kPlanned) != 0;
  if (first > sent_)
    return remoteError("IB: %s: the peer asked to resume at message %llu but only %llu were sent", where(-1).c_str(),
                       static_cast<unsigned long long>(first), static_cast<unsigned long long>(sent_));
  if (mode_ == Mode::kIb) {  // the receiver saw the failure first, or moves back to its own port
    planned_ = planned;
    if (planned) {
      TH_INFO(log::kNet, "IB: %s: the peer moves the connection to another port of its own (planned)",
              where(-1).c_str());
      nextRecoveryNs_ = nowNs();
    } else {
      TH_WARN("IB: %s: the peer's IB path failed; the connection moves to TCP", where(-1).c_str());
      dev_->failovers.fetch_add(1);
      const bool now = (flags & wire::kPortUp) != 0;  // the receiver moved on to another port of its own
      nextRecoveryNs_ = nowNs() + (now ? 0 : static_cast<uint64_t>(recoveryBackoffMs_) * 1000000);
    }
    quiesceQps();
  }
  tcpQueue_.clear();
  for (uint64_t seq = first; seq < sent_; ++seq) {
    IbRequest* r = sendBySlot_[seq % kFifoDepth];
    if (r == nullptr || r->kind != IbRequest::kSend || r->seq != seq || r->pending <= 0)
      return remoteError("IB: %s: the peer asked to resume at message %llu, which this side already completed",
                         where(-1).c_str(), static_cast<unsigned long long>(seq));
    if (r->mem != nullptr && r->mem->device())
      return remoteError("IB: %s: message %llu lies in GPU memory (GPUDirect RDMA) and cannot be re-sent over TCP",
                         where(-1).c_str(), static_cast<unsigned long long>(seq));
    r->pending = 1;
    r->moved = 0;
    tcpQueue_.push_back(r);
  }
  for (IbRequest& r : requests_)  // below `first` the receiver has everything: those sends are done
    if (r.kind == IbRequest::kSend && r.seq < first) r.pending = 0;
  hdrSent_ = 0;
  mode_ = Mode::kTcp;
  return Status::ok();
}

Status IbComm::readHeader(bool* complete) {
  *complete = false;
  while (hdrDone_ < sizeof(hdr_)) {
    auto n = moveNow(sock_, reinterpret_cast<char*>(&hdr_) + hdrDone_, sizeof(hdr_) - hdrDone_, false,
                     "reading the failover socket");
    if (!n.isOk()) return n.status().withContext("IB: " + where(-1));
    if (n.value() == 0) return Status::ok();
    hdrDone_ += n.value();
  }
  if (hdr_.magic != wire::kTcpMagic || hdr_.type < wire::kFailover || hdr_.type > wire::kReady)
    return remoteError("IB: %s: protocol error: garbage on the failover socket", where(-1).c_str());
  *complete = true;
  return Status::ok();
}

Status IbComm::checkSocket() {
  if (sock_ < 0) return Status::ok();
  bool complete = false;
  Status s = readHeader(&complete);
  if (!s.isOk()) {
    // The peer closed its end (its comm is gone): nothing to fail over to any more.
    ::close(sock_);
    sock_ = -1;
    return Status::ok();
  }
  if (!complete) return Status::ok();
  hdrDone_ = 0;
  const bool planned = (hdr_.tag & wire::kPlanned) != 0;
  if (side_ == kSender && hdr_.type == wire::kResume) return onResume(hdr_.seq, hdr_.tag);
  if (side_ == kReceiver && hdr_.type == wire::kFailover) {
    if (planned)
      TH_INFO(log::kNet, "IB: %s: the peer moves the connection to another port of its own (planned)",
              where(-1).c_str());
    return failOver(remoteError("IB: %s: the peer's IB path failed", where(-1).c_str()), planned);
  }
  return remoteError("IB: %s: protocol error: unexpected message %u on the failover socket", where(-1).c_str(),
                     hdr_.type);
}

Status IbComm::progressTcp() {
  if (side_ == kSender) {
    if (mode_ == Mode::kRecovering) {
      bool complete = false;
      TH_CHECK(readHeader(&complete));
      if (!complete) return Status::ok();
      return onRecoverMessage();
    }
    if (mode_ == Mode::kFailingOver) {
      bool complete = false;
      TH_CHECK(readHeader(&complete));
      if (!complete) return Status::ok();
      hdrDone_ = 0;
      if (hdr_.type != wire::kResume)
        return remoteError("IB: %s: protocol error: message %u where RESUME was due", where(-1).c_str(), hdr_.type);
      TH_CHECK(onResume(hdr_.seq, hdr_.tag));
    }
    while (!tcpQueue_.empty()) {
      IbRequest* r = tcpQueue_.front();
      wire::TcpHeader h{wire::kTcpMagic, wire::kData, r->seq, r->size, r->tag, 0};
      while (hdrSent_ < sizeof(h)) {
        auto n = moveNow(sock_, reinterpret_cast<char*>(&h) + hdrSent_, sizeof(h) - hdrSent_, true, "sending over TCP");
        if (!n.isOk()) return n.status().withContext("IB: " + where(-1));
        if (n.value() == 0) return Status::ok();
        hdrSent_ += n.value();
      }
      while (r->moved < static_cast<size_t>(r->size)) {
        auto n = moveNow(sock_, r->data + r->moved, static_cast<size_t>(r->size) - r->moved, true, "sending over TCP");
        if (!n.isOk()) return n.status().withContext("IB: " + where(-1));
        if (n.value() == 0) return Status::ok();
        r->moved += n.value();
      }
      r->pending = 0;
      tcpQueue_.erase(tcpQueue_.begin());
      hdrSent_ = 0;
    }
    return maybeRecover();
  }
  for (;;) {
    bool complete = false;
    if (sock_ < 0) return Status::ok();  // the sender closed its end after its last message
    const size_t before = hdrDone_;
    Status hs = readHeader(&complete);
    if (!hs.isOk()) {
      // A close at a message boundary is the sender's comm going away (its last message arrived);
      // as on IB, that is no error here: a peer that died is the bootstrap's to report.
      if (before != 0 || hdrDone_ != 0) return hs;
      ::close(sock_);
      sock_ = -1;
      return Status::ok();
    }
    if (!complete) return Status::ok();
    if (hdr_.type == wire::kFailover) {  // the sender's own notice, crossed with our RESUME
      hdrDone_ = 0;
      continue;
    }
    if (hdr_.type == wire::kRecover || hdr_.type == wire::kReady) {
      TH_CHECK(onRecoverMessage());
      if (mode_ == Mode::kIb) return Status::ok();
      if (hdrDone_ != 0) return Status::ok();  // the RECOVER's QP numbers are still on their way
      continue;
    }
    if (hdr_.type != wire::kData || hdr_.seq != tcpNext_)
      return remoteError("IB: %s: protocol error: message %llu of type %u where message %llu was due",
                         where(-1).c_str(), static_cast<unsigned long long>(hdr_.seq), hdr_.type,
                         static_cast<unsigned long long>(tcpNext_));
    IbRequest* r = bySlot_[hdr_.seq % kFifoDepth];
    if (r == nullptr || r->seq != hdr_.seq) return Status::ok();  // its receive is not posted yet
    if (hdr_.size < 0 || hdr_.size > r->capacity)
      return invalidUsage("IB: %s: a message of %lld bytes for a receive of %lld bytes (truncated)", where(-1).c_str(),
                          static_cast<long long>(hdr_.size), static_cast<long long>(r->capacity));
    if (hdr_.tag != r->tag)
      return internalError("IB: %s: message %llu has tag %d but the receive posted for it tag %d", where(-1).c_str(),
                           static_cast<unsigned long long>(hdr_.seq), hdr_.tag, r->tag);
    if (r->mem != nullptr && r->mem->device() && hdr_.size > 0)
      return remoteError("IB: %s runs over TCP since its HCA failed, and message %llu was to land in GPU memory "
                         "(GPUDirect RDMA), which the CPU cannot write", where(-1).c_str(),
                         static_cast<unsigned long long>(hdr_.seq));
    while (r->moved < static_cast<size_t>(hdr_.size)) {
      auto n = moveNow(sock_, r->data + r->moved, static_cast<size_t>(hdr_.size) - r->moved, false, "receiving over TCP");
      if (!n.isOk()) return n.status().withContext("IB: " + where(-1));
      if (n.value() == 0) return Status::ok();
      r->moved += n.value();
    }
    r->size = hdr_.size;
    r->pending = 0;
    bySlot_[hdr_.seq % kFifoDepth] = nullptr;
    ++tcpNext_;
    hdrDone_ = 0;
  }
}

}  // namespace theseus::transport::ib
