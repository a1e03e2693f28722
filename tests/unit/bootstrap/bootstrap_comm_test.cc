// Communicators from unique ids: identity, out-of-band collectives, messages,
// data connections and liveness. Ranks are threads.
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <set>

#include "boot_test_util.h"
#include "bootstrap/unique_id.h"

namespace theseus::bootstrap {
namespace {

using testing::eventually;
using testing::makeComm;
using testing::makeRanks;
using testing::ScopedEnv;

// Runs fn(rank) on one thread per rank and joins them.
template <typename F>
void onAllRanks(int n, F fn) {
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) ts.emplace_back([&, r] { fn(r); });
  for (auto& t : ts) t.join();
}

TEST(BootstrapComm, IdentityAndPeerTables) {
  for (int n : {1, 2, 3, 5, 8}) {
    auto m = makeComm(n);
    ASSERT_EQ(m.comms.size(), static_cast<size_t>(n));
    std::set<std::string> addrs;
    for (int r = 0; r < n; ++r) {
      Bootstrap& b = *m.comms[r];
      EXPECT_EQ(b.rank(), r);
      EXPECT_EQ(b.nranks(), n);
      EXPECT_EQ(b.commHash(), m.comms[0]->commHash());
      ASSERT_EQ(b.peers().size(), static_cast<size_t>(n));
      EXPECT_EQ(b.peers()[r].pid, getpid());
      EXPECT_EQ(b.nodeCount(), 1);
      EXPECT_EQ(b.localRanks().size(), static_cast<size_t>(n));
      EXPECT_EQ(b.localRank(), r);
      for (int p = 0; p < n; ++p) EXPECT_EQ(b.peers()[p].listenAddress, m.comms[0]->peers()[p].listenAddress);
      addrs.insert(b.peers()[r].listenAddress);
      EXPECT_TRUE(b.failedRanks().empty());
    }
    EXPECT_EQ(addrs.size(), static_cast<size_t>(n)) << "one listen socket per rank";
  }
}

TEST(BootstrapComm, CommHashesDifferBetweenCommunicators) {
  auto a = makeComm(2), b = makeComm(2);
  EXPECT_NE(a.comms[0]->commHash(), b.comms[0]->commHash());
  // Even with the same NCCL_COMM_ID (the id bytes are then identical), each creation differs.
  ScopedEnv env("NCCL_COMM_ID", testing::freeLoopbackAddress().toString());
  ncclUniqueId id;
  ASSERT_TRUE(createUniqueId(&id).isOk());
  auto e1 = makeRanks(id, 3, {0, 1, 2});
  auto e2 = makeRanks(id, 3, {0, 1, 2});
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(e1.status[r].isOk() && e2.status[r].isOk()) << e1.status[r].message() << e2.status[r].message();
  EXPECT_NE(e1.comms[0]->commHash(), e2.comms[0]->commHash());
}

TEST(BootstrapComm, AllGatherWithUnevenContributionsAndBarrier) {
  const int n = 5;
  auto m = makeComm(n);
  std::atomic<int> failures{0};
  onAllRanks(n, [&](int r) {
    for (int round = 0; round < 30; ++round) {
      std::string mine(static_cast<size_t>(r * 1000 + round), static_cast<char>('a' + r));
      std::vector<std::string> all;
      Status s = m.comms[r]->allGather(mine, &all);
      if (!s.isOk() || all.size() != n) {
        ++failures;
        continue;
      }
      for (int p = 0; p < n; ++p)
        if (all[p] != std::string(static_cast<size_t>(p * 1000 + round), static_cast<char>('a' + p))) ++failures;
      if (!m.comms[r]->barrier().isOk()) ++failures;
    }
  });
  EXPECT_EQ(failures.load(), 0);
}

TEST(BootstrapComm, TypedMessagesQueueUntilAHandlerIsSet) {
  const int n = 4;
  auto m = makeComm(n);
  // Every rank (the leader included) sends to the leader before the leader has a handler.
  for (int r = 0; r < n; ++r)
    ASSERT_TRUE(m.comms[r]->sendToLeader(MsgType::kUser, "up from " + std::to_string(r)).isOk());
  std::mutex mu;
  std::multiset<std::string> atLeader;
  std::vector<int> froms;
  m.comms[0]->setHandler(MsgType::kUser, [&](int from, std::string_view payload) {
    std::lock_guard<std::mutex> lock(mu);
    atLeader.insert(std::string(payload));
    froms.push_back(from);
  });
  ASSERT_TRUE(eventually([&] {
    std::lock_guard<std::mutex> lock(mu);
    return atLeader.size() == n;
  }));
  for (int r = 0; r < n; ++r) EXPECT_EQ(atLeader.count("up from " + std::to_string(r)), 1u);

  // Down: the leader to each rank; order per rank is preserved.
  std::vector<std::vector<std::string>> got(n);
  for (int r = 0; r < n; ++r)
    m.comms[r]->setHandler(MsgType::kEpoch, [&, r](int from, std::string_view payload) {
      EXPECT_EQ(from, 0);
      std::lock_guard<std::mutex> lock(mu);
      got[r].emplace_back(payload);
    });
  for (int i = 0; i < 10; ++i)
    for (int r = 0; r < n; ++r) ASSERT_TRUE(m.comms[0]->sendToRank(r, MsgType::kEpoch, std::to_string(i)).isOk());
  ASSERT_TRUE(eventually([&] {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& g : got)
      if (g.size() != 10) return false;
    return true;
  }));
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < 10; ++i) EXPECT_EQ(got[r][i], std::to_string(i));

  EXPECT_EQ(m.comms[1]->sendToRank(2, MsgType::kUser, "x").code(), ncclInvalidUsage) << "leader only";
  EXPECT_EQ(m.comms[0]->sendToRank(9, MsgType::kUser, "x").code(), ncclInvalidArgument);
  EXPECT_EQ(m.comms[1]->sendToLeader(static_cast<MsgType>(3), "x").code(), ncclInvalidArgument) << "reserved type";
}

TEST(BootstrapComm, DataConnectionsInAnyOrderWithTags) {
  const int n = 3;
  auto m = makeComm(n);
  std::atomic<int> failures{0};
  // Every ordered pair (i -> j), two tags each; half the accepts start before the connects.
  onAllRanks(n, [&](int r) {
    std::vector<std::thread> ts;
    for (int peer = 0; peer < n; ++peer) {
      if (peer == r) continue;
      for (uint32_t tag : {1u, 2u}) {
        ts.emplace_back([&, peer, tag] {
          auto fd = m.comms[r]->connectTo(peer, tag, Deadline::afterMs(5000));
          if (!fd.isOk()) return (void)++failures;
          std::string msg = std::to_string(r) + "->" + std::to_string(peer) + "#" + std::to_string(tag);
          if (!sendAll(fd.value(), msg.data(), msg.size(), Wait::forMs(5000), "peer").isOk()) ++failures;
          ::close(fd.value());
        });
        ts.emplace_back([&, peer, tag] {
          if ((peer + tag) % 2) std::this_thread::sleep_for(std::chrono::milliseconds(30));
          auto fd = m.comms[r]->acceptFrom(peer, tag, Deadline::afterMs(5000));
          if (!fd.isOk()) return (void)++failures;
          std::string want = std::to_string(peer) + "->" + std::to_string(r) + "#" + std::to_string(tag);
          std::string got(want.size(), '\0');
          if (!recvAll(fd.value(), got.data(), got.size(), Wait::forMs(5000), "peer").isOk() || got != want) ++failures;
          ::close(fd.value());
        });
      }
    }
    for (auto& t : ts) t.join();
  });
  EXPECT_EQ(failures.load(), 0);

  auto t0 = Clock::now();
  auto none = m.comms[0]->acceptFrom(1, 99, Deadline::afterMs(200));
  EXPECT_EQ(none.status().code(), ncclTimeout);
  EXPECT_NE(none.status().message().find("a data connection from rank 1 (tag 99)"), std::string::npos)
      << none.status().message();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 2.0);
}

TEST(BootstrapComm, AbandonIsAFailureCloseIsAGoodbye) {
  const int n = 4;
  auto m = makeComm(n);
  std::mutex mu;
  std::vector<std::pair<int, int>> callbacks;  // (observer, failed rank)
  for (int r = 0; r < n; ++r)
    m.comms[r]->setPeerFailureCallback([&, r](int failed, const Status& why) {
      EXPECT_EQ(why.code(), ncclRemoteError);
      std::lock_guard<std::mutex> lock(mu);
      callbacks.emplace_back(r, failed);
    });
  m.comms[3]->close();  // clean: rank 3 departs
  ASSERT_TRUE(eventually([&] { return m.comms[0]->departedRanks() == std::vector<int>{3}; }));
  m.comms[2]->abandon();  // like a crash: peers see a failure
  for (int r : {0, 1})
    ASSERT_TRUE(eventually([&] { return m.comms[r]->failedRanks() == std::vector<int>{2}; })) << "observer " << r;
  // A rank lists the failure before it runs its callback: wait for the callbacks too.
  auto seen = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return std::set<std::pair<int, int>>(callbacks.begin(), callbacks.end());
  };
  const std::set<std::pair<int, int>> expected{{0, 2}, {1, 2}};
  EXPECT_TRUE(eventually([&] { return seen() == expected; }));
  EXPECT_EQ(seen(), expected) << "no callback for the clean leave";
  // Collectives that need the departed or failed ranks fail at once, naming them.
  std::vector<Status> st(2);
  auto t0 = Clock::now();
  onAllRanks(2, [&](int r) {
    std::vector<std::string> all;
    st[r] = m.comms[r]->allGather("x", &all);
  });
  for (auto& s : st) {
    EXPECT_EQ(s.code(), ncclRemoteError);
    EXPECT_TRUE(s.message().find("rank 2") != std::string::npos || s.message().find("rank 3") != std::string::npos)
        << s.message();
  }
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5.0);
  EXPECT_EQ(m.comms[0]->connectTo(2, 0, Deadline::afterMs(1000)).status().code(), ncclRemoteError);
}

TEST(BootstrapComm, LeaderFailureIsSeenByEveryRank) {
  const int n = 3;
  auto m = makeComm(n);
  m.comms[0]->abandon();
  for (int r : {1, 2}) ASSERT_TRUE(eventually([&] { return m.comms[r]->failedRanks() == std::vector<int>{0}; }));
  std::vector<std::string> all;
  Status s = m.comms[1]->allGather("x", &all);
  EXPECT_EQ(s.code(), ncclRemoteError);
  EXPECT_TRUE(s.message().find("leader (rank 0) failed") != std::string::npos ||
              s.message().find("the leader rank 0 has failed") != std::string::npos)
      << s.message();
}

TEST(BootstrapComm, AllGatherTimesOutNamingTheRanksThatDidNotTakePart) {
  ScopedEnv timeout("THESEUS_BOOTSTRAP_TIMEOUT_MS", "400");
  auto m = makeComm(3);
  std::vector<Status> st(3);
  std::thread t1([&] {
    std::vector<std::string> all;
    st[1] = m.comms[1]->allGather("x", &all);
  });
  std::vector<std::string> all;
  st[0] = m.comms[0]->allGather("x", &all);  // rank 2 never calls
  t1.join();
  EXPECT_EQ(st[0].code(), ncclTimeout);
  EXPECT_NE(st[0].message().find("rank 2 did not take part"), std::string::npos) << st[0].message();
  EXPECT_EQ(st[1].code(), ncclTimeout);
}

TEST(BootstrapComm, ScalableInitWithSeveralRoots) {
  for (auto [nranks, nIds] : {std::pair{5, 2}, std::pair{7, 3}, std::pair{4, 4}}) {
    std::vector<ncclUniqueId> ids(nIds);
    for (auto& id : ids) ASSERT_TRUE(createUniqueId(&id).isOk());
    std::vector<std::unique_ptr<Bootstrap>> comms(nranks);
    std::vector<Status> st(nranks);
    onAllRanks(nranks, [&](int r) {
      auto b = createFromUniqueIds(ids.data(), nIds, r, nranks, {});
      st[r] = b.status();
      if (b.isOk()) comms[r] = b.take();
    });
    for (int r = 0; r < nranks; ++r) {
      ASSERT_TRUE(st[r].isOk()) << nranks << "/" << nIds << " rank " << r << ": " << st[r].message();
      EXPECT_EQ(comms[r]->commHash(), comms[0]->commHash());
      EXPECT_EQ(comms[r]->rank(), r);
    }
    onAllRanks(nranks, [&](int r) { EXPECT_TRUE(comms[r]->barrier().isOk()); });
  }
}

}  // namespace
}  // namespace theseus::bootstrap
