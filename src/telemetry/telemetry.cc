#include "telemetry/telemetry.h"

#include <algorithm>
#include <array>
#include <cstdio>

#include "attrs/probes.h"
#include "common/deadline.h"
#include "exec/plan.h"
#include "transport/transport_manager.h"

namespace theseus::telemetry {
namespace {

// Single-writer counter update (no read-modify-write on the hot path).
inline void bump(std::atomic<uint64_t>& a, uint64_t by) {
  a.store(a.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

}  // namespace

Recorder::Recorder(int rank, int nranks, transport::TransportManager* transports, attrs::ProbeSet* probes,
                   size_t capacity)
    : rank_(rank),
      nranks_(nranks),
      transports_(transports),
      probes_(probes),
      ring_(new CollectiveRecord[std::max<size_t>(capacity, 1)]),
      capacity_(std::max<size_t>(capacity, 1)),
      lastWait_(static_cast<size_t>(std::max(nranks, 0)), 0) {}

void Recorder::measureWaits(const exec::Plan& plan, CollectiveRecord& r) {
  for (const exec::PlanConn& c : plan.conns) {
    if (c.isSend || c.peer < 0 || c.peer >= nranks_ || c.peer == rank_) continue;
    uint64_t total = transports_->stats(c.peer).recvWaitNs;
    uint64_t& last = lastWait_[c.peer];
    uint64_t delta = total >= last ? total - last : 0;
    last = total;
    if (delta > r.waitNs || r.waitPeer < 0) {
      r.waitNs = delta;
      r.waitPeer = c.peer;
    }
  }
}

void Recorder::onPlanDone(const exec::Plan& plan, uint64_t ns, uint64_t endNs) {
  const bool p2p = plan.tag == exec::kP2pTag;
  uint64_t n = written_.load(std::memory_order_relaxed);
  CollectiveRecord& r = ring_[nextSlot_];
  if (++nextSlot_ == capacity_) nextSlot_ = 0;
  r.seq = plan.seq;
  r.op = plan.opName;
  r.schedule = plan.scheduleName;
  r.bytes = plan.bytes;
  r.durationNs = ns;
  r.endNs = endNs != 0 ? endNs : nowNs();
  r.waitPeer = -1;
  r.waitNs = 0;
  // Waits are the host executor's (its connections' counters): a plan the GPU runs (no duration
  // known here) waited on none of them.
  if (transports_ != nullptr && ns != 0 && plan.bytes >= kWaitProbeBytes) measureWaits(plan, r);
  written_.store(n + 1, std::memory_order_release);
  bump(p2p ? p2p_ : collectives_, 1);
  bump(bytes_, plan.bytes);
  bump(busyNs_, ns);
  // Per operation type: the names are static strings, so a pointer comparison finds the slot.
  for (OpSlot& s : ops_) {
    const char* name = s.op.load(std::memory_order_relaxed);
    if (name == nullptr) s.op.store(name = plan.opName, std::memory_order_release);
    if (name != plan.opName) continue;
    bump(s.count, 1);
    bump(s.bytes, plan.bytes);
    bump(s.busyNs, ns);
    // The buckets' bounds in ns, as integers.
    static constexpr auto kBoundsNs = [] {
      std::array<uint64_t, kLatencyBucketCount - 1> b{};
      for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint64_t>(kLatencyBuckets[i] * 1e9);
      return b;
    }();
    size_t b = 0;
    while (b < kBoundsNs.size() && ns > kBoundsNs[b]) ++b;
    bump(s.buckets[b], 1);
    break;
  }
  if (probes_ != nullptr && !p2p) probes_->recordCollective(ns, r.endNs);
}

Counters Recorder::counters() const {
  Counters c;
  c.collectives = collectives_.load(std::memory_order_relaxed);
  c.p2pPlans = p2p_.load(std::memory_order_relaxed);
  c.bytes = bytes_.load(std::memory_order_relaxed);
  c.busyNs = busyNs_.load(std::memory_order_relaxed);
  return c;
}

std::vector<OpStats> Recorder::opStats() const {
  std::vector<OpStats> out;
  for (const OpSlot& s : ops_) {
    const char* name = s.op.load(std::memory_order_acquire);
    if (name == nullptr) break;
    OpStats o;
    o.op = name;
    o.count = s.count.load(std::memory_order_relaxed);
    o.bytes = s.bytes.load(std::memory_order_relaxed);
    o.busyNs = s.busyNs.load(std::memory_order_relaxed);
    for (size_t b = 0; b < kLatencyBucketCount; ++b) o.buckets[b] = s.buckets[b].load(std::memory_order_relaxed);
    out.push_back(o);
  }
  return out;
}

std::vector<CollectiveRecord> Recorder::recent(size_t max) const {
  const uint64_t end = written_.load(std::memory_order_acquire);
  const uint64_t count = std::min<uint64_t>({end, capacity_, max});
  std::vector<CollectiveRecord> out;
  out.reserve(count);
  for (uint64_t i = end - count; i < end; ++i) out.push_back(ring_[i % capacity_]);
  // The writer may have lapped the oldest slots while we copied them: the slot of
  // index i is reused by index i + capacity, which may be in progress once `after` reaches i + capacity.
  const uint64_t after = written_.load(std::memory_order_acquire);
  const uint64_t firstValid = after + 1 > capacity_ ? after + 1 - capacity_ : 0;
  const uint64_t first = end - count;
  if (firstValid > first) out.erase(out.begin(), out.begin() + static_cast<long>(std::min<uint64_t>(firstValid - first, out.size())));
  return out;
}

std::string Recorder::describe(const CollectiveRecord& r) {
  char buf[256];
  snprintf(buf, sizeof(buf), "#%llu %s [%s] %llu B %.1f us", static_cast<unsigned long long>(r.seq), r.op,
           r.schedule, static_cast<unsigned long long>(r.bytes), double(r.durationNs) / 1e3);
  std::string s = buf;
  if (r.waitPeer >= 0) {
    snprintf(buf, sizeof(buf), ", waited %.1f us for rank %d", double(r.waitNs) / 1e3, r.waitPeer);
    s += buf;
  }
  return s;
}

}  // namespace theseus::telemetry
