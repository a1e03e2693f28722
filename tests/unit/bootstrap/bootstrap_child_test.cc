// Children (split/shrink): made through the parent's listeners, members only,
// with dead non-members and a dead parent leader.
#include <atomic>
#include <set>

#include "boot_test_util.h"

namespace theseus::bootstrap {
namespace {

using testing::eventually;
using testing::makeComm;
using testing::ScopedEnv;

struct Children {
  std::vector<std::unique_ptr<Bootstrap>> comms;  // by parent rank
  std::vector<Status> status;
};

// Each listed parent rank calls createChild with its own member list.
Children makeChildren(std::vector<std::unique_ptr<Bootstrap>>& parents,
                      const std::vector<std::pair<int, std::vector<int>>>& calls, uint64_t childId) {
  Children c;
  c.comms.resize(parents.size());
  c.status.resize(parents.size());
  std::vector<std::thread> ts;
  for (const auto& [rank, members] : calls) {
    ts.emplace_back([&, rank = rank, members = members] {
      auto b = createChild(*parents[rank], members, childId, {});
      c.status[rank] = b.status();
      if (b.isOk()) c.comms[rank] = b.take();
    });
  }
  for (auto& t : ts) t.join();
  return c;
}

TEST(BootstrapChild, DisjointChildrenWithForeignLeaders) {
  auto m = makeComm(5);
  // Two children made at once: {3, 1} (led by parent rank 3) and {0, 2, 4}.
  std::vector<int> a{3, 1}, b{0, 2, 4};
  auto c = makeChildren(m.comms, {{3, a}, {1, a}, {0, b}, {2, b}, {4, b}}, 42);
  for (int r = 0; r < 5; ++r) ASSERT_TRUE(c.status[r].isOk()) << "parent rank " << r << ": " << c.status[r].message();
  EXPECT_EQ(c.comms[3]->rank(), 0);
  EXPECT_EQ(c.comms[1]->rank(), 1);
  EXPECT_EQ(c.comms[1]->nranks(), 2);
  EXPECT_EQ(c.comms[4]->rank(), 2);
  EXPECT_EQ(c.comms[0]->nranks(), 3);
  EXPECT_NE(c.comms[3]->commHash(), c.comms[0]->commHash());
  EXPECT_NE(c.comms[0]->commHash(), m.comms[0]->commHash());
  // The children work: allGather in each, a data connection in one.
  std::vector<std::thread> ts;
  std::atomic<int> failures{0};
  for (int r = 0; r < 5; ++r)
    ts.emplace_back([&, r] {
      std::vector<std::string> all;
      if (!c.comms[r]->allGather(std::to_string(r), &all).isOk()) ++failures;
      else if (all.size() != static_cast<size_t>(c.comms[r]->nranks())) ++failures;
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(failures.load(), 0);
  std::thread acc([&] {
    auto fd = c.comms[1]->acceptFrom(0, 5, Deadline::afterMs(3000));
    EXPECT_TRUE(fd.isOk()) << fd.status().message();
    if (fd.isOk()) ::close(fd.value());
  });
  auto fd = c.comms[3]->connectTo(1, 5, Deadline::afterMs(3000));
  EXPECT_TRUE(fd.isOk()) << fd.status().message();
  if (fd.isOk()) ::close(fd.value());
  acc.join();
}

TEST(BootstrapChild, SurvivorsShrinkAroundADeadRankAndADeadLeader) {
  auto m = makeComm(4);
  m.comms[3]->abandon();  // rank 3 "crashes"
  ASSERT_TRUE(eventually([&] { return m.comms[0]->failedRanks() == std::vector<int>{3}; }));
  std::vector<int> survivors{0, 1, 2};
  auto c = makeChildren(m.comms, {{0, survivors}, {1, survivors}, {2, survivors}}, 7);
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(c.status[r].isOk()) << c.status[r].message();
  EXPECT_EQ(c.comms[2]->rank(), 2);
  EXPECT_EQ(c.comms[2]->nranks(), 3);

  // Now the parent's leader dies too: the next child is led by parent rank 1.
  m.comms[0]->abandon();
  // In the order rank 1 learnt of them: 3 first (relayed by the leader), then the leader itself.
  ASSERT_TRUE(eventually([&] { return m.comms[1]->failedRanks() == std::vector<int>{3, 0}; }));
  std::vector<int> rest{1, 2};
  auto d = makeChildren(m.comms, {{1, rest}, {2, rest}}, 8);
  for (int r : {1, 2}) ASSERT_TRUE(d.status[r].isOk()) << d.status[r].message();
  EXPECT_EQ(d.comms[1]->rank(), 0);
  EXPECT_EQ(d.comms[2]->nranks(), 2);
}

TEST(BootstrapChild, MembersThatDisagreeAreRejected) {
  auto m = makeComm(3);
  auto c = makeChildren(m.comms, {{0, {0, 1}}, {1, {0, 1, 2}}}, 9);
  EXPECT_FALSE(c.status[0].isOk());
  EXPECT_FALSE(c.status[1].isOk());
  EXPECT_NE(c.status[0].message().find("different view"), std::string::npos) << c.status[0].message();
  // Not a member of its own list, repeated or out-of-range members: argument errors at once.
  EXPECT_EQ(createChild(*m.comms[2], {0, 1}, 1, {}).status().code(), ncclInvalidArgument);
  EXPECT_EQ(createChild(*m.comms[0], {0, 0}, 1, {}).status().code(), ncclInvalidArgument);
  EXPECT_EQ(createChild(*m.comms[0], {0, 5}, 1, {}).status().code(), ncclInvalidArgument);
  // A child of one is immediate.
  auto solo = createChild(*m.comms[2], {2}, 1, {});
  ASSERT_TRUE(solo.isOk());
  EXPECT_EQ(solo.value()->nranks(), 1);
}

TEST(BootstrapChild, AMemberThatNeverComesIsNamed) {
  ScopedEnv timeout("THESEUS_BOOTSTRAP_TIMEOUT_MS", "500");
  auto m = makeComm(3);
  auto t0 = Clock::now();
  auto c = makeChildren(m.comms, {{0, {0, 1, 2}}, {1, {0, 1, 2}}}, 11);  // parent rank 2 never calls
  double took = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_LT(took, 5.0);
  for (int r : {0, 1}) {
    EXPECT_EQ(c.status[r].code(), ncclTimeout) << c.status[r].message();
    EXPECT_NE(c.status[r].message().find("rank 2 (parent rank 2) of 3 never joined"), std::string::npos)
        << c.status[r].message();
  }
}

TEST(BootstrapChild, AbortOfTheParentOrChildEndsTheWait) {
  auto m = makeComm(2);
  AbortFlag abort;
  InitOptions o;
  o.abort = &abort;
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    abort.set();
  });
  auto t0 = Clock::now();
  auto c = createChild(*m.comms[1], {0, 1}, 3, o);  // the leader (parent rank 0) never calls
  aborter.join();
  EXPECT_EQ(c.status().code(), ncclInvalidUsage) << c.status().message();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 3.0);
}

}  // namespace
}  // namespace theseus::bootstrap
