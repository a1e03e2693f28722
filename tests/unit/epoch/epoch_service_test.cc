// EpochService over the real TCP bootstrap, with threads as ranks and a fake
// engine: the creation handshake, leases and random swaps driven by the real
// epoch threads and handlers, identical decision logs, garbage on the control
// channel (dropped with a WARN), protocol violations (the clock fails, the
// collective gets an error), a policy that does not load (every rank fails
// creation with the leader's error), and stopping while a swap is pending.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <thread>
#include <vector>

#include "attrs/attribute_store.h"
#include "bootstrap/bootstrap.h"
#include "epoch/epoch_messages.h"
#include "epoch/epoch_service.h"

namespace theseus::epoch {
namespace {

class FakeEngine final : public Participant {
 public:
  Status prepareEpoch(Epoch& e) override {
    ++prepared;
    return e.table.ranges(schedule::Collective::kAllReduce).empty() ? internalError("empty table") : Status::ok();
  }
  std::vector<uint64_t> recentSizes() override { return {8, 1 << 20}; }
  std::atomic<int> prepared{0};
};

struct Env {
  Env(const char* k, const char* v) : key(k) { setenv(k, v, 1); }
  ~Env() { unsetenv(key); }
  const char* key;
};

struct Rank {
  std::unique_ptr<bootstrap::Bootstrap> boot;
  attrs::AttributeStore store;
  AbortFlag abort;
  FakeEngine engine;
  std::unique_ptr<EpochService> service;
  Status created;
};

// Creates n ranks (threads) with their services; fails the test on a bootstrap error.
std::vector<std::unique_ptr<Rank>> makeRanks(int n) {
  ncclUniqueId id;
  EXPECT_TRUE(bootstrap::createUniqueId(&id).isOk());
  std::vector<std::unique_ptr<Rank>> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back(std::make_unique<Rank>());
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      Rank& me = *ranks[r];
      bootstrap::InitOptions io;
      io.timeoutMs = 30000;
      auto b = bootstrap::createFromUniqueIds(&id, 1, r, n, io);
      if (!b.isOk()) {
        me.created = b.status();
        return;
      }
      me.boot = b.take();
      ServiceOptions o;
      o.bootstrap = me.boot.get();
      o.attributes = &me.store;
      o.abort = &me.abort;
      o.maxChannels = 2;
      o.participant = &me.engine;
      o.health = [] { return Status::ok(); };
      auto s = EpochService::create(o);
      if (s.isOk()) me.service = s.take();
      else me.created = s.status();
    });
  }
  for (auto& t : threads) t.join();
  return ranks;
}

void shutdown(std::vector<std::unique_ptr<Rank>>& ranks) {
  for (auto& r : ranks)
    if (r->service) r->service->stop();
  for (auto& r : ranks)
    if (r->boot) r->boot->close();
}

TEST(EpochService, ThreadsAsRanksSwapAtTheSameCollective) {
  Env swaps("THESEUS_EPOCH_TEST_SWAP_EVERY", "6");
  Env wait("THESEUS_EPOCH_WAIT_TIMEOUT_MS", "30000");
  constexpr int kRanks = 4;
  constexpr uint64_t kCollectives = 3000;
  auto ranks = makeRanks(kRanks);
  for (auto& r : ranks) ASSERT_TRUE(r->created.isOk()) << r->created.message();
  std::vector<std::vector<uint64_t>> used(kRanks, std::vector<uint64_t>(kCollectives));
  std::vector<std::thread> apps;
  std::atomic<int> errors{0};
  for (int r = 0; r < kRanks; ++r) {
    apps.emplace_back([&, r] {
      EpochClock& c = ranks[r]->service->clock();
      for (uint64_t s = 0; s < kCollectives; ++s) {
        if (c.mustAdvance(s)) {
          Status st = c.advance(s);
          if (!st.isOk()) {
            ADD_FAILURE() << "rank " << r << ": " << st.message();
            ++errors;
            return;
          }
        }
        used[r][s] = c.current().version;
        if (s % 16 == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    });
  }
  for (auto& t : apps) t.join();
  ASSERT_EQ(errors.load(), 0);
  for (uint64_t s = 0; s < kCollectives; ++s)
    for (int r = 1; r < kRanks; ++r) ASSERT_EQ(used[r][s], used[0][s]) << "collective " << s << " rank " << r;
  EXPECT_GE(used[0].back(), 20u) << "expected many swaps";
  std::string log0 = ranks[0]->service->decisionLog().text();
  for (int r = 1; r < kRanks; ++r) EXPECT_EQ(ranks[r]->service->decisionLog().text(), log0) << "rank " << r;
  EXPECT_GT(ranks[1]->engine.prepared.load(), 10);
  shutdown(ranks);
}

TEST(EpochService, GarbageIsDroppedAndViolationsFailOnlyTheCollective) {
  Env wait("THESEUS_EPOCH_WAIT_TIMEOUT_MS", "20000");
  auto ranks = makeRanks(2);
  for (auto& r : ranks) ASSERT_TRUE(r->created.isOk()) << r->created.message();
  // Garbage both ways: wrong magic, truncated, a leader-bound message at a rank, attributes that do not parse.
  ASSERT_TRUE(ranks[1]->boot->sendToLeader(bootstrap::MsgType::kEpoch, "junk").isOk());
  ASSERT_TRUE(ranks[1]->boot->sendToLeader(bootstrap::MsgType::kAttributes, "{not json").isOk());
  ASSERT_TRUE(ranks[0]->boot->sendToRank(1, bootstrap::MsgType::kEpoch, std::string("EP\x01\x01\x05", 5)).isOk());
  EpochMsg progress;
  progress.kind = MsgKind::kProgress;
  progress.seq = 1;
  ASSERT_TRUE(ranks[0]->boot->sendToRank(1, bootstrap::MsgType::kEpoch, progress.encode()).isOk());
  // The ranks keep working through several leases.
  for (uint64_t s = 0; s < 200; ++s) {
    for (auto& r : ranks) {
      EpochClock& c = r->service->clock();
      if (c.mustAdvance(s)) {
        ASSERT_TRUE(c.advance(s).isOk()) << s;
      }
    }
  }
  for (auto& r : ranks) EXPECT_TRUE(r->service->clock().failure().isOk());
  // A COMMIT of a table rank 1 never prepared: its clock fails, its next collective gets the error.
  EpochMsg commit;
  commit.kind = MsgKind::kCommit;
  commit.version = 99;
  commit.effectiveSeq = 1u << 30;
  commit.horizon = 1u << 30;
  ASSERT_TRUE(ranks[0]->boot->sendToRank(1, bootstrap::MsgType::kEpoch, commit.encode()).isOk());
  Status st;
  for (int i = 0; i < 500 && st.isOk(); ++i) {
    st = ranks[1]->service->clock().failure();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_NE(st.message().find("never asked to prepare"), std::string::npos) << st.message();
  EXPECT_TRUE(ranks[1]->service->clock().mustAdvance(200));
  EXPECT_FALSE(ranks[1]->service->clock().advance(200).isOk());
  shutdown(ranks);
}

TEST(EpochService, APolicyThatDoesNotLoadFailsCreationEverywhere) {
  Env policy("THESEUS_POLICY", "/nonexistent/theseus-policy.json");
  auto ranks = makeRanks(3);
  for (auto& r : ranks) {
    ASSERT_FALSE(r->created.isOk());
    EXPECT_NE(r->created.message().find("/nonexistent/theseus-policy.json"), std::string::npos)
        << r->created.message();
  }
  for (auto& r : ranks)
    if (r->boot) r->boot->close();
}

TEST(EpochService, OffMeansAStaticTableAndAnInfiniteLease) {
  Env off("THESEUS_EPOCH", "0");
  auto ranks = makeRanks(2);
  for (auto& r : ranks) {
    ASSERT_TRUE(r->created.isOk()) << r->created.message();
    EXPECT_FALSE(r->service->enabled());
    EXPECT_EQ(r->service->telemetry(), nullptr);
    EXPECT_FALSE(r->service->clock().mustAdvance(1ull << 40));
    EXPECT_EQ(r->service->clock().current().version, 1u);
  }
  EXPECT_EQ(ranks[0]->service->decisionLog().text(), ranks[1]->service->decisionLog().text());
  shutdown(ranks);
}

TEST(EpochService, StoppingWhileRanksWaitAtTheHorizonDoesNotHang) {
  Env swaps("THESEUS_EPOCH_TEST_SWAP_EVERY", "4");
  auto ranks = makeRanks(3);
  for (auto& r : ranks) ASSERT_TRUE(r->created.isOk()) << r->created.message();
  // Rank 2's control plane is gone (no ACK will come): ranks 0 and 1 end up
  // waiting at the frozen lease of the first swap.
  ranks[2]->service->stop();
  std::vector<std::thread> apps;
  std::vector<Status> results(2);
  for (int r = 0; r < 2; ++r) {
    apps.emplace_back([&, r] {
      EpochClock& c = ranks[r]->service->clock();
      for (uint64_t s = 0; s < 100000 && results[r].isOk(); ++s)
        if (c.mustAdvance(s)) results[r] = c.advance(s);
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto t0 = std::chrono::steady_clock::now();
  for (auto& r : ranks) r->abort.set();  // what ncclCommAbort does first
  for (auto& t : apps) t.join();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 5.0);
  for (auto& st : results) EXPECT_NE(st.message().find("aborted"), std::string::npos) << st.message();
  shutdown(ranks);
}

}  // namespace
}  // namespace theseus::epoch
