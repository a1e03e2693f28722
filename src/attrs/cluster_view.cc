#include "attrs/cluster_view.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

namespace theseus::attrs {

const char* aggregateName(Aggregate a) {
  switch (a) {
    case Aggregate::kMin: return "min";
    case Aggregate::kMax: return "max";
    case Aggregate::kMean: return "mean";
    case Aggregate::kMedian: return "median";
    case Aggregate::kSum: return "sum";
    case Aggregate::kCount: return "count";
  }
  return "?";
}

bool parseAggregate(const std::string& text, Aggregate* out) {
  for (Aggregate a : {Aggregate::kMin, Aggregate::kMax, Aggregate::kMean, Aggregate::kMedian, Aggregate::kSum,
                      Aggregate::kCount}) {
    if (text == aggregateName(a)) {
      *out = a;
      return true;
    }
  }
  return false;
}

ClusterView::Combine ClusterView::combineFor(const std::string& name) {
  // rank.<r>.wait_us: every rank that waited for r reports it; the longest wait is the straggler signal.
  static const Pattern waits = Pattern::compile("rank.*.wait_us").take();
  // link.<a>.<b>.bottleneck: a reports how long it had data queued, b how long it waited (probes.h).
  static const Pattern bottlenecks = Pattern::compile("link.*.*.bottleneck").take();
  if (waits.matches(name)) return Combine::kMax;
  if (bottlenecks.matches(name)) return Combine::kMin;
  return Combine::kNewest;
}

ViewEntry ClusterView::combine(const Reports& r) {
  const Report* best = &r.byRank.front();
  for (const Report& x : r.byRank) {
    bool better = r.how == Combine::kMax   ? x.entry.value > best->entry.value
                  : r.how == Combine::kMin ? x.entry.value < best->entry.value
                                           : x.entry.timestampNs > best->entry.timestampNs;
    if (better) best = &x;
  }
  ViewEntry e = best->entry;
  e.reports = static_cast<int>(r.byRank.size());
  if (r.how != Combine::kNewest && e.reports > 1) e.source = Source::kMerged;
  return e;
}

void ClusterView::put(const std::string& name, int reporter, const ViewEntry& e) {
  auto [it, inserted] = names_.try_emplace(name);
  if (inserted) it->second.how = combineFor(name);
  auto& v = it->second.byRank;
  auto pos = std::lower_bound(v.begin(), v.end(), reporter, [](const Report& r, int k) { return r.reporter < k; });
  if (pos != v.end() && pos->reporter == reporter) {
    pos->entry = e;
    return;
  }
  v.insert(pos, Report{reporter, e});
  namesOf_[reporter].push_back(name);
}

void ClusterView::remove(const std::string& name, int reporter) {
  auto it = names_.find(name);
  if (it == names_.end()) return;
  auto& v = it->second.byRank;
  v.erase(std::remove_if(v.begin(), v.end(), [&](const Report& r) { return r.reporter == reporter; }), v.end());
  if (v.empty()) names_.erase(it);
}

const ViewEntry* ClusterView::reportOf(const std::string& name, int reporter) const {
  auto it = names_.find(name);
  if (it == names_.end()) return nullptr;
  for (const Report& r : it->second.byRank)
    if (r.reporter == reporter) return &r.entry;
  return nullptr;
}

Status ClusterView::merge(const Snapshot& s, uint64_t receivedNs) {
  if (s.rank < 0) return invalidArgument("attribute snapshot without a reporting rank");
  std::vector<std::string> previous;
  auto known = namesOf_.find(s.rank);
  if (known != namesOf_.end()) previous.swap(known->second);
  std::vector<std::string> now;
  now.reserve(s.entries.size());
  for (const SnapshotEntry& e : s.entries) {
    ViewEntry v;
    v.value = e.value;
    v.source = e.source;
    v.timestampNs = receivedNs > e.ageNs ? receivedNs - e.ageNs : 0;
    v.rank = e.rank >= 0 ? e.rank : s.rank;
    v.writeId = e.writeId;
    const ViewEntry* old = reportOf(e.name, s.rank);
    if (old != nullptr && e.writeId != 0 && old->writeId == e.writeId) v.timestampNs = old->timestampNs;
    put(e.name, s.rank, v);
    now.push_back(e.name);
  }
  // What the rank reported before and no longer does is gone.
  std::sort(now.begin(), now.end());
  for (const std::string& name : previous)
    if (!std::binary_search(now.begin(), now.end(), name)) remove(name, s.rank);
  namesOf_[s.rank] = std::move(now);
  return Status::ok();
}

void ClusterView::forgetRank(int rank) {
  auto it = namesOf_.find(rank);
  if (it == namesOf_.end()) return;
  for (const std::string& name : it->second) remove(name, rank);
  namesOf_.erase(it);
}

void ClusterView::set(const std::string& name, double value, Source source, int rank, uint64_t timestampNs) {
  ViewEntry v;
  v.value = value;
  v.source = source;
  v.timestampNs = timestampNs;
  v.rank = rank;
  put(name, rank, v);
}

std::optional<ViewEntry> ClusterView::find(const std::string& name) const {
  auto it = names_.find(name);
  if (it == names_.end()) return std::nullopt;
  return combine(it->second);
}

std::optional<double> ClusterView::value(const std::string& name, uint64_t nowNs, uint64_t maxAgeNs) const {
  auto e = find(name);
  if (!e) return std::nullopt;
  if (maxAgeNs != 0 && nowNs > e->timestampNs && nowNs - e->timestampNs > maxAgeNs) return std::nullopt;
  return e->value;
}

std::optional<double> ClusterView::aggregate(const Pattern& p, Aggregate a, uint64_t nowNs, uint64_t maxAgeNs) const {
  std::vector<double> values;
  forEach(p, nowNs, maxAgeNs, [&](const std::string&, const ViewEntry& e) { values.push_back(e.value); });
  if (a == Aggregate::kCount) return static_cast<double>(values.size());
  if (values.empty()) return std::nullopt;
  switch (a) {
    case Aggregate::kMin: return *std::min_element(values.begin(), values.end());
    case Aggregate::kMax: return *std::max_element(values.begin(), values.end());
    case Aggregate::kSum:
    case Aggregate::kMean: {
      double sum = 0;
      for (double v : values) sum += v;
      return a == Aggregate::kSum ? sum : sum / static_cast<double>(values.size());
    }
    case Aggregate::kMedian: {
      // The middle value; for an even count the mean of the two middle values.
      size_t mid = values.size() / 2;
      std::nth_element(values.begin(), values.begin() + mid, values.end());
      double hi = values[mid];
      if (values.size() % 2 == 1) return hi;
      double lo = *std::max_element(values.begin(), values.begin() + mid);
      return (lo + hi) / 2;
    }
    case Aggregate::kCount: break;
  }
  return std::nullopt;
}

std::vector<std::pair<std::string, ViewEntry>> ClusterView::entries() const {
  std::vector<std::pair<std::string, ViewEntry>> out;
  out.reserve(names_.size());
  for (const auto& [name, reports] : names_) out.emplace_back(name, combine(reports));
  return out;
}

std::vector<int> ClusterView::reportingRanks() const {
  std::vector<int> out;
  for (const auto& [rank, names] : namesOf_) out.push_back(rank);
  std::sort(out.begin(), out.end());
  return out;
}

std::string ClusterView::describe(uint64_t nowNs) const {
  std::string out;
  char line[512];
  for (const auto& [name, e] : entries()) {
    double ageS = nowNs > e.timestampNs ? static_cast<double>(nowNs - e.timestampNs) / 1e9 : 0.0;
    snprintf(line, sizeof(line), "%s = %g  (%s, rank %d, %.1f s old%s)\n", name.c_str(), e.value,
             sourceName(e.source), e.rank, ageS, e.reports > 1 ? ", several reports" : "");
    out += line;
  }
  return out;
}

}  // namespace theseus::attrs
