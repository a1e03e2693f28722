#include "attrs/probes.h"

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

ProbeSet::ProbeSet(int rank, int nranks, double weight)
    : rank_(rank),
      nranks_(nranks > 0 ? nranks : 0),
      weight_(weight > 0 && weight <= 1 ? weight : configuredWeight()),
      peers_(new PeerSlot[nranks_]),
      published_(nranks_),
      lastStats_(nranks_) {}

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

void ProbeSet::recordCollective(uint64_t ns) { collUs_.add(static_cast<double>(ns) / 1e3, weight_, nowNs()); }

void ProbeSet::observePeerStats(int peer, const transport::PeerStats& stats) {
  if (peer < 0 || peer >= nranks_ || peer == rank_) return;
  transport::PeerStats& last = lastStats_[peer];
  // Counters only grow; a smaller value means the connection was replaced: start over.
  if (stats.bytesSent < last.bytesSent || stats.sendBusyNs < last.sendBusyNs ||
      stats.recvWaitNs < last.recvWaitNs || stats.messagesReceived < last.messagesReceived) {
    last = stats;
    return;
  }
  uint64_t bytes = stats.bytesSent - last.bytesSent, busy = stats.sendBusyNs - last.sendBusyNs;
  if (bytes >= kMinThroughputBytes && busy > 0) {
    recordTransfer(peer, bytes, busy);
    last.bytesSent = stats.bytesSent;
    last.sendBusyNs = stats.sendBusyNs;
    last.messagesSent = stats.messagesSent;
  }
  // Without new messages from the peer there was nothing to wait for.
  if (stats.messagesReceived > last.messagesReceived) {
    recordWait(peer, stats.recvWaitNs - last.recvWaitNs);
    last.recvWaitNs = stats.recvWaitNs;
    last.messagesReceived = stats.messagesReceived;
    last.bytesReceived = stats.bytesReceived;
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
        slot.waitUs.updates() == seen.waitUs)
      continue;
    const std::string peer = std::to_string(p);
    const std::string link = "link." + me + "." + peer + ".";
    n += publishOne(store, slot.gbps, &seen.gbps, link + "gbps");
    n += publishOne(store, slot.latencyUs, &seen.latencyUs, link + "latency_us");
    n += publishOne(store, slot.waitUs, &seen.waitUs, "rank." + peer + ".wait_us");
  }
  n += publishOne(store, collUs_, &publishedColl_, "rank." + me + ".coll_us");
  return n;
}

}  // namespace theseus::attrs
