// The receive side of a shm connection: reads messages from the FIFO for
// (peer, channel) in this rank's own inbox, direct ones from the sender's
// memory through the region cache, and rings the sender's doorbell when it
// frees a slot.
#include <cstring>

#include "common/deadline.h"
#include "common/log.h"
#include "transport/shared_memory_registry.h"
#include "transport/shm/shm_fifo.h"

namespace theseus::transport::shm {
namespace {

class ShmRecvConnection final : public RecvConnection {
 public:
  ShmRecvConnection(int peer, int peerPid, const FifoView& fifo, DoorbellWord* peerBell, ConnectionCounters* counters,
                    PeerLiveness* liveness, RegionCache* regions, bool sameProcess)
      : peer_(peer), peerPid_(peerPid), fifo_(fifo), peerBell_(peerBell), counters_(counters), liveness_(liveness),
        regions_(regions), sameProcess_(sameProcess) {
    tail_ = fifo_.ctl->tail.load(std::memory_order_relaxed);
    cachedHead_ = fifo_.ctl->head.load(std::memory_order_acquire);
  }
  ~ShmRecvConnection() override { unpin(); }

  Kind kind() const override { return Kind::kShm; }
  int peer() const override { return peer_; }

  bool tryPeek(RecvMessage* msg) override {
    if (peeked_) {
      *msg = msg_;
      return true;
    }
    if (!error_.isOk()) return false;
    if (tail_ == cachedHead_) {
      cachedHead_ = fifo_.ctl->head.load(std::memory_order_acquire);
      if (tail_ == cachedHead_) {
        wait_.begin();
        return false;
      }
      if (cachedHead_ - tail_ > fifo_.slots) {
        error_ = remoteError("shared-memory FIFO from rank %d is corrupt (head %llu, tail %llu, %u slots)", peer_,
                             static_cast<unsigned long long>(cachedHead_), static_cast<unsigned long long>(tail_),
                             fifo_.slots);
        return false;
      }
    }
    wait_.end(*counters_);
    tsanAcquire(fifo_.syncKey);
    // A copy: the sender cannot touch this header until we release the slot, but
    // reading it once keeps validation and use consistent.
    SlotHeader h = fifo_.headers[tail_ % fifo_.slots];
    Status s = decode(h);
    if (!s.isOk()) {
      error_ = s;
      return false;
    }
    peeked_ = true;
    *msg = msg_;
    return true;
  }

  void release() override {
    if (!peeked_) return;
    unpin();
    peeked_ = false;
    tsanRelease(fifo_.syncKey);
    fifo_.ctl->tail.store(++tail_, std::memory_order_release);
    ringDoorbell(peerBell_);
    counters_->addMessage(msg_.bytes);
  }

  Status progress() override {
    if (!error_.isOk() || peeked_ || tail_ != cachedHead_ || liveness_ == nullptr) return error_;
    if (fifo_.ctl->head.load(std::memory_order_acquire) != tail_) return error_;
    Status s = liveness_->check();
    if (!s.isOk()) error_ = s;
    return error_;
  }

 private:
  Status decode(const SlotHeader& h) {
    msg_.bytes = h.bytes;
    msg_.tag = h.tag;
    switch (h.kind) {
      case shm::kSlotInline:
        if (h.bytes > fifo_.slotBytes) break;
        msg_.data = fifo_.data + (tail_ % fifo_.slots) * fifo_.slotBytes;
        msg_.direct = false;
        return Status::ok();
      case shm::kSlotDirectAddress:
        if (!sameProcess_) break;
        msg_.data = reinterpret_cast<const void*>(h.address);
        msg_.direct = true;
        return Status::ok();
      case shm::kSlotDirectRegion: {
        if (h.pid != peerPid_ || regions_ == nullptr) break;
        SharedRegionRef ref{h.pid, h.fd, h.regionId, h.offset, h.regionBytes};
        auto p = regions_->pin(ref, h.bytes);
        if (!p.isOk()) return p.status().withContext("receiving from rank " + std::to_string(peer_));
        pinned_ = true;
        pinPid_ = h.pid;
        pinId_ = h.regionId;
        msg_.data = p.value();
        msg_.direct = true;
        return Status::ok();
      }
      default:
        break;
    }
    return remoteError("rank %d wrote a malformed shared-memory message header (kind %u, %llu bytes, slot %llu bytes)",
                       peer_, h.kind, static_cast<unsigned long long>(h.bytes),
                       static_cast<unsigned long long>(fifo_.slotBytes));
  }

  void unpin() {
    if (!pinned_) return;
    regions_->unpin(pinPid_, pinId_);
    pinned_ = false;
  }

  int peer_;
  int peerPid_;
  FifoView fifo_;
  DoorbellWord* peerBell_;
  ConnectionCounters* counters_;
  PeerLiveness* liveness_;
  RegionCache* regions_;
  bool sameProcess_;
  uint64_t tail_ = 0;
  uint64_t cachedHead_ = 0;
  bool peeked_ = false;
  RecvMessage msg_;
  bool pinned_ = false;
  int32_t pinPid_ = 0;
  uint64_t pinId_ = 0;
  IntervalClock wait_;
  Status error_;
};

}  // namespace

std::unique_ptr<RecvConnection> makeRecvConnection(int peer, int peerPid, const FifoView& fifo, DoorbellWord* peerBell,
                                                   ConnectionCounters* counters, PeerLiveness* liveness,
                                                   RegionCache* regions, bool sameProcess) {
  return std::make_unique<ShmRecvConnection>(peer, peerPid, fifo, peerBell, counters, liveness, regions, sameProcess);
}

}  // namespace theseus::transport::shm
