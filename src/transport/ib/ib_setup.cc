// IbComm's resources and QP state changes (the protocol is ib_comm.h's).
#include <arpa/inet.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

#include "common/log.h"
#include "transport/ib/ib_comm.h"
#include "transport/ib/ib_settings.h"

namespace theseus::transport::ib {
IbComm::~IbComm() {
  destroyQueues();
  if (dev_ != home_) home_->away.fetch_sub(1);
  if (fifoMr_ != nullptr) dev_->mrs->release(fifoMr_);
  if (ctsMr_ != nullptr) dev_->mrs->release(ctsMr_);
  if (sock_ >= 0) ::close(sock_);
  std::free(fifo_);
  std::free(ctsLocal_);
}

void IbComm::destroyQueues() {
  destroyFlushQp();
  for (ibv_qp* qp : qps_)
    if (qp != nullptr && v_->destroyQp(qp) != 0) TH_WARN("IB: ibv_destroy_qp failed: %s", strerror(errno));
  qps_.clear();
  if (cq_ != nullptr && v_->destroyCq(cq_) != 0) TH_WARN("IB: ibv_destroy_cq failed: %s", strerror(errno));
  cq_ = nullptr;
}

Status IbComm::createQps(int nqps) {
  TH_CHECK(createQueues(nqps));
  const size_t fifoBytes = sizeof(wire::CtsEntry) * kFifoDepth;
  void* mem = nullptr;
  if (posix_memalign(&mem, 4096, fifoBytes) != 0) return systemError("IB: out of memory for a CTS FIFO");
  memset(mem, 0, fifoBytes);
  if (side_ == kSender) fifo_ = static_cast<wire::CtsEntry*>(mem);
  else ctsLocal_ = static_cast<wire::CtsEntry*>(mem);
  TH_ASSIGN(ibv_mr* mr, dev_->mrs->acquire(mem, fifoBytes));
  (side_ == kSender ? fifoMr_ : ctsMr_) = mr;
  return Status::ok();
}

Status IbComm::createQueues(int nqps) {
  const int depth = kFifoDepth;
  const int cqe = 2 * depth * (nqps + 1) + 8;
  errno = 0;
  cq_ = v_->createCq(dev_->context, cqe, nullptr, nullptr, 0);
  if (cq_ == nullptr) return errnoStatus(errno ? errno : ENOMEM, "IB: %s: ibv_create_cq(%d)", dev_->describe().c_str(), cqe);
  for (int i = 0; i < nqps; ++i) {
    TH_ASSIGN(ibv_qp* qp, newQp(depth));
    qps_.push_back(qp);
  }
  arrived_.assign(static_cast<size_t>(nqps), 0);
  return Status::ok();
}

Result<ibv_qp*> IbComm::newQp(int depth) {
  const IbSettings& s = IbSettings::get();
  ibv_qp_init_attr init{};
  init.send_cq = cq_;
  init.recv_cq = cq_;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = static_cast<uint32_t>(depth);
  init.cap.max_recv_wr = static_cast<uint32_t>(depth);
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  errno = 0;
  ibv_qp* qp = v_->createQp(dev_->pd, &init);
  if (qp == nullptr) return errnoStatus(errno ? errno : ENOMEM, "IB: %s: ibv_create_qp", dev_->describe().c_str());
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = static_cast<uint16_t>(s.pkeyIndex);
  a.port_num = static_cast<uint8_t>(dev_->port);
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE;
  if (int rc = v_->modifyQp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
    const uint32_t n = qp->qp_num;
    v_->destroyQp(qp);
    return errnoStatus(rc, "IB: %s: QP %u to INIT", dev_->describe().c_str(), n);
  }
  return qp;
}

wire::ConnInfo IbComm::localInfo() const {
  wire::ConnInfo info{};
  info.magic = wire::kInfoMagic;
  info.version = wire::kVersion;
  info.nqps = static_cast<uint32_t>(qps_.size());
  for (size_t i = 0; i < qps_.size(); ++i) info.qpn[i] = qps_[i]->qp_num;
  info.lid = dev_->lid;
  info.roce = dev_->roce ? 1 : 0;
  info.mtu = static_cast<uint8_t>(dev_->mtu);
  info.depth = kFifoDepth;
  memcpy(info.gid, dev_->gid.raw, sizeof(info.gid));
  if (side_ == kSender) {
    info.fifoAddr = reinterpret_cast<uintptr_t>(fifo_);
    info.fifoRkey = fifoMr_->rkey;
  }
  snprintf(info.device, sizeof(info.device), "%s", dev_->name.c_str());
  return info;
}

Status IbComm::connectQps(const wire::ConnInfo& remote) {
  const char* bad = nullptr;
  if (remote.magic != wire::kInfoMagic) bad = "not an IB connection message (bad magic)";
  else if (remote.version != wire::kVersion) bad = "another version of Theseus' IB protocol";
  else if (remote.nqps != qps_.size()) bad = "a different NCCL_IB_QPS_PER_CONNECTION";
  else if (remote.depth != kFifoDepth) bad = "a different FIFO depth";
  else if (remote.roce != (dev_->roce ? 1 : 0)) bad = "a port of the other link layer (IB and RoCE do not connect)";
  else if (side_ == kReceiver && remote.fifoAddr == 0) bad = "no CTS FIFO";
  if (bad != nullptr)
    return remoteError("IB: %s: the peer %s sent %s", dev_->describe().c_str(), peer_.c_str(), bad);
  remote_ = remote;
  remote_.device[sizeof(remote_.device) - 1] = '\0';
  for (size_t i = 0; i < qps_.size(); ++i) TH_CHECK(connectQp(qps_[i], remote.qpn[i], remote, static_cast<int>(i)));
  // The receives the peer's writes consume (ib_comm.h): the sender's CTS on QP 0, the receiver's data on every QP.
  for (int k = 0; k < kFifoDepth; ++k) {
    if (side_ == kSender) {
      TH_CHECK(postCtsReceive());
    } else {
      for (size_t i = 0; i < qps_.size(); ++i) TH_CHECK(postDataReceive(static_cast<int>(i)));
    }
  }
  return Status::ok();
}

Status IbComm::connectQp(ibv_qp* qp, uint32_t qpn, const wire::ConnInfo& remote, int index) {
  const IbSettings& s = IbSettings::get();
  ibv_mtu mtu = static_cast<ibv_mtu>(std::min<int>(dev_->mtu, remote.mtu));
  bool global = dev_->roce || remote.lid == 0 || s.gidIndex >= 0;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = mtu;
  a.dest_qp_num = qpn;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.dlid = remote.lid;
  a.ah_attr.sl = static_cast<uint8_t>(s.serviceLevel);
  a.ah_attr.port_num = static_cast<uint8_t>(dev_->port);
  if (global) {
    a.ah_attr.is_global = 1;
    memcpy(a.ah_attr.grh.dgid.raw, remote.gid, sizeof(remote.gid));
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(dev_->gidIndex);
    a.ah_attr.grh.hop_limit = 255;
    a.ah_attr.grh.traffic_class = static_cast<uint8_t>(s.trafficClass);
    a.ah_attr.grh.flow_label = 0;
  }
  int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  if (int rc = v_->modifyQp(qp, &a, mask)) return errnoStatus(rc, "IB: %s to RTR", where(index).c_str());
  ibv_qp_attr r{};
  r.qp_state = IBV_QPS_RTS;
  r.timeout = static_cast<uint8_t>(s.timeout);
  r.retry_cnt = static_cast<uint8_t>(s.retryCount);
  r.rnr_retry = 7;
  r.sq_psn = 0;
  r.max_rd_atomic = 1;
  mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
  if (int rc = v_->modifyQp(qp, &r, mask)) return errnoStatus(rc, "IB: %s to RTS", where(index).c_str());
  return Status::ok();
}

Status IbComm::postCtsReceive() {
  ibv_recv_wr wr{};
  wr.wr_id = wrId(kCtsRecv, 0);
  ibv_recv_wr* bad = nullptr;
  if (int rc = ibv_post_recv(qps_[0], &wr, &bad)) return errnoStatus(rc, "IB: %s: posting a CTS receive", where(0).c_str());
  return Status::ok();
}

Status IbComm::postDataReceive(int qp) {
  ibv_recv_wr wr{};
  wr.wr_id = wrId(kDataRecv, static_cast<uint64_t>(qp));
  ibv_recv_wr* bad = nullptr;
  if (int rc = ibv_post_recv(qps_[static_cast<size_t>(qp)], &wr, &bad))
    return errnoStatus(rc, "IB: %s: posting a data receive", where(qp).c_str());
  return Status::ok();
}

std::string IbComm::where(int qp) const {
  std::string s = dev_->name + ":" + std::to_string(dev_->port);
  if (qp >= 0 && qp < static_cast<int>(qps_.size())) s += " QP " + std::to_string(qps_[static_cast<size_t>(qp)]->qp_num);
  if (!peer_.empty()) s += " (" + std::string(side_ == kSender ? "to " : "from ") + peer_ + ")";
  return s;
}

}  // namespace theseus::transport::ib
