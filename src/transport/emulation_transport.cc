// The receive-side wrapper of an emulated link (see emulation.h for the wire
// model). It holds back the head message of the inner connection until the
// emulated wire delivered it, and measures how long the executor takes to
// consume a byte of this link (from the last successful peek of a message to
// its release) to turn percentages into service times.
#include <algorithm>

#include "transport/emulation.h"

namespace theseus::transport {
namespace {

constexpr size_t kMinSampleBytes = 4096;  // smaller messages measure latency, not throughput
constexpr double kSampleWeight = 0.1;

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
    if (!scheduled_) schedule(msg->bytes, now);
    if (now < visibleAt_) {
      emu_->noteRelease(visibleAt_);
      return false;
    }
    lastPeekNs_ = now;
    bytes_ = msg->bytes;
    return true;
  }

  void release() override {
    uint64_t now = nowNs();
    if (lastPeekNs_ != 0 && bytes_ >= kMinSampleBytes && now > lastPeekNs_) {
      double sample = double(now - lastPeekNs_) / double(bytes_);
      if (nsPerByte_ > 0) sample = std::min(sample, 4 * nsPerByte_);  // a preempted consume is not the link
      nsPerByte_ = nsPerByte_ > 0 ? nsPerByte_ + kSampleWeight * (sample - nsPerByte_) : sample;
    }
    scheduled_ = false;
    lastPeekNs_ = 0;
    inner_->release();
  }

 private:
  // When the head message (first seen now) leaves the emulated wire.
  void schedule(size_t bytes, uint64_t now) {
    scheduled_ = true;
    uint64_t service = 0, latency = 0;
    for (const EmulationRule* r : rules_) {
      if (!emu_->activeNow(*r)) continue;
      if (r->kind == EmulationRule::Kind::kLatency) {
        latency += r->ns;
      } else if (r->bytesPerNs > 0) {
        service = std::max(service, static_cast<uint64_t>(double(bytes) / r->bytesPerNs));
      } else if (r->fraction > 0 && r->fraction < 1) {
        service = std::max(service, static_cast<uint64_t>(double(bytes) * nsPerByte_ * (1.0 / r->fraction - 1.0)));
      }
    }
    wireFree_ = service > 0 ? std::max(wireFree_, now) + service : std::max(wireFree_, now);
    visibleAt_ = wireFree_ + latency;
  }

  std::unique_ptr<RecvConnection> inner_;
  LinkEmulation* emu_;
  std::vector<const EmulationRule*> rules_;
  bool scheduled_ = false;
  uint64_t visibleAt_ = 0;
  uint64_t wireFree_ = 0;
  uint64_t lastPeekNs_ = 0;
  size_t bytes_ = 0;
  double nsPerByte_ = 0;
};

}  // namespace

std::unique_ptr<RecvConnection> LinkEmulation::wrapRecv(std::unique_ptr<RecvConnection> inner, int peer) {
  std::vector<const EmulationRule*> mine;
  for (const auto& r : rules_)
    if (r.matchesLink(peer, rank_)) mine.push_back(&r);
  if (mine.empty()) return inner;
  return std::make_unique<EmulatedRecv>(std::move(inner), this, std::move(mine));
}

}  // namespace theseus::transport
