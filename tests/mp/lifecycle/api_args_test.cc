// Argument checks of the lifecycle entry points: NCCL's result classes and a
// ncclGetLastError() text that says what was wrong. Nothing is created.
#include <string>

#include <gtest/gtest.h>

#include "lifecycle_util.h"
#include "mp_test.h"
#include "test_timing.h"

using namespace lifecycle_test;

namespace {

std::string lastError() { return ncclGetLastError(nullptr); }

TEST(ApiArgs, InitRejectsBadArguments) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  EXPECT_EQ(ncclGetUniqueId(nullptr), ncclInvalidArgument);
  ncclComm_t comm;
  EXPECT_EQ(ncclCommInitRank(nullptr, 2, id, 0), ncclInvalidArgument);
  EXPECT_NE(lastError().find("newcomm is NULL"), std::string::npos) << lastError();
  EXPECT_EQ(ncclCommInitRank(&comm, 0, id, 0), ncclInvalidArgument);
  EXPECT_NE(lastError().find("nranks 0"), std::string::npos) << lastError();
  EXPECT_EQ(ncclCommInitRank(&comm, 2, id, 2), ncclInvalidArgument);
  EXPECT_NE(lastError().find("rank 2 is out of range [0, 2)"), std::string::npos) << lastError();
  EXPECT_EQ(ncclCommInitRank(&comm, 2, id, -1), ncclInvalidArgument);
  ncclUniqueId garbage{};
  EXPECT_EQ(ncclCommInitRank(&comm, 2, garbage, 0), ncclInvalidArgument);
  EXPECT_NE(lastError().find("unique id is not valid"), std::string::npos) << lastError();
  ncclUniqueId ids[2] = {id, id};
  EXPECT_EQ(ncclCommInitRankScalable(&comm, 2, 0, 0, ids, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitRankScalable(&comm, 2, 0, 3, ids, nullptr), ncclInvalidArgument);
  EXPECT_NE(lastError().find("nId 3 is out of range [1, 2]"), std::string::npos) << lastError();
  EXPECT_EQ(ncclCommInitRankScalable(&comm, 2, 0, 1, nullptr, nullptr), ncclInvalidArgument);
  {
    ScopedEnv env("NCCL_COMM_ID", "127.0.0.1:" + std::to_string(freeLoopbackPort()));
    ncclUniqueId envIds[2];
    ASSERT_EQ(ncclGetUniqueId(&envIds[0]), ncclSuccess);
    envIds[1] = envIds[0];
    EXPECT_EQ(ncclCommInitRankScalable(&comm, 2, 0, 2, envIds, nullptr), ncclInvalidUsage);
    EXPECT_NE(lastError().find("allows a single root"), std::string::npos) << lastError();
  }
  // After all that the id still works.
  ASSERT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

TEST(ApiArgs, QueriesRejectNullAndDeadHandles) {
  int v;
  ncclResult_t r;
  EXPECT_EQ(ncclCommCount(nullptr, &v), ncclInvalidArgument);
  EXPECT_EQ(ncclCommUserRank(nullptr, &v), ncclInvalidArgument);
  EXPECT_EQ(ncclCommCuDevice(nullptr, &v), ncclInvalidArgument);
  EXPECT_EQ(ncclCommGetAsyncError(nullptr, &r), ncclInvalidArgument);
  EXPECT_EQ(ncclCommFinalize(nullptr), ncclSuccess);  // as NCCL
  EXPECT_EQ(ncclCommRevoke(nullptr, 0), ncclInvalidArgument);
  ncclComm_t child;
  EXPECT_EQ(ncclCommSplit(nullptr, 0, 0, &child, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommShrink(nullptr, nullptr, 0, &child, nullptr, 0), ncclInvalidArgument);
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm;
  ASSERT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  EXPECT_EQ(ncclCommCount(comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommUserRank(comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommCuDevice(comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommGetAsyncError(comm, nullptr), ncclInvalidArgument);
  ASSERT_EQ(ncclCommDestroy(comm), ncclSuccess);
  EXPECT_EQ(ncclCommGetAsyncError(comm, &r), ncclInvalidArgument);
  EXPECT_NE(lastError().find("not a valid communicator"), std::string::npos) << lastError();
}

TEST(ApiArgs, GroupRules) {
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  sim.magic = 0;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclGroupSimulateEnd(&sim), ncclInvalidArgument);
  EXPECT_EQ(ncclGroupSimulateEnd(nullptr), ncclInvalidArgument);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);

  // A blocking and a non-blocking init in one group: refused, and both handles report it.
  ncclUniqueId a, b;
  ASSERT_EQ(ncclGetUniqueId(&a), ncclSuccess);
  ASSERT_EQ(ncclGetUniqueId(&b), ncclSuccess);
  ncclComm_t blocking, nonBlocking;
  ncclConfig_t nb = nonBlockingConfig();
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclCommInitRank(&blocking, 1, a, 0), ncclSuccess);
  ASSERT_EQ(ncclCommInitRankConfig(&nonBlocking, 1, b, 0, &nb), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  EXPECT_NE(lastError().find("mix blocking and non-blocking"), std::string::npos) << lastError();
  for (ncclComm_t c : {blocking, nonBlocking}) {
    ncclResult_t r;
    ASSERT_EQ(ncclCommGetAsyncError(c, &r), ncclSuccess);
    EXPECT_EQ(r, ncclInvalidUsage);
    EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
  }
}

TEST(ApiArgs, AsyncErrorIsCheapAndThreadSafe) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comms[3];
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(ncclCommInitRank(&comms[i], 3, id, i), ncclSuccess);
  // Hammer GetAsyncError from other threads while the group initialises the communicators.
  std::atomic<bool> stop{false};
  std::atomic<long> polls{0};
  std::vector<std::thread> pollers;
  for (int t = 0; t < 2; ++t)
    pollers.emplace_back([&] {
      while (!stop.load())
        for (auto c : comms) {
          ncclResult_t r;
          if (ncclCommGetAsyncError(c, &r) == ncclSuccess && (r == ncclInProgress || r == ncclSuccess)) ++polls;
        }
    });
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess);
  stop = true;
  for (auto& t : pollers) t.join();
  EXPECT_GT(polls.load(), 0);
  auto start = std::chrono::steady_clock::now();
  ncclResult_t r;
  for (int i = 0; i < 1000000; ++i) ncclCommGetAsyncError(comms[0], &r);
  EXPECT_LT(secondsSince(start), 1.0 * theseus::test::kTimeScale) << "a million polls take well under a second";
  for (auto c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

}  // namespace
