// Per-connection counters behind TransportManager::stats(). Each connection is
// driven by one thread at a time (the executor's), which owns the counters and
// updates them with relaxed load+store pairs (no read-modify-write, no fence);
// any other thread may read a snapshot with relaxed loads. The manager sums
// the connections of a peer.
#pragma once

#include <atomic>
#include <cstdint>

#include "common/deadline.h"

namespace theseus::transport {

struct ConnectionCounters {
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> messages{0};
  std::atomic<uint64_t> timeNs{0};  // send: busy (data queued); receive: executor waiting for data
  // Send side, where the kernel tells (TCP_INFO; PeerStats::linkBusyNs): the
  // total since the connection opened, stored as an absolute value by the one writer.
  std::atomic<uint64_t> linkBusyNs{0};

  void addMessage(uint64_t n) {
    bytes.store(bytes.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    messages.store(messages.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  void addTime(uint64_t ns) { timeNs.store(timeNs.load(std::memory_order_relaxed) + ns, std::memory_order_relaxed); }
};

// Measures intervals (busy or waiting) with a clock read only at the edges.
class IntervalClock {
 public:
  void begin() {
    if (since_ == 0) since_ = nowNs();
  }
  void end(ConnectionCounters& c) {
    if (since_ == 0) return;
    c.addTime(nowNs() - since_);
    since_ = 0;
  }
  bool running() const { return since_ != 0; }

 private:
  uint64_t since_ = 0;
};

}  // namespace theseus::transport
