// The first failure of a connection that nothing was waiting on.
//
// A net-plugin send is handed to the plugin by a pump thread and may fail after the plan that
// committed it has moved on (its messages are buffered). The rank then waits in a later operation
// for data that will never come — its peer waits for the message that failed — and only the stall
// timeout would end the job. So such a failure is kept here, and the engine's health check, which
// every waiting operation runs each idle millisecond, fails the operation with it at once.
// Receive-side failures are not kept: a receive connection whose peer has finished and closed it is
// an orderly goodbye, reported only if an operation still expects data from it — except those that
// cannot be a goodbye (a GPUDirect RDMA receive that failed mid-message or in its flush).
// Kernels on the GPU run no health check: the listener (set once, before any report) learns of the
// first failure, and the communicator tells its kernels through the abort flag's mirror.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>

#include "common/status.h"

namespace theseus::transport {

class AsyncFailure {
 public:
  void report(const Status& s) {
    if (s.isOk() || set_.load(std::memory_order_acquire)) return;
    {
      std::lock_guard lock(mu_);
      if (set_.load(std::memory_order_relaxed)) return;
      first_ = s;
      set_.store(true, std::memory_order_release);
    }
    if (listener_) listener_(s);
  }
  // Called with the first failure, on the reporting thread; set before connections exist.
  void setListener(std::function<void(const Status&)> fn) { listener_ = std::move(fn); }
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
  std::function<void(const Status&)> listener_;
};

}  // namespace theseus::transport
