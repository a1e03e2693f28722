// ClusterView: the leader's merged view of every rank's attributes.
//
// The leader merges the latest Snapshot of each rank (its own included). A
// rank's new snapshot replaces everything that rank reported before, so a
// value the rank cleared disappears from the view with its next report.
//
// Several ranks may report the same name (every rank of a host reads the same
// attribute file; every rank that received from r measures rank.r.wait_us).
// The view keeps each rank's report and combines them when asked:
//   rank.*.wait_us      the largest report (the longest anyone waited for r)
//   link.*.*.bottleneck the smallest report: the sender reports how much of the
//                       time it had data queued, the receiver how much it waited;
//                       only a link that holds both back is a bottleneck (probes.h)
//   everything else     the newest report (ties: the lowest reporting rank)
// A value combined from more than one report has source "merged".
// Timestamps are the leader's: receive time minus the age the rank reported,
// computed once per measurement - a value a rank reports again unchanged (the
// same write id) keeps its timestamp, so shipping delays never make an old
// measurement look new.
//
// Queries take the leader's `now` and an optional maximum age, so a policy can
// ignore values that stopped being refreshed (a link no schedule uses any
// more is not measured any more).
//
// Threading: not thread-safe; the leader loop owns its view (copy it to hand
// it to another thread). Aggregations allocate and are meant for the leader's
// periodic evaluation, not for a collective's path.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "attrs/attribute_store.h"
#include "attrs/pattern.h"

namespace theseus::attrs {

enum class Aggregate : uint8_t { kMin, kMax, kMean, kMedian, kSum, kCount };
const char* aggregateName(Aggregate a);  // "min", "max", ...
bool parseAggregate(const std::string& text, Aggregate* out);

struct ViewEntry {
  double value = 0;
  Source source = Source::kProbe;
  uint64_t timestampNs = 0;  // leader clock
  int rank = -1;             // the rank the value came from (for combined values: the one that won)
  int reports = 1;           // how many ranks reported the name
  uint64_t writeId = 0;      // the reporting rank's write id (SnapshotEntry::writeId)
};

class ClusterView {
 public:
  // Merges rank s.rank's snapshot, received at `receivedNs` (leader clock).
  // Fails (changing nothing) when s.rank is negative.
  Status merge(const Snapshot& s, uint64_t receivedNs);
  // Drops everything a rank reported (it left or failed).
  void forgetRank(int rank);
  // Puts one report directly, as if rank `rank` had reported it.
  void set(const std::string& name, double value, Source source, int rank, uint64_t timestampNs);

  std::optional<ViewEntry> find(const std::string& name) const;
  // The value of `name`, or nothing when absent or older than maxAgeNs (0 = any age).
  std::optional<double> value(const std::string& name, uint64_t nowNs, uint64_t maxAgeNs = 0) const;

  // Calls fn(name, entry) for every name matching `p` whose combined value is
  // at most maxAgeNs old (0 = any age), in name order.
  template <typename Fn>
  void forEach(const Pattern& p, uint64_t nowNs, uint64_t maxAgeNs, Fn&& fn) const {
    for (auto it = names_.lower_bound(p.literalPrefix()); it != names_.end(); ++it) {
      if (it->first.compare(0, p.literalPrefix().size(), p.literalPrefix()) != 0) break;
      if (!p.matches(it->first)) continue;
      ViewEntry e = combine(it->second);
      if (maxAgeNs != 0 && nowNs > e.timestampNs && nowNs - e.timestampNs > maxAgeNs) continue;
      fn(it->first, e);
    }
  }

  // min/max/mean/median/sum over the matching values; nothing when no value
  // matches, except count, which is then 0.
  std::optional<double> aggregate(const Pattern& p, Aggregate a, uint64_t nowNs, uint64_t maxAgeNs = 0) const;

  std::vector<std::pair<std::string, ViewEntry>> entries() const;  // by name
  size_t size() const { return names_.size(); }
  std::vector<int> reportingRanks() const;  // sorted
  std::string describe(uint64_t nowNs) const;  // one line per name, for logs and tools

 private:
  enum class Combine : uint8_t { kNewest, kMax, kMin };
  struct Report {
    int reporter;
    ViewEntry entry;
  };
  struct Reports {
    Combine how = Combine::kNewest;
    std::vector<Report> byRank;  // one per reporting rank, sorted by reporter
  };
  static Combine combineFor(const std::string& name);
  static ViewEntry combine(const Reports& r);
  void put(const std::string& name, int reporter, const ViewEntry& e);
  const ViewEntry* reportOf(const std::string& name, int reporter) const;
  void remove(const std::string& name, int reporter);

  std::map<std::string, Reports> names_;
  std::unordered_map<int, std::vector<std::string>> namesOf_;  // reporter -> names it reported
};

}  // namespace theseus::attrs
