// Deadlines and the abort flag: every blocking wait in Theseus takes both
// (invariant 3, "nothing waits forever") and reports what it waited for.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace theseus {

using Clock = std::chrono::steady_clock;

inline uint64_t nowNs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
}

// The bound for a wait whose own limit is `ownMs` under an overall timeout `capMs` (<= 0:
// none, for either): the shorter positive one, 0 when neither is set (comm/timeouts.h).
inline int64_t boundedWaitMs(int64_t capMs, int64_t ownMs) {
  if (capMs <= 0) return ownMs > 0 ? ownMs : 0;
  return ownMs > 0 && ownMs < capMs ? ownMs : capMs;
}

class Deadline {
 public:
  // A deadline `ms` milliseconds from now; ms < 0 means never.
  static Deadline afterMs(int64_t ms) {
    Deadline d;
    d.never_ = ms < 0;
    if (!d.never_) d.at_ = Clock::now() + std::chrono::milliseconds(ms);
    return d;
  }
  static Deadline never() { return afterMs(-1); }
  bool expired() const { return !never_ && Clock::now() >= at_; }
  // Milliseconds left, clamped to [0, cap]; `cap` when there is no deadline.
  int64_t remainingMs(int64_t cap = INT32_MAX) const {
    if (never_) return cap;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now()).count();
    if (left < 0) return 0;
    return left < cap ? left : cap;
  }

 private:
  bool never_ = true;
  Clock::time_point at_{};
};

// Set by ncclCommAbort (from any thread) and by fatal peer failures; polled by waits.
//
// Its mirror is a word in memory a device polls (pinned host memory): 1 once
// the flag is set (stop now), 2 once a peer of the communicator failed or left
// (notePeerFailure: the device stops a plan that then makes no progress for a
// while — the peer's data may all be there already).
class AbortFlag {
 public:
  void set() {
    flag_.store(true, std::memory_order_release);
    if (uint32_t* m = mirror_.load(std::memory_order_acquire)) std::atomic_ref<uint32_t>(*m).store(1, std::memory_order_release);
  }
  bool isSet() const { return flag_.load(std::memory_order_acquire); }
  // A peer failed or left: the mirror says so (2) unless the flag is set already.
  void notePeerFailure() {
    peerFailed_.store(true, std::memory_order_release);
    if (uint32_t* m = mirror_.load(std::memory_order_acquire)) {
      uint32_t zero = 0;
      std::atomic_ref<uint32_t>(*m).compare_exchange_strong(zero, 2, std::memory_order_acq_rel);
    }
  }
  // One mirror per flag; set once, it must outlive the flag's use.
  void setMirror(uint32_t* word) const {
    std::atomic_ref<uint32_t>(*word).store(mirrorValue(), std::memory_order_release);
    mirror_.store(word, std::memory_order_release);
    std::atomic_ref<uint32_t>(*word).store(mirrorValue(), std::memory_order_release);  // a set() in between
  }
  uint32_t* mirror() const { return mirror_.load(std::memory_order_acquire); }

 private:
  uint32_t mirrorValue() const { return isSet() ? 1 : peerFailed_.load(std::memory_order_acquire) ? 2 : 0; }
  std::atomic<bool> flag_{false};
  std::atomic<bool> peerFailed_{false};
  mutable std::atomic<uint32_t*> mirror_{nullptr};
};

}  // namespace theseus
