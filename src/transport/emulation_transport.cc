// The connection wrappers of emulated links (see emulation.h for the model).
//
// EmulatedSend (throttles, on the sending rank) is the wire: after a message
// is committed, the next one is accepted only once the wire served this one.
// While the executor wants to send but the wire holds it back, the wrapper's
// interval clock runs into the connection's counters as busy time (data
// queued for the peer); the inner connection counts the time its FIFO holds a
// message, which here ends quickly (the receiver is waiting for it), so the
// two intervals hardly overlap and the link's measured throughput is what the
// wire allows.
//
// Percentages need to know what the link achieves unthrottled. The sender
// learns it from the link's own traffic, per collective (the emulation's seq):
// from the first attempt to send on the link to the commit of its last
// message, over the bytes it carried — what the executor really got out of
// the link, whatever limited it (copies, the receiver, a loaded CPU), with the
// gaps between collectives left out. A moving average of those samples is the
// estimate; it learns while no percentage rule is active (or nothing was learnt
// yet, in which case the wire does not hold anything back) and stays frozen
// while one is, so a throttled link does not slow itself down further.
//
// EmulatedRecv (latency, on the receiving rank) shows a message to the
// executor only `latency` after it first saw it.
#include <algorithm>

#include "transport/emulation.h"

namespace theseus::transport {
namespace {

// How long a message holds the emulated wire, in whole ns. The parser's bounds keep real rules far
// below the cap (about 31 years); it only keeps the conversion defined and now + service from wrapping.
uint64_t serviceNs(double ns) {
  constexpr double kCap = 1e18;
  return ns < kCap ? static_cast<uint64_t>(ns) : static_cast<uint64_t>(kCap);
}

constexpr uint64_t kMinWindowBytes = 64 << 10;  // a window with less measures latency, not throughput
constexpr double kSampleWeight = 0.3;

class EmulatedSend final : public SendConnection {
 public:
  EmulatedSend(std::unique_ptr<SendConnection> inner, LinkEmulation* emu, std::vector<const EmulationRule*> rules,
               ConnectionCounters* counters)
      : inner_(std::move(inner)), emu_(emu), rules_(std::move(rules)), counters_(counters) {}
  ~EmulatedSend() override {
    if (counters_ != nullptr) held_.end(*counters_);
  }

  Kind kind() const override { return inner_->kind(); }
  int peer() const override { return inner_->peer(); }
  size_t slotBytes() const override { return inner_->slotBytes(); }
  bool canSendDirect(const void* src, size_t bytes) const override { return inner_->canSendDirect(src, bytes); }
  bool consumed(uint64_t ticket) const override { return inner_->consumed(ticket); }
  Status progress() override { return inner_->progress(); }

  bool tryAcquire(SendSlot* slot) override {
    uint64_t now = nowNs();
    track(now);
    if (now < wireFree_) {
      held_.begin();
      emu_->noteRelease(wireFree_);
      return false;
    }
    if (counters_ != nullptr) held_.end(*counters_);
    return inner_->tryAcquire(slot);
  }
  uint64_t commitInline(size_t bytes, uint32_t tag) override {
    served(bytes);
    return inner_->commitInline(bytes, tag);
  }
  uint64_t commitDirect(const void* src, size_t bytes, uint32_t tag) override {
    served(bytes);
    return inner_->commitDirect(src, bytes, tag);
  }

 private:
  // Per-collective windows of this link's traffic (first attempt -> last commit).
  void track(uint64_t now) {
    uint64_t seq = emu_->currentSeq();
    if (windowStart_ != 0 && seq == windowSeq_) return;
    if (windowStart_ != 0 && windowLearns_ && windowBytes_ >= kMinWindowBytes && windowEnd_ > windowStart_) {
      double sample = double(windowEnd_ - windowStart_) / double(windowBytes_);
      nsPerByte_ = nsPerByte_ > 0 ? nsPerByte_ + kSampleWeight * (sample - nsPerByte_) : sample;
    }
    windowSeq_ = seq;
    windowStart_ = now;
    windowEnd_ = now;
    windowBytes_ = 0;
    windowLearns_ = true;
  }

  // A message of `bytes` goes on the wire now: the next one waits until it is through.
  void served(size_t bytes) {
    uint64_t now = nowNs();
    windowBytes_ += bytes;
    windowEnd_ = now;
    uint64_t service = 0;
    for (const EmulationRule* r : rules_) {
      if (!emu_->activeNow(*r)) continue;
      if (r->bytesPerNs > 0) {
        service = std::max(service, serviceNs(double(bytes) / r->bytesPerNs));
      } else if (r->fraction > 0 && r->fraction < 1 && nsPerByte_ > 0) {
        windowLearns_ = false;  // throttled: this window says nothing about the natural rate
        service = std::max(service, serviceNs(double(bytes) * nsPerByte_ * (1.0 / r->fraction - 1.0)));
      }
    }
    wireFree_ = now + service;
  }

  std::unique_ptr<SendConnection> inner_;
  LinkEmulation* emu_;
  std::vector<const EmulationRule*> rules_;
  ConnectionCounters* counters_;
  IntervalClock held_;      // the wire holds data back: busy time of the link
  uint64_t wireFree_ = 0;
  double nsPerByte_ = 0;    // what the link achieves unthrottled, per byte (0: not learnt yet)
  uint64_t windowSeq_ = 0, windowStart_ = 0, windowEnd_ = 0, windowBytes_ = 0;
  bool windowLearns_ = true;
};

class EmulatedRecv final : public RecvConnection {
 public:
  EmulatedRecv(std::unique_ptr<RecvConnection> inner, LinkEmulation* emu, std::vector<const EmulationRule*> rules)
      : inner_(std::move(inner)), emu_(emu), rules_(std::move(rules)) {}

  Kind kind() const override { return inner_->kind(); }
  int peer() const override { return inner_->peer(); }
  Status progress() override { return inner_->progress(); }

  bool tryPeek(RecvMessage* msg) override {
    if (!inner_->tryPeek(msg)) return false;
    uint64_t now = nowNs();
    if (!scheduled_) {
      scheduled_ = true;
      uint64_t latency = 0;
      for (const EmulationRule* r : rules_)
        if (emu_->activeNow(*r)) latency += r->ns;
      visibleAt_ = now + latency;
    }
    if (now < visibleAt_) {
      emu_->noteRelease(visibleAt_);
      return false;
    }
    return true;
  }

  void release() override {
    scheduled_ = false;
    inner_->release();
  }

 private:
  std::unique_ptr<RecvConnection> inner_;
  LinkEmulation* emu_;
  std::vector<const EmulationRule*> rules_;
  bool scheduled_ = false;
  uint64_t visibleAt_ = 0;
};

}  // namespace

std::unique_ptr<SendConnection> LinkEmulation::wrapSend(std::unique_ptr<SendConnection> inner, int peer,
                                                        ConnectionCounters* counters) {
  std::vector<const EmulationRule*> mine;
  for (const auto& r : rules_)
    if (r.kind == EmulationRule::Kind::kThrottle && r.matchesLink(rank_, peer)) mine.push_back(&r);
  if (mine.empty()) return inner;
  return std::make_unique<EmulatedSend>(std::move(inner), this, std::move(mine), counters);
}

std::unique_ptr<RecvConnection> LinkEmulation::wrapRecv(std::unique_ptr<RecvConnection> inner, int peer) {
  std::vector<const EmulationRule*> mine;
  for (const auto& r : rules_)
    if (r.kind == EmulationRule::Kind::kLatency && r.matchesLink(peer, rank_)) mine.push_back(&r);
  if (mine.empty()) return inner;
  return std::make_unique<EmulatedRecv>(std::move(inner), this, std::move(mine));
}

}  // namespace theseus::transport
