// EpochClock on its own: the one-comparison hot path, reports at the report
// point and at the horizon, installing a committed table exactly at its
// collective, bounded and abortable waits, and protocol violations that fail
// the clock for good.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "epoch/epoch_clock.h"

namespace theseus::epoch {
namespace {

std::shared_ptr<Epoch> epoch(uint64_t version, const char* schedule = "ring") {
  auto e = std::make_shared<Epoch>();
  e->version = version;
  policy::Decision d;
  d.schedule = schedule;
  (void)e->table.add(schedule::Collective::kAllReduce, 0, UINT64_MAX, d);
  e->table.setVersion(version);
  return e;
}

struct Harness {
  AbortFlag abort;
  std::vector<uint64_t> reports;
  Status reportResult;  // what the report hook returns
  std::vector<uint64_t> installed;
  int prepareWakes = 0;
  Status health;
  std::unique_ptr<EpochClock> clock;

  explicit Harness(uint64_t horizon = 16, uint64_t reportAt = 8, int64_t waitMs = 200) {
    EpochClock::Hooks h;
    h.report = [this](uint64_t seq) {
      reports.push_back(seq);
      return reportResult;
    };
    h.health = [this] { return health; };
    h.prepareQueued = [this] { ++prepareWakes; };
    h.installed = [this](const Epoch& e) { installed.push_back(e.fromSeq); };
    clock = std::make_unique<EpochClock>(epoch(1), horizon, reportAt, &abort, waitMs, h);
  }
  // What the engine does per collective.
  Status run(uint64_t seq) { return clock->mustAdvance(seq) ? clock->advance(seq) : Status::ok(); }
  // A full swap as the leader would drive it.
  void swapAt(uint64_t version, uint64_t e, uint64_t nextHorizon) {
    clock->onPrepare(epoch(version, "tree"), e);
    auto job = clock->takePrepareJob();
    ASSERT_NE(job, nullptr);
    ASSERT_TRUE(clock->finishPrepare(version, Status::ok()));
    clock->onCommit(version, e, nextHorizon, nextHorizon - 4);
  }
};

TEST(EpochClock, HotPathOnlyAtTheReportPointAndTheHorizon) {
  Harness h;
  int slow = 0;
  for (uint64_t s = 0; s < 8; ++s) {
    slow += h.clock->mustAdvance(s);
    ASSERT_TRUE(h.run(s).isOk());
  }
  EXPECT_EQ(slow, 0);
  EXPECT_TRUE(h.clock->mustAdvance(8));
  ASSERT_TRUE(h.run(8).isOk());
  EXPECT_EQ(h.reports, std::vector<uint64_t>{8});
  // Reported once: up to the horizon nothing more to do.
  for (uint64_t s = 9; s < 16; ++s) EXPECT_FALSE(h.clock->mustAdvance(s)) << s;
  EXPECT_TRUE(h.clock->mustAdvance(16));
  h.clock->onGrant(40, 30);
  EXPECT_FALSE(h.clock->mustAdvance(16));
  EXPECT_TRUE(h.clock->mustAdvance(30));
  EXPECT_EQ(h.clock->horizon(), 40u);
  h.clock->onGrant(20, 10);  // stale: leases never shrink
  EXPECT_EQ(h.clock->horizon(), 40u);
}

TEST(EpochClock, WaitAtTheHorizonReportsAndTimesOut) {
  Harness h(4, 4, 100);
  auto t0 = std::chrono::steady_clock::now();
  Status s = h.run(4);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("waited 100 ms"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("lease ends at 4"), std::string::npos) << s.message();
  EXPECT_GE(ms, 90);
  EXPECT_LT(ms, 2000);
  EXPECT_EQ(h.reports, std::vector<uint64_t>{4});  // the leader was told once
}

// A leader that finished its last collective and left: collectives the lease
// still covers complete; the first one at the horizon fails, naming the leader.
TEST(EpochClock, AFailedReportBelowTheHorizonDoesNotFailTheCollective) {
  Harness h(16, 8, 100);
  h.reportResult = remoteError("the control link to rank 0 is down");
  for (uint64_t s = 0; s < 16; ++s) ASSERT_TRUE(h.run(s).isOk()) << s;
  EXPECT_EQ(h.reports, std::vector<uint64_t>{8});
  h.health = remoteError("the leader (rank 0) left the communicator");
  Status s = h.run(16);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("leader"), std::string::npos) << s.message();
}

TEST(EpochClock, AGrantReleasesAWaitingRank) {
  Harness h(4, 4, 5000);
  std::thread leader([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    h.clock->onGrant(100, 50);
  });
  EXPECT_TRUE(h.run(4).isOk());
  leader.join();
}

TEST(EpochClock, AbortAndHealthEndTheWait) {
  {
    Harness h(4, 4, 60000);
    std::thread t([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      h.abort.set();
    });
    Status s = h.run(4);
    t.join();
    EXPECT_NE(s.message().find("aborted"), std::string::npos) << s.message();
  }
  {
    Harness h(4, 4, 60000);
    h.health = remoteError("rank 3 failed");
    Status s = h.run(4);
    EXPECT_NE(s.message().find("rank 3 failed"), std::string::npos) << s.message();
  }
}

TEST(EpochClock, ACommittedTableTakesEffectExactlyAtItsCollective) {
  Harness h(16, 8);
  ASSERT_TRUE(h.run(8).isOk());
  h.swapAt(2, 16, 48);
  EXPECT_EQ(h.prepareWakes, 1);
  for (uint64_t s = 9; s < 16; ++s) {
    ASSERT_TRUE(h.run(s).isOk());
    EXPECT_EQ(h.clock->current().version, 1u) << s;
  }
  EXPECT_TRUE(h.clock->mustAdvance(16));
  ASSERT_TRUE(h.run(16).isOk());
  EXPECT_EQ(h.clock->current().version, 2u);
  EXPECT_EQ(h.clock->current().fromSeq, 16u);
  EXPECT_EQ(h.installed, std::vector<uint64_t>{16});
  EXPECT_EQ(h.clock->currentVersion(), 2u);
  EXPECT_EQ(h.clock->epochFor(100)->version, 2u);
}

TEST(EpochClock, SeveralCommittedTablesQueueInOrder) {
  Harness h(16, 8);
  h.swapAt(2, 16, 32);
  h.swapAt(3, 32, 64);
  EXPECT_EQ(h.clock->epochFor(20)->version, 2u);
  EXPECT_EQ(h.clock->epochFor(40)->version, 3u);
  for (uint64_t s = 0; s < 40; ++s) ASSERT_TRUE(h.run(s).isOk()) << s;
  EXPECT_EQ(h.installed, (std::vector<uint64_t>{16, 32}));
  EXPECT_EQ(h.clock->current().version, 3u);
}

TEST(EpochClock, CancelDropsThePreparedTable) {
  Harness h(16, 8);
  h.clock->onPrepare(epoch(2), 16);
  h.clock->onCancel(2, "rank 1 could not");
  EXPECT_EQ(h.clock->takePrepareJob(), nullptr);
  EXPECT_TRUE(h.clock->failure().isOk());
  h.clock->onCommit(2, 16, 32, 24);  // a commit of a cancelled table is a violation
  EXPECT_FALSE(h.clock->failure().isOk());
  EXPECT_FALSE(h.run(0).isOk());
}

TEST(EpochClock, ProtocolViolationsFailTheClockForGood) {
  {
    Harness h;
    h.clock->onCommit(2, 16, 32, 24);  // never prepared
    Status f = h.clock->failure();
    EXPECT_NE(f.message().find("never asked to prepare"), std::string::npos) << f.message();
    EXPECT_TRUE(h.clock->mustAdvance(0));  // every collective now reaches the error
    EXPECT_FALSE(h.run(0).isOk());
  }
  {
    Harness h;
    h.clock->onPrepare(epoch(2), 16);
    ASSERT_NE(h.clock->takePrepareJob(), nullptr);
    h.clock->onCommit(2, 16, 32, 24);  // before this rank finished preparing
    EXPECT_NE(h.clock->failure().message().find("has not prepared"), std::string::npos);
  }
  {
    Harness h(16, 8);
    h.clock->onPrepare(epoch(2), 16);
    ASSERT_NE(h.clock->takePrepareJob(), nullptr);
    ASSERT_TRUE(h.clock->finishPrepare(2, Status::ok()));
    h.clock->onCommit(2, 10, 32, 24);  // below the lease this rank holds
    EXPECT_NE(h.clock->failure().message().find("may already have started"), std::string::npos);
  }
  {
    Harness h(16, 8);
    h.clock->onPrepare(epoch(2), 8);  // a PREPARE for a collective below the lease
    EXPECT_FALSE(h.clock->failure().isOk());
  }
  {
    Harness h(16, 8);
    h.swapAt(2, 16, 32);
    Status s = h.clock->advance(17);  // a rank that skipped collective 16 cannot switch "exactly at" it
    EXPECT_NE(s.message().find("already at 17"), std::string::npos) << s.message();
  }
}

TEST(EpochClock, AFailedPrepareIsNotAcknowledgedAsReady) {
  Harness h;
  h.clock->onPrepare(epoch(2), 16);
  ASSERT_NE(h.clock->takePrepareJob(), nullptr);
  EXPECT_TRUE(h.clock->finishPrepare(2, internalError("no memory")));
  EXPECT_FALSE(h.clock->finishPrepare(2, Status::ok()));  // once only
  h.clock->onCommit(2, 16, 32, 24);
  EXPECT_FALSE(h.clock->failure().isOk());
}

TEST(EpochClock, InfiniteLeaseNeverLeavesTheHotPath) {
  AbortFlag abort;
  EpochClock c(epoch(1), EpochClock::kForever, EpochClock::kForever, &abort, 0, {});
  for (uint64_t s : {0ull, 1ull, 1000000ull, (1ull << 62)}) EXPECT_FALSE(c.mustAdvance(s));
}

}  // namespace
}  // namespace theseus::epoch
