#include "doctor/arrivals.h"

#include <algorithm>
#include <map>

namespace theseus::doctor {
namespace {

constexpr size_t kMinComplete = 5;   // collectives every rank recorded, before judging
constexpr size_t kMinLate = 3;       // late collectives of a straggler (when not a run)
constexpr double kLateShare = 0.25;  // ... or this share of the complete collectives
constexpr size_t kRun = 5;           // late collectives in a row: a straggling episode

struct Arrival {
  uint64_t idleNs = 0;
  uint64_t durationNs = 0;  // 0: not finished
};

// seq -> arrival, for collectives whose previous collective on the rank ended.
std::map<uint64_t, Arrival> arrivalsOf(const RankDump& d) {
  std::map<uint64_t, Arrival> out;
  const DumpOp* prev = nullptr;
  for (const DumpOp& o : d.ops) {
    if (!o.collective) continue;
    if (prev != nullptr && prev->endNs != 0 && o.startNs >= prev->endNs && prev->seq + 1 == o.seq) {
      Arrival a;
      a.idleNs = o.startNs - prev->endNs;
      if (o.endNs > o.startNs && o.state == "done") a.durationNs = o.endNs - o.startNs;
      out[o.seq] = a;
    }
    prev = &o;
  }
  return out;
}

struct Lateness {
  std::vector<uint64_t> lateSeqs;
  std::vector<double> lateUs;  // how late, for each of lateSeqs
  size_t run = 0;  // late collectives in a row, ending at the last one
  size_t longestRun = 0;
  uint64_t runFirst = 0, runLast = 0;
};

void noteLate(Lateness* l, uint64_t seq, double us) {
  if (l->lateSeqs.empty() || l->lateSeqs.back() + 1 != seq) l->run = 0;
  ++l->run;
  l->lateSeqs.push_back(seq);
  l->lateUs.push_back(us);
  if (l->run > l->longestRun) {
    l->longestRun = l->run;
    l->runLast = seq;
    l->runFirst = seq + 1 - l->run;
  }
}

Finding describe(int rank, const Lateness& l, size_t complete, uint64_t newest) {
  const double median = quantile(l.lateUs, 0.5);
  Finding f{"compute_straggler", {rank}, {}, {}, median, "", {}};
  const uint64_t first = l.lateSeqs.front(), last = l.lateSeqs.back();
  f.words = format("rank %d straggles in compute: it started %zu of %zu collectives late, by %.1f ms at the median "
                   "(between #%llu and #%llu), and the others waited for it", rank, l.lateSeqs.size(), complete,
                   median / 1e3, static_cast<unsigned long long>(first), static_cast<unsigned long long>(last));
  if (newest >= last + kRun)
    f.words += format("; it arrives on time again since #%llu (it recovered)", static_cast<unsigned long long>(last + 1));
  f.evidence.push_back(format("late collectives: %zu of %zu; the longest run: %zu in a row (#%llu..#%llu)",
                              l.lateSeqs.size(), complete, l.longestRun, static_cast<unsigned long long>(l.runFirst),
                              static_cast<unsigned long long>(l.runLast)));
  f.evidence.push_back(format("idle time before a collective (its own clock) exceeds the other ranks' median by %.1f ms "
                              "at the median of those, up to %.1f ms", median / 1e3,
                              *std::max_element(l.lateUs.begin(), l.lateUs.end()) / 1e3));
  return f;
}

}  // namespace

bool findLateArrivals(const std::vector<const RankDump*>& ranks, const Thresholds& t, std::vector<Finding>* out) {
  if (ranks.size() < 2) return false;
  std::vector<std::map<uint64_t, Arrival>> arrivals;
  for (const RankDump* d : ranks) arrivals.push_back(arrivalsOf(*d));
  // Collectives every rank recorded, oldest first.
  std::vector<uint64_t> complete;
  for (const auto& [seq, a] : arrivals[0]) {
    bool all = true;
    for (const auto& other : arrivals) all = all && other.count(seq) != 0;
    if (all) complete.push_back(seq);
  }
  if (complete.size() < kMinComplete) return false;
  std::vector<Lateness> late(ranks.size());
  for (uint64_t seq : complete) {
    std::vector<double> durations;
    for (const auto& a : arrivals)
      if (a.at(seq).durationNs > 0) durations.push_back(static_cast<double>(a.at(seq).durationNs) / 1e3);
    const double typical = quantile(durations, 0.5);
    for (size_t i = 0; i < ranks.size(); ++i) {
      std::vector<double> others;
      for (size_t j = 0; j < ranks.size(); ++j)
        if (j != i) others.push_back(static_cast<double>(arrivals[j].at(seq).idleNs) / 1e3);
      const double us = static_cast<double>(arrivals[i].at(seq).idleNs) / 1e3 - quantile(others, 0.5);
      if (isLate(us, typical, t)) noteLate(&late[i], seq, us);
    }
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    const Lateness& l = late[i];
    const bool often = l.lateSeqs.size() >= kMinLate &&
                       static_cast<double>(l.lateSeqs.size()) >= kLateShare * static_cast<double>(complete.size());
    if (often || l.longestRun >= kRun) out->push_back(describe(ranks[i]->rank, l, complete.size(), complete.back()));
  }
  return true;
}

}  // namespace theseus::doctor
