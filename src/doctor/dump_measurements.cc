#include "doctor/dump_measurements.h"

#include <algorithm>

namespace theseus::doctor {
namespace {

const PeerCounters* countersOf(const RankDump& d, int peer) {
  for (const PeerCounters& c : d.peers)
    if (c.peer == peer) return &c;
  return nullptr;
}

double share(uint64_t ns, const RankDump& d) {
  if (d.createdNs == 0 || d.nowNs <= d.createdNs) return -1;
  return std::min(1.0, static_cast<double>(ns) / static_cast<double>(d.nowNs - d.createdNs));
}

void addWindow(const std::vector<const RankDump*>& byRank, Measurements* m) {
  const int n = m->nranks();
  for (int a = 0; a < n; ++a) {
    if (byRank[a] == nullptr) continue;
    for (int b = 0; b < n; ++b) {
      if (a == b || byRank[b] == nullptr) continue;
      const PeerCounters* out = countersOf(*byRank[a], b);
      const PeerCounters* in = countersOf(*byRank[b], a);
      if (out == nullptr || out->bytesSent < kMinWindowBytes) continue;
      const uint64_t busy = std::max(out->sendBusyNs, out->linkBusyNs);
      if (busy == 0) continue;
      LinkMeasure& l = m->link(a, b);
      l.windowGbps = static_cast<double>(out->bytesSent) / static_cast<double>(busy);
      const double sending = share(busy, *byRank[a]);
      const double waiting = in != nullptr ? share(in->recvWaitNs, *byRank[b]) : -1;
      if (sending >= 0 && waiting >= 0) l.windowBottleneck = std::min(sending, waiting);
    }
  }
}

}  // namespace

Measurements measurementsFromDumps(const std::vector<const RankDump*>& ranks, const Placement& placement) {
  const int n = placement.nranks;
  std::vector<const RankDump*> byRank(n, nullptr);
  for (const RankDump* d : ranks)
    if (d->rank >= 0 && d->rank < n) byRank[d->rank] = d;
  // One view, every snapshot received at the same (arbitrary) instant: ages stay ages.
  attrs::ClusterView view;
  const uint64_t at = uint64_t{1} << 62;
  for (const RankDump* d : ranks)
    if (d->attributes) (void)view.merge(*d->attributes, at);
  Measurements m = fromView(view, placement, at, 0);
  addWindow(byRank, &m);
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b)
      if (a != b && (byRank[a] == nullptr || byRank[b] == nullptr)) m.link(a, b) = LinkMeasure{};
  return m;
}

}  // namespace theseus::doctor
