// The horizon-lease protocol end to end without sockets: a leader state
// machine and N rank clocks as threads that exchange messages through FIFO
// queues (like the bootstrap's control links), with random proposals, random
// negative acknowledgements and random delays everywhere. Checks invariant 1
// (every rank used the same table version for every collective), that tables
// take effect in order and that the run neither deadlocks nor stalls.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "epoch/epoch_clock.h"
#include "epoch/epoch_leader.h"
#include "epoch/test_tables.h"

namespace theseus::epoch {
namespace {

template <typename T>
class Queue {
 public:
  void push(T v) {
    {
      std::lock_guard<std::mutex> l(mu_);
      q_.push_back(std::move(v));
    }
    cv_.notify_one();
  }
  bool pop(T* out, const std::atomic<bool>& stop) {
    std::unique_lock<std::mutex> l(mu_);
    while (q_.empty()) {
      if (stop.load()) return false;
      cv_.wait_for(l, std::chrono::milliseconds(2));
    }
    *out = std::move(q_.front());
    q_.pop_front();
    return true;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<T> q_;
};

struct ToLeader {
  int rank;
  EpochMsg msg;
};

struct Params {
  int nranks;
  uint64_t collectives;
  uint64_t proposeEvery;  // proposals per this many reported collectives
  int nackPercent;
  uint64_t seed;
};

void simulate(const Params& p) {
  std::atomic<bool> stop{false};
  Queue<ToLeader> toLeader;
  std::vector<Queue<EpochMsg>> toRank(p.nranks);
  std::vector<std::unique_ptr<EpochClock>> clocks;
  AbortFlag abort;
  auto initial = std::make_shared<Epoch>();
  initial->version = 1;
  initial->table = randomTable(p.seed, 1, p.nranks, {});
  for (int r = 0; r < p.nranks; ++r) {
    EpochClock::Hooks h;
    h.report = [&, r](uint64_t seq) {
      EpochMsg m;
      m.kind = MsgKind::kProgress;
      m.seq = seq;
      toLeader.push({r, m});
      return Status::ok();
    };
    auto copy = std::make_shared<Epoch>();
    copy->version = 1;
    copy->table = initial->table;
    clocks.push_back(std::make_unique<EpochClock>(copy, 8, 4, &abort, 20000, h));
  }

  // Leader.
  std::thread leader([&] {
    LeaderConfig c;
    c.nranks = p.nranks;
    c.leaseMin = 2;
    c.leaseMax = 64;
    c.leaseTargetNs = 200'000;
    EpochLeader l(c, 1, 8, 4, nowNs());
    std::mt19937_64 rng(p.seed);
    uint64_t lastProposal = 0;
    ToLeader in;
    while (toLeader.pop(&in, stop)) {
      Outbox out;
      if (in.msg.kind == MsgKind::kProgress) l.onProgress(in.rank, in.msg.seq, nowNs(), &out);
      else l.onAck(in.rank, in.msg.version, in.msg.ok, in.msg.text, nowNs(), &out);
      if (l.state() == EpochLeader::State::kLeasing && l.maxReported() >= lastProposal + p.proposeEvery) {
        lastProposal = l.maxReported();
        auto t = randomTable(rng(), l.horizon(), p.nranks, {});
        ASSERT_TRUE(l.propose(t, "sim", nowNs(), &out).isOk());
      }
      for (auto& [dest, m] : out.messages)
        for (int r = 0; r < p.nranks; ++r)
          if (dest == Outbox::kAll || dest == r) toRank[r].push(m);
    }
  });

  // Control + prepare side of each rank.
  std::vector<std::thread> control;
  for (int r = 0; r < p.nranks; ++r) {
    control.emplace_back([&, r] {
      std::mt19937_64 rng(p.seed * 31 + r);
      EpochMsg m;
      while (toRank[r].pop(&m, stop)) {
        if (rng() % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 200));
        EpochClock& c = *clocks[r];
        switch (m.kind) {
          case MsgKind::kGrant: c.onGrant(m.horizon, m.reportAt); break;
          case MsgKind::kCommit: c.onCommit(m.version, m.effectiveSeq, m.horizon, m.reportAt); break;
          case MsgKind::kCancel: c.onCancel(m.version, m.text); break;
          case MsgKind::kPrepare: {
            auto e = std::make_shared<Epoch>();
            e->version = m.version;
            auto t = policy::DecisionTable::deserialize(m.text);
            ASSERT_TRUE(t.isOk());
            e->table = t.take();
            c.onPrepare(e, m.horizon);
            auto job = c.takePrepareJob();
            ASSERT_NE(job, nullptr);
            bool ok = static_cast<int>(rng() % 100) >= p.nackPercent;
            Status st = ok ? Status::ok() : internalError("simulated failure");
            if (c.finishPrepare(m.version, st)) {
              EpochMsg ack;
              ack.kind = MsgKind::kAck;
              ack.version = m.version;
              ack.ok = ok;
              ack.text = st.message();
              toLeader.push({r, ack});
            }
            break;
          }
          default: break;
        }
      }
    });
  }

  // Application threads: the collectives.
  std::vector<std::vector<uint64_t>> used(p.nranks, std::vector<uint64_t>(p.collectives));
  std::vector<std::thread> apps;
  std::atomic<int> failures{0};
  for (int r = 0; r < p.nranks; ++r) {
    apps.emplace_back([&, r] {
      std::mt19937_64 rng(p.seed * 77 + r);
      EpochClock& c = *clocks[r];
      for (uint64_t s = 0; s < p.collectives; ++s) {
        if (c.mustAdvance(s)) {
          Status st = c.advance(s);
          if (!st.isOk()) {
            ADD_FAILURE() << "rank " << r << " seq " << s << ": " << st.message();
            ++failures;
            return;
          }
        }
        used[r][s] = c.current().version;
        if (rng() % 64 == 0) std::this_thread::yield();
      }
    });
  }
  for (auto& t : apps) t.join();
  stop.store(true);
  leader.join();
  for (auto& t : control) t.join();
  ASSERT_EQ(failures.load(), 0);

  uint64_t swaps = 0;
  for (uint64_t s = 0; s < p.collectives; ++s) {
    for (int r = 1; r < p.nranks; ++r)
      ASSERT_EQ(used[r][s], used[0][s]) << "collective " << s << ": rank " << r << " used another table";
    if (s > 0) {
      ASSERT_GE(used[0][s], used[0][s - 1]) << "tables went back at " << s;
      swaps += used[0][s] != used[0][s - 1];
    }
  }
  EXPECT_GE(swaps, 5u) << "the simulation should have swapped tables several times";
  for (int r = 0; r < p.nranks; ++r) EXPECT_TRUE(clocks[r]->failure().isOk()) << clocks[r]->failure().message();
}

TEST(EpochProtocol, TwoRanksManySwaps) { simulate({2, 20000, 100, 0, 1}); }
TEST(EpochProtocol, FiveRanksWithNegativeAcks) { simulate({5, 20000, 150, 20, 2}); }
TEST(EpochProtocol, EightRanksFrequentSwaps) { simulate({8, 10000, 40, 5, 3}); }

}  // namespace
}  // namespace theseus::epoch
