// IbComm's flush of receives into GPU memory (GPUDirect RDMA; ib_comm.h).
//
// A receive's completion says the HCA wrote the bytes, not that the GPU sees
// them: on GPUs before Hopper its posted PCIe writes may still be on their
// way when the proxy's flag store (a later CPU write) tells the kernel to read
// them. An RDMA read from the same memory cannot complete before the writes
// issued ahead of it landed (PCIe ordering: a read response never passes
// earlier posted writes), so iflush reads the buffer's first byte back into a
// host word through a QP of this comm connected to itself, and the flush is
// done when that read completed. One read per flushed message; its completion
// arrives on the comm's CQ like every other and is counted on its request.
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "transport/ib/ib_comm.h"
#include "transport/ib/ib_net.h"
#include "transport/ib/ib_settings.h"

namespace theseus::transport::ib {

Status IbComm::createFlushQp() {
  TH_ASSIGN(flushMr_, dev_->mrs->acquire(&flushWord_, sizeof(flushWord_)));
  TH_ASSIGN(flushQp_, newQp(kFifoDepth));
  // To itself: this port's own address and QP number.
  wire::ConnInfo self = localInfo();
  return connectQp(flushQp_, flushQp_->qp_num, self, -1);
}

void IbComm::destroyFlushQp() {
  if (flushQp_ != nullptr && v_->destroyQp(flushQp_) != 0) TH_WARN("IB: ibv_destroy_qp failed: %s", strerror(errno));
  flushQp_ = nullptr;
  if (flushMr_ != nullptr) dev_->mrs->release(flushMr_);
  flushMr_ = nullptr;
}

ncclResult_t IbComm::iflush(void* data, int size, IbMemory* mem, void** request) {
  *request = nullptr;
  if (mem == nullptr || !mem->device() || size <= 0 || IbSettings::get().gdrFlushDisable) return ncclSuccess;
  std::lock_guard lock(mu_);
  if (!error_.isOk()) return failed();
  if (side_ != kReceiver) return fail(internalError("IB: %s: iflush on a send comm", where(-1).c_str()));
  if (mode_ != Mode::kIb)
    return fail(remoteError("IB: %s: a receive into GPU memory cannot be flushed: the connection left its HCA",
                            where(-1).c_str()));
  if (flushQp_ == nullptr) {
    if (Status s = createFlushQp(); !s.isOk()) return fail(s.withContext("IB: the GPUDirect RDMA flush QP"));
  }
  IbRequest* r = freeRequest();
  if (r == nullptr) return fail(internalError("IB: %s: no request free for a flush", where(-1).c_str()));
  auto mr = mem->on(dev_);
  if (!mr.isOk()) return fail(mr.status().withContext("IB: " + where(-1)));
  *r = IbRequest{IbRequest::kFlush, this, 1, 0, 0, static_cast<char*>(data), 0, 0, 0, mem};
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(&flushWord_);
  sge.length = 1;
  sge.lkey = flushMr_->lkey;
  ibv_send_wr wr{};
  wr.wr_id = wrId(kFlushRead, static_cast<uint64_t>(r - requests_));
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_READ;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(data);
  wr.wr.rdma.rkey = mr.value()->rkey;
  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(flushQp_, &wr, &bad)) {
    r->kind = IbRequest::kFree;
    return fail(errnoStatus(rc, "IB: %s: posting a flush read", where(-1).c_str()));
  }
  *request = r;
  return ncclSuccess;
}

}  // namespace theseus::transport::ib
