// ClusterView: merging snapshots (replacement per rank, combination rules,
// ages in the leader's clock), forgetting ranks, aggregations over patterns.
#include <gtest/gtest.h>

#include "attrs/cluster_view.h"

namespace theseus::attrs {
namespace {

constexpr uint64_t kSec = 1000000000ull;

Pattern pat(const char* text) { return Pattern::compile(text).take(); }

Snapshot snapshot(int rank, std::vector<SnapshotEntry> entries) {
  Snapshot s;
  s.rank = rank;
  for (auto& e : entries)
    if (e.rank < 0) e.rank = rank;
  s.entries = std::move(entries);
  return s;
}

TEST(ClusterView, MergeTurnsAgesIntoLeaderTimestamps) {
  ClusterView v;
  ASSERT_TRUE(v.merge(snapshot(1, {{"link.1.0.gbps", 8, Source::kProbe, 2 * kSec, -1}}), 100 * kSec).isOk());
  auto e = v.find("link.1.0.gbps");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->value, 8);
  EXPECT_EQ(e->timestampNs, 98 * kSec);
  EXPECT_EQ(e->rank, 1);
  EXPECT_EQ(e->source, Source::kProbe);
  EXPECT_EQ(v.value("link.1.0.gbps", 101 * kSec, 5 * kSec), 8);
  EXPECT_FALSE(v.value("link.1.0.gbps", 104 * kSec, 5 * kSec).has_value());  // 6 s old
  EXPECT_EQ(v.value("link.1.0.gbps", 104 * kSec, 0), 8);                     // no age limit
  Snapshot bad;
  EXPECT_FALSE(v.merge(bad, kSec).isOk());
}

TEST(ClusterView, ANewSnapshotReplacesEverythingTheRankReported) {
  ClusterView v;
  ASSERT_TRUE(v.merge(snapshot(2, {{"a.x", 1, Source::kApi, 0, -1}, {"b.x", 2, Source::kApi, 0, -1}}), kSec).isOk());
  ASSERT_TRUE(v.merge(snapshot(3, {{"b.x", 3, Source::kApi, 0, -1}}), kSec).isOk());
  ASSERT_TRUE(v.merge(snapshot(2, {{"c.x", 4, Source::kApi, 0, -1}}), 2 * kSec).isOk());
  EXPECT_FALSE(v.find("a.x").has_value());  // rank 2 cleared it
  EXPECT_EQ(v.find("b.x")->value, 3);       // rank 3's report remains
  EXPECT_EQ(v.find("b.x")->reports, 1);
  EXPECT_EQ(v.find("c.x")->value, 4);
  EXPECT_EQ(v.reportingRanks(), (std::vector<int>{2, 3}));
  v.forgetRank(3);
  EXPECT_FALSE(v.find("b.x").has_value());
  EXPECT_EQ(v.size(), 1u);
  EXPECT_EQ(v.reportingRanks(), (std::vector<int>{2}));
}

// Shipping delays vary: a value reported again unchanged keeps its timestamp;
// a new write of it gets a new one.
TEST(ClusterView, AReportedAgainMeasurementKeepsItsTimestamp) {
  ClusterView v;
  ASSERT_TRUE(v.merge(snapshot(1, {{"link.1.2.gbps", 1, Source::kProbe, 1 * kSec, -1, 7}}), 10 * kSec).isOk());
  EXPECT_EQ(v.find("link.1.2.gbps")->timestampNs, 9 * kSec);
  // 2 s later, with 3 ms more shipping delay: same write, same timestamp.
  ASSERT_TRUE(v.merge(snapshot(1, {{"link.1.2.gbps", 1, Source::kProbe, 3 * kSec, -1, 7}}), 12 * kSec + 3000000)
                  .isOk());
  EXPECT_EQ(v.find("link.1.2.gbps")->timestampNs, 9 * kSec);
  // A new measurement with the same value: a new timestamp.
  ASSERT_TRUE(v.merge(snapshot(1, {{"link.1.2.gbps", 1, Source::kProbe, 0, -1, 8}}), 13 * kSec).isOk());
  EXPECT_EQ(v.find("link.1.2.gbps")->timestampNs, 13 * kSec);
  EXPECT_EQ(v.find("link.1.2.gbps")->writeId, 8u);
}

TEST(ClusterView, SeveralReportsOfOneName) {
  ClusterView v;
  // Newest wins for ordinary names, whichever rank reported it.
  v.set("node.h.healthy", 1, Source::kFile, 0, 10 * kSec);
  v.set("node.h.healthy", 0, Source::kApi, 1, 12 * kSec);
  v.set("node.h.healthy", 1, Source::kFile, 2, 11 * kSec);
  EXPECT_EQ(v.find("node.h.healthy")->value, 0);
  EXPECT_EQ(v.find("node.h.healthy")->rank, 1);
  EXPECT_EQ(v.find("node.h.healthy")->reports, 3);
  // rank.<r>.wait_us: the longest anyone waited, marked as merged.
  v.set("rank.3.wait_us", 100, Source::kProbe, 0, 20 * kSec);
  v.set("rank.3.wait_us", 900, Source::kProbe, 1, 10 * kSec);
  v.set("rank.3.wait_us", 50, Source::kProbe, 2, 30 * kSec);
  auto w = v.find("rank.3.wait_us");
  EXPECT_EQ(w->value, 900);
  EXPECT_EQ(w->rank, 1);
  EXPECT_EQ(w->source, Source::kMerged);
  v.forgetRank(1);
  EXPECT_EQ(v.find("rank.3.wait_us")->value, 100);
  v.forgetRank(0);
  EXPECT_EQ(v.find("rank.3.wait_us")->source, Source::kProbe);  // one report left: its own source
  // link.<a>.<b>.bottleneck: the smaller of the sender's and the receiver's fractions.
  v.set("link.1.2.bottleneck", 0.95, Source::kProbe, 1, 20 * kSec);  // 1 had data queued for 2
  v.set("link.1.2.bottleneck", 0.9, Source::kProbe, 2, 10 * kSec);   // 2 waited for 1
  v.set("link.0.1.bottleneck", 0.97, Source::kProbe, 0, 20 * kSec);  // 0 queued (held up by 1)...
  v.set("link.0.1.bottleneck", 0.02, Source::kProbe, 1, 20 * kSec);  // ...but 1 did not wait for 0
  EXPECT_EQ(v.find("link.1.2.bottleneck")->value, 0.9);
  EXPECT_EQ(v.find("link.1.2.bottleneck")->source, Source::kMerged);
  EXPECT_EQ(v.find("link.0.1.bottleneck")->value, 0.02);
  EXPECT_EQ(v.aggregate(pat("link.*.*.bottleneck"), Aggregate::kMax, 20 * kSec), 0.9);
}

TEST(ClusterView, Aggregations) {
  ClusterView v;
  const double gbps[] = {10, 2, 12, 11};
  for (int r = 0; r < 4; ++r)
    v.set("link." + std::to_string(r) + "." + std::to_string((r + 1) % 4) + ".gbps", gbps[r], Source::kProbe, r,
          10 * kSec);
  v.set("link.0.1.latency_us", 50, Source::kProbe, 0, 10 * kSec);
  v.set("linkx.0.1.gbps", 1000, Source::kProbe, 0, 10 * kSec);
  Pattern links = pat("link.*.*.gbps");
  EXPECT_EQ(v.aggregate(links, Aggregate::kMin, 10 * kSec), 2);
  EXPECT_EQ(v.aggregate(links, Aggregate::kMax, 10 * kSec), 12);
  EXPECT_EQ(v.aggregate(links, Aggregate::kSum, 10 * kSec), 35);
  EXPECT_EQ(v.aggregate(links, Aggregate::kMean, 10 * kSec), 8.75);
  EXPECT_EQ(v.aggregate(links, Aggregate::kMedian, 10 * kSec), 10.5);
  EXPECT_EQ(v.aggregate(links, Aggregate::kCount, 10 * kSec), 4);
  v.set("link.3.2.gbps", 7, Source::kProbe, 3, 10 * kSec);
  EXPECT_EQ(v.aggregate(links, Aggregate::kMedian, 10 * kSec), 10);  // odd count: the middle value
  // Nothing matches: count is 0, the others are unknown.
  Pattern none = pat("gpu.*.sm_clock_mhz");
  EXPECT_EQ(v.aggregate(none, Aggregate::kCount, 0), 0);
  for (Aggregate a : {Aggregate::kMin, Aggregate::kMax, Aggregate::kMean, Aggregate::kMedian, Aggregate::kSum})
    EXPECT_FALSE(v.aggregate(none, a, 0).has_value()) << aggregateName(a);
}

TEST(ClusterView, AggregationsIgnoreStaleValues) {
  ClusterView v;
  v.set("link.0.1.gbps", 1, Source::kProbe, 0, 1 * kSec);  // stale
  v.set("link.1.0.gbps", 9, Source::kProbe, 1, 9 * kSec);
  Pattern links = pat("link.*.*.gbps");
  EXPECT_EQ(v.aggregate(links, Aggregate::kMin, 10 * kSec, 5 * kSec), 9);
  EXPECT_EQ(v.aggregate(links, Aggregate::kCount, 10 * kSec, 5 * kSec), 1);
  EXPECT_EQ(v.aggregate(links, Aggregate::kMin, 10 * kSec, 0), 1);
  int seen = 0;
  v.forEach(links, 10 * kSec, 5 * kSec, [&](const std::string& name, const ViewEntry& e) {
    EXPECT_EQ(name, "link.1.0.gbps");
    EXPECT_EQ(e.value, 9);
    ++seen;
  });
  EXPECT_EQ(seen, 1);
}

TEST(ClusterView, AggregateNamesRoundTrip) {
  for (Aggregate a : {Aggregate::kMin, Aggregate::kMax, Aggregate::kMean, Aggregate::kMedian, Aggregate::kSum,
                      Aggregate::kCount}) {
    Aggregate back;
    ASSERT_TRUE(parseAggregate(aggregateName(a), &back));
    EXPECT_EQ(back, a);
  }
  Aggregate x;
  EXPECT_FALSE(parseAggregate("avg", &x));
}

TEST(ClusterView, DescribeListsEveryName) {
  ClusterView v;
  v.set("a.b", 1, Source::kApi, 0, kSec);
  v.set("c.d", 2, Source::kFile, 1, kSec);
  std::string d = v.describe(3 * kSec);
  EXPECT_NE(d.find("a.b = 1  (api, rank 0, 2.0 s old)"), std::string::npos) << d;
  EXPECT_NE(d.find("c.d = 2  (file, rank 1"), std::string::npos) << d;
}

}  // namespace
}  // namespace theseus::attrs
