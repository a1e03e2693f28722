#include "attrs/probes.h"

#include <algorithm>

#include "common/deadline.h"
#include "common/knobs.h"
#include "common/log.h"

namespace theseus::attrs {
namespace {

const DoubleKnob kEwmaWeight("THESEUS_ATTRS_EWMA_WEIGHT", 0.25,
                             "Weight of a new sample in the moving averages of measured attributes (link throughput "
                             "and latency, wait times), in (0, 1]; higher reacts faster and is noisier");

double configuredWeight() {
  double w = kEwmaWeight.get();
  if (!(w > 0 && w <= 1)) {
    TH_WARN("THESEUS_ATTRS_EWMA_WEIGHT=%g is outside (0, 1]; using 0.25", w);
    return 0.25;
  }
  return w;
}

}  // namespace

void Ewma::add(double sample, double weight, uint64_t nowNs) {
  // The first sample (updates_ == 0) sets the value; a racing first sample may be
  // averaged in instead, which is just as good.
  double old = value_.load(std::memory_order_relaxed);
  bool first = updates_.load(std::memory_order_acquire) == 0;
  double next = first ? sample : old + weight * (sample - old);
  while (!value_.compare_exchange_weak(old, next, std::memory_order_relaxed)) {
    next = first ? sample : old + weight * (sample - old);
  }
  lastNs_.store(nowNs, std::memory_order_relaxed);
  updates_.fetch_add(1, std::memory_order_release);
}

void Ewma::addExclusive(double sample, double weight, uint64_t nowNs) {
  uint64_t n = updates_.load(std::memory_order_relaxed);
  double old = value_.load(std::memory_order_relaxed);
  value_.store(n == 0 || weight >= 1 ? sample : old + weight * (sample - old), std::memory_order_relaxed);
  lastNs_.store(nowNs, std::memory_order_relaxed);
  updates_.store(n + 1, std::memory_order_release);
}

ProbeSet::ProbeSet(int rank, int nranks, double weight)
    : rank_(rank),
      nranks_(nranks > 0 ? nranks : 0),
      weight_(weight > 0 && weight <= 1 ? weight : configuredWeight()),
      peers_(new PeerSlot[nranks_]),
      published_(nranks_),
      observed_(nranks_) {}

void ProbeSet::recordTransfer(int peer, uint64_t bytes, uint64_t busyNs) {
  if (peer < 0 || peer >= nranks_ || peer == rank_ || busyNs == 0 || bytes < kMinThroughputBytes) return;
  // bytes per nanosecond = GB/s.
  peers_[peer].gbps.add(static_cast<double>(bytes) / static_cast<double>(busyNs), weight_, nowNs());
}

void ProbeSet::recordLatency(int peer, double us) {
  if (peer < 0 || peer >= nranks_ || peer == rank_ || !(us >= 0)) return;
  peers_[peer].latencyUs.add(us, weight_, nowNs());
}

void ProbeSet::recordWait(int peer, uint64_t waitNs) {
  if (peer < 0 || peer >= nranks_ || peer == rank_) return;
  peers_[peer].waitUs.add(static_cast<double>(waitNs) / 1e3, weight_, nowNs());
}

void ProbeSet::recordProbe(int peer, double gbps) {
  if (peer < 0 || peer >= nranks_ || peer == rank_ || !(gbps > 0)) return;
  peers_[peer].probeGbps.addExclusive(gbps, 1.0, nowNs());  // weight 1: the latest probe
}

void ProbeSet::recordCollective(uint64_t ns, uint64_t nowNsHint) {
  // Only the thread running this communicator's collectives records them.
  const uint64_t end = nowNsHint != 0 ? nowNsHint : nowNs();
  collUs_.addExclusive(static_cast<double>(ns) * 1e-3, weight_, end);
  // The time since the previous collective ended: what the rank did outside the library before
  // this one started (collectives of one group overlap: no sample).
  const uint64_t start = end > ns ? end - ns : 0;
  if (lastEndNs_ != 0 && start >= lastEndNs_)
    idleUs_.addExclusive(static_cast<double>(start - lastEndNs_) * 1e-3, weight_, end);
  lastEndNs_ = end;
}

void ProbeSet::observePeerStats(int peer, const transport::PeerStats& stats, uint64_t now) {
  if (peer < 0 || peer >= nranks_ || peer == rank_) return;
  if (now == 0) now = nowNs();
  Observed& o = observed_[peer];
  transport::PeerStats& last = o.stats;
  // Counters only grow; a smaller value means the connection was replaced: start over.
  if (o.sendSinceNs == 0 || stats.bytesSent < last.bytesSent || stats.sendBusyNs < last.sendBusyNs ||
      stats.recvWaitNs < last.recvWaitNs || stats.messagesReceived < last.messagesReceived ||
      stats.bytesReceived < last.bytesReceived || stats.linkBusyNs < last.linkBusyNs) {
    last = stats;
    o.sendSinceNs = o.recvSinceNs = now;
    return;
  }
  // Send side: throughput while data was queued or in flight, and how much of the
  // time it was (the longer of the two views: an emulated throttle holds data in
  // our queue, a slow TCP path holds it in the kernel's; transport.h).
  uint64_t bytes = stats.bytesSent - last.bytesSent;
  uint64_t busy = std::max(stats.sendBusyNs - last.sendBusyNs, stats.linkBusyNs - last.linkBusyNs);
  TH_TRACE(log::kAttrs, "rank %d peer %d: +%llu bytes sent, %.3f ms queued in %.3f ms; +%llu bytes received, %.3f ms "
           "waited in %.3f ms", rank_, peer, (unsigned long long)bytes, busy / 1e6, (now - o.sendSinceNs) / 1e6,
           (unsigned long long)(stats.bytesReceived - last.bytesReceived), (stats.recvWaitNs - last.recvWaitNs) / 1e6,
           (now - o.recvSinceNs) / 1e6);
  if (bytes >= kMinThroughputBytes && now > o.sendSinceNs) {
    if (busy > 0) recordTransfer(peer, bytes, busy);
    // The kernel's view alone (TCP): the path's throughput, whatever the queue in front of it.
    const uint64_t path = stats.linkBusyNs - last.linkBusyNs;
    if (path > 0) peers_[peer].pathGbps.add(static_cast<double>(bytes) / static_cast<double>(path), weight_, now);
    double fraction = std::min(1.0, static_cast<double>(busy) / static_cast<double>(now - o.sendSinceNs));
    peers_[peer].sendBusy.add(fraction, weight_, now);
    last.bytesSent = stats.bytesSent;
    last.sendBusyNs = stats.sendBusyNs;
    last.linkBusyNs = stats.linkBusyNs;
    last.messagesSent = stats.messagesSent;
    o.sendSinceNs = now;
  }
  // Receive side: waiting for the peer, per message batch and as a fraction of the time.
  uint64_t received = stats.bytesReceived - last.bytesReceived, wait = stats.recvWaitNs - last.recvWaitNs;
  if (stats.messagesReceived > last.messagesReceived) {
    recordWait(peer, wait);
    if (received >= kMinThroughputBytes && now > o.recvSinceNs) {
      double fraction = std::min(1.0, static_cast<double>(wait) / static_cast<double>(now - o.recvSinceNs));
      peers_[peer].recvWait.add(fraction, weight_, now);
    }
    last.recvWaitNs = stats.recvWaitNs;
    last.messagesReceived = stats.messagesReceived;
    last.bytesReceived = stats.bytesReceived;
    o.recvSinceNs = now;
  }
}

size_t ProbeSet::publishOne(AttributeStore& store, const Ewma& e, uint64_t* seen, const std::string& name) {
  const uint64_t updates = e.updates();
  if (updates == *seen) return 0;
  *seen = updates;
  Status st = store.set(name, e.value(), Source::kProbe, e.lastNs());
  if (!st.isOk()) {
    TH_INFO(log::kAttrs, "probe %s not published: %s", name.c_str(), st.message().c_str());
    return 0;
  }
  return 1;
}

size_t ProbeSet::publish(AttributeStore& store) {
  size_t n = 0;
  const std::string me = std::to_string(rank_);
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_) continue;
    const PeerSlot& slot = peers_[p];
    Published& seen = published_[p];
    if (slot.gbps.updates() == seen.gbps && slot.latencyUs.updates() == seen.latencyUs &&
        slot.waitUs.updates() == seen.waitUs && slot.sendBusy.updates() == seen.sendBusy &&
        slot.recvWait.updates() == seen.recvWait && slot.probeGbps.updates() == seen.probeGbps &&
        slot.pathGbps.updates() == seen.pathGbps)
      continue;
    const std::string peer = std::to_string(p);
    const std::string link = "link." + me + "." + peer + ".";
    n += publishOne(store, slot.gbps, &seen.gbps, link + "gbps");
    n += publishOne(store, slot.latencyUs, &seen.latencyUs, link + "latency_us");
    n += publishOne(store, slot.waitUs, &seen.waitUs, "rank." + peer + ".wait_us");
    n += publishOne(store, slot.sendBusy, &seen.sendBusy, link + "bottleneck");
    n += publishOne(store, slot.recvWait, &seen.recvWait, "link." + peer + "." + me + ".bottleneck");
    n += publishOne(store, slot.probeGbps, &seen.probeGbps, link + "probe_gbps");
    n += publishOne(store, slot.pathGbps, &seen.pathGbps, link + "path_gbps");
  }
  n += publishOne(store, collUs_, &publishedColl_, "rank." + me + ".coll_us");
  n += publishOne(store, idleUs_, &publishedIdle_, "rank." + me + ".idle_us");
  return n;
}

}  // namespace theseus::attrs
