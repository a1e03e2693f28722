// Local probes: what one rank measures about its links, its peers and itself.
//
// The engine, the executor's telemetry and the transports call the record*()
// functions while collectives run; each updates an exponentially weighted
// moving average (EWMA) in a fixed per-peer slot with a few atomic operations:
// no lock, no allocation, no string. publish() turns the slots that changed
// since the last publish into named attributes in an AttributeStore; the
// snapshot shipper calls it off the hot path (docs/attributes.md):
//
//   link.<me>.<peer>.gbps         achieved throughput of transfers me -> peer (GB/s)
//   link.<me>.<peer>.latency_us   one-message latency me -> peer
//   link.<me>.<peer>.bottleneck   fraction of time this rank had data queued for peer
//   link.<peer>.<me>.bottleneck   fraction of time this rank waited for peer's data
//   rank.<peer>.wait_us           how long this rank waited for peer's data per collective
//   rank.<me>.coll_us             this rank's time per collective
//   rank.<me>.idle_us             this rank's time between the end of one collective
//                                 and the start of the next (outside the library:
//                                 its compute; a rank that arrives late has more)
//   link.<me>.<peer>.path_gbps    throughput of the path me -> peer as the kernel sees it
//                                 (TCP: bytes over the time TCP had them in flight,
//                                 without the queue in front of it; links with such a view only)
//   link.<me>.<peer>.probe_gbps   throughput of the latest active probe me -> peer
//                                 (epoch/link_prober.h: measured whether or not a
//                                 schedule uses the link; each probe is its own
//                                 sample, not averaged, so the leader can count them)
//
// Why two sides. In a pipeline (a ring) every link ends up moving data at the
// pace of the slowest one: senders upstream of a slow link have data queued
// because their receivers are held up, receivers downstream wait because their
// senders are starved. So a sender's throughput (bytes over the time it had
// data queued) makes upstream links look slow too, and a receiver's waiting
// makes downstream links look slow. Only the slow link has both: its sender
// has data queued *and* its receiver waits for it. Each end reports its own
// fraction under the same name; the leader's view keeps the smaller one
// (cluster_view.h), which is near 1 for the link that holds the pipeline back
// and near 0 for healthy links, whatever the load.
//
// Throughput samples of fewer than kMinThroughputBytes are ignored: small
// transfers measure latency, and counting them would make every link look slow.
// Every EWMA starts at its first sample; after that each sample moves it by
// `weight` (THESEUS_ATTRS_EWMA_WEIGHT) of the difference.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attrs/attribute_store.h"
#include "transport/transport.h"

namespace theseus::attrs {

// An EWMA one writer or several may update concurrently (compare-and-swap).
class Ewma {
 public:
  void add(double sample, double weight, uint64_t nowNs);
  // The same for an average only one thread ever writes (no locked instructions:
  // the per-collective time is folded in on every collective).
  void addExclusive(double sample, double weight, uint64_t nowNs);
  bool hasValue() const { return updates_.load(std::memory_order_acquire) > 0; }
  double value() const { return value_.load(std::memory_order_relaxed); }
  uint64_t updates() const { return updates_.load(std::memory_order_acquire); }
  uint64_t lastNs() const { return lastNs_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
  std::atomic<uint64_t> updates_{0};
  std::atomic<uint64_t> lastNs_{0};
};

class ProbeSet {
 public:
  static constexpr uint64_t kMinThroughputBytes = 64 << 10;

  // `weight` <= 0: THESEUS_ATTRS_EWMA_WEIGHT.
  ProbeSet(int rank, int nranks, double weight = 0);

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  double weight() const { return weight_; }

  // Hot path. Out-of-range peers and the rank itself are ignored.
  void recordTransfer(int peer, uint64_t bytes, uint64_t busyNs);
  void recordLatency(int peer, double us);
  void recordWait(int peer, uint64_t waitNs);
  void recordCollective(uint64_t ns, uint64_t nowNsHint = 0);  // hint: the caller's clock reading (0: read it)
  // One active probe's throughput (GB/s); the prober's thread only.
  void recordProbe(int peer, double gbps);

  // Folds a peer's cumulative transport counters in (the difference to the
  // previous call for that peer, at least kMinThroughputBytes apart): bytes
  // sent over sender busy time (queued in the transport or, where the kernel
  // tells, in flight on the path: the longer) become a throughput sample, busy time over
  // elapsed time a send-side bottleneck sample, receive wait time a wait
  // sample and, over elapsed time, a receive-side bottleneck sample. Call it
  // from one thread (the snapshot shipper), e.g. every reporting interval.
  void observePeerStats(int peer, const transport::PeerStats& stats) { observePeerStats(peer, stats, 0); }
  void observePeerStats(int peer, const transport::PeerStats& stats, uint64_t nowNs);  // 0: now

  // Writes every probe that changed since the previous publish into `store`
  // (source "probe", timestamp of the latest sample). Returns how many values
  // it wrote. One publisher at a time.
  size_t publish(AttributeStore& store);

 private:
  struct PeerSlot {
    Ewma gbps, latencyUs, waitUs, sendBusy, recvWait, probeGbps, pathGbps;
  };
  struct Published {
    uint64_t gbps = 0, latencyUs = 0, waitUs = 0, sendBusy = 0, recvWait = 0, probeGbps = 0, pathGbps = 0;
  };
  struct Observed {  // observePeerStats' baseline per peer
    transport::PeerStats stats;
    uint64_t sendSinceNs = 0, recvSinceNs = 0;
  };
  size_t publishOne(AttributeStore& store, const Ewma& e, uint64_t* seen, const std::string& name);

  int rank_;
  int nranks_;
  double weight_;
  std::unique_ptr<PeerSlot[]> peers_;
  Ewma collUs_;
  Ewma idleUs_;
  uint64_t lastEndNs_ = 0;  // the collective thread's: when its previous collective ended
  // Publisher-side state (one publisher at a time).
  std::vector<Published> published_;
  uint64_t publishedColl_ = 0;
  uint64_t publishedIdle_ = 0;
  std::vector<Observed> observed_;
};

}  // namespace theseus::attrs
