// IbComm's move back to IB after a failover, once the ports are up again (the
// protocol is described in ib_comm.h).
#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "transport/ib/ib_comm.h"
#include "transport/ib/ib_devices.h"
#include "transport/ib/ib_socket_io.h"

namespace theseus::transport::ib {

Result<bool> IbComm::readInfo() {
  while (infoDone_ < sizeof(info_)) {
    auto n = moveNow(sock_, reinterpret_cast<char*>(&info_) + infoDone_, sizeof(info_) - infoDone_, false,
                     "reading the peer's new QP numbers");
    if (!n.isOk()) return n.status().withContext("IB: " + where(-1));
    if (n.value() == 0) return false;
    infoDone_ += n.value();
  }
  return true;
}

// The home port unless it is down or the policy moves its traffic away; else the port the
// connection is on, if fine; else another HCA port of the host with the same link layer; with
// no such port, a home port the policy only asks to leave for another NIC (a slow port beats
// TCP), else none (TCP).
IbDevice* IbComm::usableDevice() const {
  const int move = home_->policyMove();
  auto fine = [&](IbDevice* d) { return d->up.load(std::memory_order_relaxed) && (d != home_ || move == 0); };
  if (fine(home_)) return home_;
  if (otherHcas_) {
    if (dev_ != home_ && fine(dev_)) return dev_;  // stay where it went
    for (IbDevice* d : IbDevices::get().devices())
      if (d != home_ && d->roce == home_->roce && fine(d)) return d;
  }
  if (move == 1 && home_->up.load(std::memory_order_relaxed)) return home_;
  return nullptr;
}

IbDevice* IbComm::moveTarget() const {
  if (nowNs() < nextRecoveryNs_) return dev_;
  IbDevice* to = usableDevice();
  // Off a port that is up only for a port that is up (or to TCP when the policy says so): a move
  // because the peer's port failed is the failover's, not this.
  return to == nullptr && home_->policyMove() != 2 ? dev_ : to;
}

Status IbComm::switchTo(IbDevice* to) {
  if (to == dev_) return Status::ok();
  IbDevice* from = dev_;
  ibv_mr*& mine = side_ == kSender ? fifoMr_ : ctsMr_;
  void* fifo = side_ == kSender ? static_cast<void*>(fifo_) : static_cast<void*>(ctsLocal_);
  TH_ASSIGN(ibv_mr* mr, to->mrs->acquire(fifo, sizeof(wire::CtsEntry) * kFifoDepth));
  from->mrs->release(mine);
  mine = mr;
  dev_ = to;
  if (from == home_) home_->away.fetch_add(1);
  if (to == home_) home_->away.fetch_sub(1);
  const bool homeUp = home_->up.load(std::memory_order_relaxed);
  const char* why = to == home_ ? "back to its own port"
                    : homeUp    ? "to another HCA: the policy moves traffic off its own port"
                                : "to another HCA while its own port is down";
  // A move after a failure is a WARN; a planned one (home, or the policy's) is news, not trouble.
  if (planned_)
    TH_INFO(log::kNet, "IB: %s:%d -> %s:%d: the connection %s %s moves %s", from->name.c_str(), from->port,
            to->name.c_str(), to->port, side_ == kSender ? "to" : "from", peer_.c_str(), why);
  else
    TH_WARN("IB: %s:%d -> %s:%d: the connection %s %s moves %s", from->name.c_str(), from->port, to->name.c_str(),
            to->port, side_ == kSender ? "to" : "from", peer_.c_str(), why);
  return Status::ok();
}

// After a failure a WARN (the job ran on TCP meanwhile); after a planned move (home, or one a
// policy asked for) an INFO: nothing failed.
void IbComm::logBackOnIb(uint64_t at) const {
  if (planned_)
    TH_INFO(log::kNet, "IB: %s: the connection moved back to IB at message %llu (a planned move)", where(-1).c_str(),
            static_cast<unsigned long long>(at));
  else
    TH_WARN("IB: %s: the connection moved back to IB at message %llu", where(-1).c_str(),
            static_cast<unsigned long long>(at));
}

Status IbComm::maybeRecover() {
  if (side_ != kSender || mode_ != Mode::kTcp || !tcpQueue_.empty() || sock_ < 0) return Status::ok();
  IbDevice* to = usableDevice();
  if (to == nullptr || (to == dev_ && nowNs() < nextRecoveryNs_)) return Status::ok();
  // QPs made for a RECOVER the receiver refused were never connected: the next one reuses them
  // (while a policy keeps the receiver on TCP, the sender asks every 0.5 s).
  const bool again = freshQueues_ && to == dev_ && dev_->downEvents.load() == freshDownEvents_;
  if (!again) {
    const int nqps = static_cast<int>(qps_.size());
    destroyQueues();
    TH_CHECK(switchTo(to));
    TH_CHECK(createQueues(nqps));
    freshQueues_ = true;
    freshDownEvents_ = dev_->downEvents.load();  // a port that goes down takes them to the error state
  }
  memset(fifo_, 0, sizeof(wire::CtsEntry) * kFifoDepth);
  wire::TcpHeader h{wire::kTcpMagic, wire::kRecover, sent_, 0, 0, 0};
  const wire::ConnInfo mine = localInfo();
  TH_CHECK(sendAll(&h, sizeof(h), "sending RECOVER"));
  TH_CHECK(sendAll(&mine, sizeof(mine), "sending RECOVER"));
  if (again)
    TH_TRACE(log::kNet, "IB: %s: asking the peer again to move back to IB", where(-1).c_str());
  else
    TH_INFO(log::kNet, "IB: %s: a port is up; asking the peer to move back to IB", where(-1).c_str());
  infoDone_ = 0;
  mode_ = Mode::kRecovering;
  return Status::ok();
}

Status IbComm::onRecoverMessage() {
  const uint32_t type = hdr_.type;
  if (side_ == kSender) {
    if (type == wire::kRefused) {  // the receiver's port is still down: try again later
      hdrDone_ = 0;
      mode_ = Mode::kTcp;
      // A receiver whose policy keeps it on TCP may be let go at any epoch: ask again at the
      // first step of the backoff, not later and later.
      const bool policy = (hdr_.tag & wire::kPolicy) != 0;
      if (!policy) recoveryBackoffMs_ = std::min<int64_t>(recoveryBackoffMs_ * 2, 10000);
      nextRecoveryNs_ = nowNs() + static_cast<uint64_t>(policy ? 500 : recoveryBackoffMs_) * 1000000;
      return Status::ok();
    }
    if (type != wire::kRecovered)
      return remoteError("IB: %s: protocol error: message %u where RECOVERED was due", where(-1).c_str(), type);
    TH_ASSIGN(bool complete, readInfo());
    if (!complete) return Status::ok();  // hdr_ stays complete: the rest comes with the next call
    hdrDone_ = 0;
    TH_CHECK(connectQps(info_));  // RTR, RTS, the CTS receives posted
    freshQueues_ = false;
    ctsArrived_ = sent_;          // the receiver announces its receives again from here
    TH_CHECK(sendControl(wire::kReady, sent_));
    mode_ = Mode::kIb;
    recoveryBackoffMs_ = 500;
    logBackOnIb(sent_);
    return Status::ok();
  }
  if (type == wire::kReady) {  // the sender's QPs are ready: announce every receive not yet filled
    hdrDone_ = 0;
    if (mode_ != Mode::kRecovering)
      return remoteError("IB: %s: protocol error: READY without a move back", where(-1).c_str());
    ctsWritten_ = tcpNext_;
    mode_ = Mode::kIb;
    for (uint64_t seq = tcpNext_; seq < posted_; ++seq) {
      IbRequest* r = bySlot_[seq % kFifoDepth];
      if (r == nullptr || r->seq != seq) continue;
      TH_CHECK(postCts(r));
    }
    logBackOnIb(tcpNext_);
    return Status::ok();
  }
  if (type != wire::kRecover || hdr_.seq != tcpNext_)
    return remoteError("IB: %s: protocol error: message %u (seq %llu) where message %llu was due", where(-1).c_str(),
                       type, static_cast<unsigned long long>(hdr_.seq), static_cast<unsigned long long>(tcpNext_));
  TH_ASSIGN(bool complete, readInfo());
  if (!complete) return Status::ok();
  hdrDone_ = 0;
  infoDone_ = 0;
  IbDevice* to = usableDevice();
  if (to == nullptr)
    return sendControl(wire::kRefused, tcpNext_, home_->up.load(std::memory_order_relaxed) ? wire::kPolicy : 0);
  destroyQueues();
  TH_CHECK(switchTo(to));
  TH_CHECK(createQueues(static_cast<int>(info_.nqps)));
  TH_CHECK(connectQps(info_));  // RTR, RTS, the data receives posted
  std::fill(arrived_.begin(), arrived_.end(), tcpNext_);
  for (IbRequest& r : requests_) {
    if (r.kind == IbRequest::kRecv && r.pending > 0 && r.seq >= tcpNext_) {
      r.pending = static_cast<int>(qps_.size());
      r.size = 0;
      r.moved = 0;
    }
  }
  wire::TcpHeader h{wire::kTcpMagic, wire::kRecovered, tcpNext_, 0, 0, 0};
  const wire::ConnInfo mine = localInfo();
  TH_CHECK(sendAll(&h, sizeof(h), "sending RECOVERED"));
  TH_CHECK(sendAll(&mine, sizeof(mine), "sending RECOVERED"));
  mode_ = Mode::kRecovering;  // receives wait for READY before they are announced
  return Status::ok();
}

}  // namespace theseus::transport::ib
