// The send side of a shm connection: writes messages into the FIFO for
// (this rank, channel) in the peer's inbox and rings the peer's doorbell.
#include <cstring>

#include "common/deadline.h"
#include "common/log.h"
#include "transport/shared_memory_registry.h"
#include "transport/shm/shm_fifo.h"

namespace theseus::transport::shm {
namespace {

class ShmSendConnection final : public SendConnection {
 public:
  ShmSendConnection(int peer, const FifoView& fifo, DoorbellWord* peerBell, ConnectionCounters* counters,
                    PeerLiveness* liveness, bool direct, bool sameProcess)
      : peer_(peer), fifo_(fifo), peerBell_(peerBell), counters_(counters), liveness_(liveness), direct_(direct),
        sameProcess_(sameProcess) {
    head_ = fifo_.ctl->head.load(std::memory_order_relaxed);
    cachedTail_ = fifo_.ctl->tail.load(std::memory_order_acquire);
  }

  Kind kind() const override { return Kind::kShm; }
  int peer() const override { return peer_; }
  size_t slotBytes() const override { return fifo_.slotBytes; }

  bool tryAcquire(SendSlot* slot) override {
    if (head_ - cachedTail_ >= fifo_.slots) {
      refreshTail();
      if (head_ - cachedTail_ >= fifo_.slots) return false;
    }
    acquired_ = true;
    slot->data = fifo_.data + (head_ % fifo_.slots) * fifo_.slotBytes;
    slot->capacity = fifo_.slotBytes;
    return true;
  }

  uint64_t commitInline(size_t bytes, uint32_t tag) override {
    if (!checkCommit(bytes, "commitInline")) return 0;
    SlotHeader& h = fifo_.headers[head_ % fifo_.slots];
    h.bytes = bytes;
    h.tag = tag;
    h.kind = shm::kSlotInline;
    return publish(bytes);
  }

  bool canSendDirect(const void* src, size_t bytes) const override {
    if (!direct_) return false;
    if (sameProcess_) return true;
    SharedRegionRef ref;
    return SharedMemoryRegistry::instance().find(src, bytes, &ref);
  }

  uint64_t commitDirect(const void* src, size_t bytes, uint32_t tag) override {
    // No slot payload: a direct message may be larger than a slot.
    if (!checkCommit(0, "commitDirect")) return 0;
    SlotHeader& h = fifo_.headers[head_ % fifo_.slots];
    h.bytes = bytes;
    h.tag = tag;
    if (sameProcess_ && direct_) {
      h.kind = shm::kSlotDirectAddress;
      h.address = reinterpret_cast<uint64_t>(src);
    } else {
      SharedRegionRef ref;
      if (!direct_ || !SharedMemoryRegistry::instance().find(src, bytes, &ref)) {
        acquired_ = false;
        error_ = internalError("commitDirect to rank %d: [%p, +%zu) is not memory the peer can map", peer_, src, bytes);
        TH_WARN("%s", error_.message().c_str());
        return 0;
      }
      h.kind = shm::kSlotDirectRegion;
      h.pid = ref.pid;
      h.fd = ref.fd;
      h.regionId = ref.id;
      h.offset = ref.offset;
      h.regionBytes = ref.regionBytes;
    }
    return publish(bytes);
  }

  bool consumed(uint64_t ticket) const override {
    if (cachedTail_ >= ticket) return true;
    refreshTail();
    return cachedTail_ >= ticket;
  }

  Status progress() override {
    if (!error_.isOk()) return error_;
    refreshTail();
    if (cachedTail_ != head_) {
      Status s = liveness_ != nullptr ? liveness_->check() : Status::ok();
      if (!s.isOk()) error_ = s;
    }
    return error_;
  }

 private:
  bool checkCommit(size_t bytes, const char* what) {
    if (acquired_ && bytes <= fifo_.slotBytes) return true;
    error_ = internalError("%s to rank %d: %s", what, peer_,
                           acquired_ ? "message larger than the slot" : "no slot acquired");
    TH_WARN("%s (%zu bytes, slot %llu)", error_.message().c_str(), bytes,
            static_cast<unsigned long long>(fifo_.slotBytes));
    return false;
  }

  uint64_t publish(size_t bytes) {
    acquired_ = false;
    if (head_ == cachedTail_) busy_.begin();
    tsanRelease(fifo_.syncKey);
    fifo_.ctl->head.store(++head_, std::memory_order_release);
    ringDoorbell(peerBell_);
    counters_->addMessage(bytes);
    return head_;
  }

  void refreshTail() const {
    cachedTail_ = fifo_.ctl->tail.load(std::memory_order_acquire);
    tsanAcquire(fifo_.syncKey);
    if (cachedTail_ == head_) busy_.end(*counters_);
  }

  int peer_;
  FifoView fifo_;
  DoorbellWord* peerBell_;
  ConnectionCounters* counters_;
  PeerLiveness* liveness_;
  bool direct_;
  bool sameProcess_;
  bool acquired_ = false;
  uint64_t head_ = 0;
  mutable uint64_t cachedTail_ = 0;
  mutable IntervalClock busy_;
  Status error_;
};

}  // namespace

std::unique_ptr<SendConnection> makeSendConnection(int peer, const FifoView& fifo, DoorbellWord* peerBell,
                                                   ConnectionCounters* counters, PeerLiveness* liveness, bool direct,
                                                   bool sameProcess) {
  return std::make_unique<ShmSendConnection>(peer, fifo, peerBell, counters, liveness, direct, sameProcess);
}

}  // namespace theseus::transport::shm
