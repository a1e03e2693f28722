// EpochLeader as a state machine: leases follow reports (and adapt to the
// collective rate), a swap freezes the lease and commits at it once every rank
// acknowledged, negative acknowledgements / timeouts / failures cancel it.
#include <gtest/gtest.h>

#include "epoch/epoch_leader.h"

namespace theseus::epoch {
namespace {

constexpr uint64_t kMs = 1'000'000;

LeaderConfig config(int n) {
  LeaderConfig c;
  c.nranks = n;
  c.leaseMin = 4;
  c.leaseMax = 1024;
  c.leaseTargetNs = 10 * kMs;
  c.prepareTimeoutNs = 100 * kMs;
  return c;
}

policy::DecisionTable table(const char* schedule) {
  policy::DecisionTable t;
  policy::Decision d;
  d.schedule = schedule;
  (void)t.add(schedule::Collective::kAllReduce, 0, UINT64_MAX, d);
  return t;
}

const EpochMsg* only(const Outbox& out, MsgKind k) {
  const EpochMsg* found = nullptr;
  for (const auto& [dest, m] : out.messages) {
    EXPECT_EQ(dest, Outbox::kAll);
    if (m.kind == k) found = &m;
  }
  return found;
}

TEST(EpochLeader, ReportsAtTheReportPointExtendTheLease) {
  EpochLeader l(config(2), 1, 16, 8, 0);
  Outbox out;
  l.onProgress(1, 5, kMs, &out);  // below the report point: nothing
  EXPECT_TRUE(out.messages.empty());
  l.onProgress(1, 8, 2 * kMs, &out);
  const EpochMsg* g = only(out, MsgKind::kGrant);
  ASSERT_NE(g, nullptr);
  EXPECT_GT(g->horizon, 16u);
  EXPECT_LT(g->reportAt, g->horizon);
  EXPECT_GT(g->reportAt, 8u);
  uint64_t h = l.horizon();
  out.messages.clear();
  l.onProgress(0, 8, 2 * kMs, &out);  // the other rank's report of the same lease: no second grant
  EXPECT_TRUE(out.messages.empty());
  EXPECT_EQ(l.horizon(), h);
}

// Collectives longer than longCollectiveNs: a lease of one, the report point at the horizon,
// so a swap proposed while one runs commits at the next collective.
TEST(EpochLeader, LongCollectivesGetALeaseOfOneAndSwapAtTheNext) {
  LeaderConfig c = config(2);
  c.longCollectiveNs = 200 * kMs;
  EpochLeader l(c, 1, 4, 2, 0);
  Outbox out;
  l.onProgress(0, 2, 1000 * kMs, &out);  // two collectives in a second: long ones
  const EpochMsg* g = only(out, MsgKind::kGrant);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->horizon, 5u);
  EXPECT_EQ(g->reportAt, 5u);  // report when blocked at the horizon
  // Every collective asks when it gets there.
  for (uint64_t s = 5; s < 8; ++s) {
    out.messages.clear();
    l.onProgress(0, s, s * 500 * kMs, &out);  // 500 ms per collective
    g = only(out, MsgKind::kGrant);
    ASSERT_NE(g, nullptr) << s;
    EXPECT_EQ(g->horizon, s + 1);
  }
  // Collective 7 runs (horizon 8): a swap commits at 8, the very next one.
  out.messages.clear();
  ASSERT_TRUE(l.propose(table("tree"), "test", 3501 * kMs, &out).isOk());
  l.onAck(0, 2, true, "", 3502 * kMs, &out);
  l.onAck(1, 2, true, "", 3502 * kMs, &out);
  const EpochMsg* commit = only(out, MsgKind::kCommit);
  ASSERT_NE(commit, nullptr);
  EXPECT_EQ(commit->effectiveSeq, 8u);
  EXPECT_EQ(commit->horizon, 9u);
  EXPECT_EQ(commit->reportAt, 9u);
  // Short collectives again: the usual lease.
  out.messages.clear();
  l.onProgress(0, 9, 3510 * kMs, &out);
  g = only(out, MsgKind::kGrant);
  ASSERT_NE(g, nullptr);
  EXPECT_GE(g->horizon - 9, c.leaseMin);
}

TEST(EpochLeader, LeaseLengthFollowsTheCollectiveRate) {
  EpochLeader fast(config(2), 1, 16, 8, 0);
  Outbox out;
  // 8 collectives in 8 us: 1 per us -> 10 ms worth is 10000, clamped to 1024.
  fast.onProgress(1, 8, 8000, &out);
  EXPECT_EQ(fast.lease(), 1024u);
  EpochLeader slow(config(2), 1, 16, 8, 0);
  // 8 collectives in 800 ms: 10 ms worth is 0.1, clamped to 4.
  slow.onProgress(1, 8, 800 * kMs, &out);
  EXPECT_EQ(slow.lease(), 4u);
}

TEST(EpochLeader, SwapFreezesTheLeaseAndCommitsAtItWhenEveryoneAcked) {
  EpochLeader l(config(3), 1, 16, 8, 0);
  Outbox out;
  auto v = l.propose(table("tree"), "because", kMs, &out);
  ASSERT_TRUE(v.isOk());
  EXPECT_EQ(v.value(), 2u);
  const EpochMsg* p = only(out, MsgKind::kPrepare);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->version, 2u);
  EXPECT_EQ(p->horizon, 16u);
  EXPECT_EQ(p->reason, "because");
  EXPECT_TRUE(policy::DecisionTable::deserialize(p->text).isOk());
  EXPECT_FALSE(l.propose(table("ring"), "again", kMs, &out).isOk());  // one swap at a time
  out.messages.clear();
  l.onProgress(1, 16, 2 * kMs, &out);  // a rank blocked at the horizon gets no grant during the swap
  EXPECT_TRUE(out.messages.empty());
  l.onAck(0, 2, true, "", 3 * kMs, &out);
  l.onAck(2, 2, true, "", 3 * kMs, &out);
  l.onAck(2, 1, true, "", 3 * kMs, &out);  // stale version: ignored
  EXPECT_TRUE(out.messages.empty());
  l.onAck(1, 2, true, "", 4 * kMs, &out);
  const EpochMsg* c = only(out, MsgKind::kCommit);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->version, 2u);
  EXPECT_EQ(c->effectiveSeq, 16u);
  EXPECT_GT(c->horizon, 16u);
  EXPECT_EQ(l.committedVersion(), 2u);
  EXPECT_EQ(l.lastCommitSeq(), 16u);
  EXPECT_EQ(l.committedTable().ranges(schedule::Collective::kAllReduce)[0].decision.schedule, "tree");
  EXPECT_EQ(l.state(), EpochLeader::State::kLeasing);
}

TEST(EpochLeader, ANegativeAckCancelsAndResumesLeasing) {
  EpochLeader l(config(2), 1, 16, 8, 0);
  Outbox out;
  ASSERT_TRUE(l.propose(table("tree"), "x", 0, &out).isOk());
  out.messages.clear();
  l.onProgress(1, 16, kMs, &out);
  l.onAck(1, 2, false, "schedule tree cannot be generated", 2 * kMs, &out);
  const EpochMsg* c = only(out, MsgKind::kCancel);
  ASSERT_NE(c, nullptr);
  EXPECT_NE(c->text.find("rank 1 could not prepare"), std::string::npos) << c->text;
  EXPECT_NE(only(out, MsgKind::kGrant), nullptr);  // waiting ranks get a lease at once
  EXPECT_EQ(l.state(), EpochLeader::State::kLeasing);
  EXPECT_EQ(l.committedVersion(), 1u);
  out.messages.clear();
  auto v = l.propose(table("ring"), "y", 3 * kMs, &out);
  ASSERT_TRUE(v.isOk());
  EXPECT_EQ(v.value(), 3u);  // cancelled versions are never reused
}

TEST(EpochLeader, PrepareTimeoutNamesTheMissingRanks) {
  EpochLeader l(config(4), 1, 16, 8, 0);
  Outbox out;
  ASSERT_TRUE(l.propose(table("tree"), "x", 0, &out).isOk());
  l.onAck(0, 2, true, "", kMs, &out);
  l.onAck(2, 2, true, "", kMs, &out);
  out.messages.clear();
  l.tick(50 * kMs, &out);
  EXPECT_TRUE(out.messages.empty());
  l.tick(101 * kMs, &out);
  const EpochMsg* c = only(out, MsgKind::kCancel);
  ASSERT_NE(c, nullptr);
  EXPECT_NE(c->text.find("rank(s) 1, 3"), std::string::npos) << c->text;
}

TEST(EpochLeader, ARankFailureStopsTheLeader) {
  EpochLeader l(config(2), 1, 16, 8, 0);
  Outbox out;
  ASSERT_TRUE(l.propose(table("tree"), "x", 0, &out).isOk());
  out.messages.clear();
  l.onRankFailed(1, &out);
  EXPECT_NE(only(out, MsgKind::kCancel), nullptr);
  EXPECT_EQ(l.state(), EpochLeader::State::kStopped);
  out.messages.clear();
  l.onProgress(0, 16, kMs, &out);
  EXPECT_TRUE(out.messages.empty());
  EXPECT_FALSE(l.propose(table("ring"), "y", kMs, &out).isOk());
}

TEST(EpochLeader, ReportsBeyondTheLeaseAreIgnored) {
  EpochLeader l(config(2), 1, 16, 8, 0);
  Outbox out;
  l.onProgress(1, 17, kMs, &out);
  l.onProgress(7, 10, kMs, &out);  // not a rank
  EXPECT_TRUE(out.messages.empty());
  EXPECT_EQ(l.maxReported(), 0u);
}

}  // namespace
}  // namespace theseus::epoch
