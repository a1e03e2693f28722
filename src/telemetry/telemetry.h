// Telemetry: what each collective of a communicator did, for attributes,
// tests and users.
//
// The executor calls onPlanDone() for every finished plan of the lane (the
// Lane::onPlanDone hook). Per plan it costs a few stores into a fixed ring of
// records (no allocation, no lock, no string) and, for collectives of at least
// kWaitProbeBytes, one read of the transport counters of each peer the plan
// received from, to find the peer this rank waited for longest (small
// collectives skip that: their waits are noise and the read would cost more
// than the collective). Collective durations also feed the ProbeSet
// (rank.<me>.coll_us); link throughput and per-peer waits reach the
// attributes through the transport counters, which the epoch service folds in
// off the hot path (ProbeSet::observePeerStats).
//
// Records are written by the thread that runs collectives and may be read by
// any thread: recent() copies the ring and drops records overwritten while it
// copied.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace theseus::exec {
struct Plan;
}
namespace theseus::transport {
class TransportManager;
}
namespace theseus::attrs {
class ProbeSet;
}

namespace theseus::telemetry {

struct CollectiveRecord {
  uint64_t seq = 0;            // the communicator's collective number (p2p plans: the next collective's)
  const char* op = "";         // "allreduce", "send/recv"
  const char* schedule = "";   // program name ("ring(order=0,2,1,3)"), valid while the program is cached
  uint64_t bytes = 0;
  uint64_t durationNs = 0;
  uint64_t endNs = 0;          // nowNs() when it finished
  int32_t waitPeer = -1;       // the peer this rank waited for longest (-1: not measured)
  uint64_t waitNs = 0;
};

// Per operation type ("allreduce", ..., "send/recv"): count, bytes and a latency histogram, for
// the Prometheus exposition (metrics.h). Buckets are upper bounds in seconds; the last is +Inf.
inline constexpr double kLatencyBuckets[] = {1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1, 3, 10};
inline constexpr size_t kLatencyBucketCount = sizeof(kLatencyBuckets) / sizeof(kLatencyBuckets[0]) + 1;
struct OpStats {
  const char* op = "";
  uint64_t count = 0;
  uint64_t bytes = 0;
  uint64_t busyNs = 0;
  uint64_t buckets[kLatencyBucketCount] = {};  // not cumulative: plans per bucket
};

// Totals since the communicator was created.
struct Counters {
  uint64_t collectives = 0;
  uint64_t p2pPlans = 0;
  uint64_t bytes = 0;
  uint64_t busyNs = 0;         // time spent in plans
};

class Recorder {
 public:
  static constexpr uint64_t kWaitProbeBytes = 64 << 10;

  // `transports` and `probes` may be null (then waits / probes are not recorded).
  Recorder(int rank, int nranks, transport::TransportManager* transports, attrs::ProbeSet* probes,
           size_t capacity = 1024);

  // Executor thread.
  void onPlanDone(const exec::Plan& plan, uint64_t ns, uint64_t endNs = 0);  // endNs 0: now

  // Any thread.
  Counters counters() const;
  // Per operation type, in the order first seen.
  std::vector<OpStats> opStats() const;
  // The newest records, oldest first (at most `max`).
  std::vector<CollectiveRecord> recent(size_t max) const;
  // One line per record, for logs and tools.
  static std::string describe(const CollectiveRecord& r);

 private:
  void measureWaits(const exec::Plan& plan, CollectiveRecord& r);

  int rank_;
  int nranks_;
  transport::TransportManager* transports_;
  attrs::ProbeSet* probes_;
  std::unique_ptr<CollectiveRecord[]> ring_;
  size_t capacity_;
  std::atomic<uint64_t> written_{0};
  size_t nextSlot_ = 0;  // written_ % capacity_, kept by the writer (no division per record)
  std::atomic<uint64_t> collectives_{0}, p2p_{0}, bytes_{0}, busyNs_{0};
  std::vector<uint64_t> lastWait_;   // executor thread: per peer, recvWaitNs at the last measurement
  // Per operation type: single writer (the executor thread), read by any.
  static constexpr size_t kMaxOps = 16;
  struct OpSlot {
    std::atomic<const char*> op{nullptr};  // a static name (plan.opName)
    std::atomic<uint64_t> count{0}, bytes{0}, busyNs{0};
    std::atomic<uint64_t> buckets[kLatencyBucketCount] = {};
  };
  OpSlot ops_[kMaxOps];
};

}  // namespace theseus::telemetry
