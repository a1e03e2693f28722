// The first failure of a connection that nothing was waiting on.
//
// A net-plugin send is handed to the plugin by a pump thread and may fail after the plan that
// committed it has moved on (its messages are buffered). The rank then waits in a later operation
// for data that will never come — its peer waits for the message that failed — and only the stall
// timeout would end the job. So such a failure is kept here, and the engine's health check, which
// every waiting operation runs each idle millisecond, fails the operation with it at once.
// Receive-side failures are not kept: a receive connection whose peer has finished and closed it is
// an orderly goodbye, reported only if an operation still expects data from it.
#pragma once

#include <atomic>
#include <mutex>

#include "common/status.h"

namespace theseus::transport {

class AsyncFailure {
 public:
  void report(const Status& s) {
    if (s.isOk() || set_.load(std::memory_order_acquire)) return;
    std::lock_guard lock(mu_);
    if (set_.load(std::memory_order_relaxed)) return;
    first_ = s;
    set_.store(true, std::memory_order_release);
  }
  // The first failure reported (ok when none); one atomic load while there is none.
  Status get() const {
    if (!set_.load(std::memory_order_acquire)) return Status::ok();
    std::lock_guard lock(mu_);
    return first_;
  }

 private:
  std::atomic<bool> set_{false};
  mutable std::mutex mu_;
  Status first_;
};

}  // namespace theseus::transport
