// ncclCommSplit (colours, NOCOLOR, key order, nested splits) and
// ncclCommShrink (an excluded rank alive or killed, NCCL_SHRINK_ABORT, after
// a revoke), with real rank processes.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include <gtest/gtest.h>

#include "lifecycle_util.h"
#include "mp_test.h"

using namespace lifecycle_test;
using theseus::test::runRanks;
using theseus::test::SpawnOptions;

namespace {
int colorOf(int rank, int n) { return rank == n - 1 ? NCCL_SPLIT_NOCOLOR : rank % 3; }
int keyOf(int rank) { return (rank * 5) % 7; }  // scrambles the order within a colour
}  // namespace

THESEUS_RANK_FN(split_colours) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  const int color = colorOf(ctx.rank, ctx.nranks);
  ncclComm_t child = reinterpret_cast<ncclComm_t>(0x1);
  RANK_NCCL(ncclCommSplit(comm, color, keyOf(ctx.rank), &child, nullptr));
  if (color == NCCL_SPLIT_NOCOLOR) {
    RANK_CHECK(child == nullptr);
  } else {
    // Expected: ranks of my colour ordered by (key, parent rank).
    std::vector<std::pair<int, int>> same;
    for (int r = 0; r < ctx.nranks; ++r)
      if (colorOf(r, ctx.nranks) == color) same.emplace_back(keyOf(r), r);
    std::sort(same.begin(), same.end());
    int expectRank = -1;
    for (size_t i = 0; i < same.size(); ++i)
      if (same[i].second == ctx.rank) expectRank = static_cast<int>(i);
    int count, rank;
    RANK_NCCL(ncclCommCount(child, &count));
    RANK_NCCL(ncclCommUserRank(child, &rank));
    RANK_CHECK(count == static_cast<int>(same.size()));
    RANK_CHECK(rank == expectRank);
    // Split the child again: everyone in one colour, reversed order.
    ncclComm_t grandchild;
    RANK_NCCL(ncclCommSplit(child, 0, -rank, &grandchild, nullptr));
    int grank;
    RANK_NCCL(ncclCommUserRank(grandchild, &grank));
    RANK_CHECK(grank == count - 1 - rank);
    RANK_NCCL(ncclCommDestroy(grandchild));
    RANK_NCCL(ncclCommDestroy(child));
  }
  // The parent is still fine after splitting (and may be split again).
  ncclComm_t all;
  RANK_NCCL(ncclCommSplit(comm, 7, 0, &all, nullptr));
  int count;
  RANK_NCCL(ncclCommCount(all, &count));
  RANK_CHECK(count == ctx.nranks);
  RANK_NCCL(ncclCommDestroy(all));
  RANK_NCCL(ncclCommDestroy(comm));
  return 0;
}

TEST(Split, ColoursNoColorAndKeyOrder) {
  auto r = runRanks("split_colours", 7);
  EXPECT_TRUE(r.allOk()) << r.describe();
}

// Ranks listed in args are excluded; excluded ranks destroy the parent instead (they are alive).
THESEUS_RANK_FN(shrink_alive) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  std::vector<int> excluded;
  for (auto& a : ctx.args) excluded.push_back(std::stoi(a));
  if (std::find(excluded.begin(), excluded.end(), ctx.rank) != excluded.end()) {
    RANK_NCCL(ncclCommDestroy(comm));
    return 0;
  }
  ncclComm_t small;
  RANK_NCCL(ncclCommShrink(comm, excluded.data(), static_cast<int>(excluded.size()), &small, nullptr,
                           NCCL_SHRINK_DEFAULT));
  int count, rank, expect = 0;
  for (int r = 0; r < ctx.rank; ++r)
    if (std::find(excluded.begin(), excluded.end(), r) == excluded.end()) ++expect;
  RANK_NCCL(ncclCommCount(small, &count));
  RANK_NCCL(ncclCommUserRank(small, &rank));
  RANK_CHECK(count == ctx.nranks - static_cast<int>(excluded.size()));
  RANK_CHECK(rank == expect);  // renumbered, contiguous, in parent order
  RANK_NCCL(ncclCommFinalize(small));
  RANK_NCCL(ncclCommDestroy(small));
  RANK_NCCL(ncclCommDestroy(comm));
  return 0;
}

TEST(Shrink, ExcludedRanksStayOut) {
  SpawnOptions o;
  o.args = {"2"};
  auto r = runRanks("shrink_alive", 4, o);
  EXPECT_TRUE(r.allOk()) << r.describe();
  o.args = {"0", "3"};  // the leader excluded too
  r = runRanks("shrink_alive", 5, o);
  EXPECT_TRUE(r.allOk()) << r.describe();
}

// The last rank is killed after init; survivors shrink it away (with NCCL_SHRINK_ABORT) and carry on.
THESEUS_RANK_FN(shrink_killed) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  const int victim = ctx.nranks - 1;
  if (ctx.rank == victim) raise(SIGKILL);
  int excluded[1] = {victim};
  ncclComm_t small;
  RANK_NCCL(ncclCommShrink(comm, excluded, 1, &small, nullptr, NCCL_SHRINK_ABORT));
  int count, rank;
  RANK_NCCL(ncclCommCount(small, &count));
  RANK_NCCL(ncclCommUserRank(small, &rank));
  RANK_CHECK(count == ctx.nranks - 1 && rank == ctx.rank);
  // The survivors' communicator works: split it.
  ncclComm_t half;
  RANK_NCCL(ncclCommSplit(small, rank % 2, rank, &half, nullptr));
  RANK_NCCL(ncclCommDestroy(half));
  RANK_NCCL(ncclCommDestroy(small));
  // The aborted parent refuses operations and can still be destroyed.
  float x = 0;
  RANK_CHECK(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, nullptr) == ncclInvalidUsage);
  RANK_NCCL(ncclCommDestroy(comm));
  return 0;
}

TEST(Shrink, AroundAKilledRank) {
  auto r = runRanks("shrink_killed", 5);
  ASSERT_EQ(r.exitCodes.size(), 5u) << r.describe();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(r.exitCodes[i], 0) << r.describe();
  EXPECT_EQ(r.exitCodes[4], 128 + SIGKILL) << r.describe();
  EXPECT_FALSE(r.timedOut);
}

// Revoke stops the communicator for operations but it can still be shrunk or split.
THESEUS_RANK_FN(revoke_then_shrink) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  RANK_CHECK(ncclCommRevoke(comm, 1) == ncclInvalidArgument);
  RANK_NCCL(ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT));
  float x = 1;
  RANK_CHECK(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, nullptr) == ncclInvalidUsage);
  RANK_CHECK(ncclSend(&x, 1, ncclFloat, 0, comm, nullptr) == ncclInvalidUsage);
  ncclComm_t fresh;
  RANK_NCCL(ncclCommShrink(comm, nullptr, 0, &fresh, nullptr, NCCL_SHRINK_DEFAULT));
  int count;
  RANK_NCCL(ncclCommCount(fresh, &count));
  RANK_CHECK(count == ctx.nranks);
  ncclComm_t split;
  RANK_NCCL(ncclCommSplit(comm, 0, ctx.rank, &split, nullptr));
  RANK_NCCL(ncclCommDestroy(split));
  RANK_NCCL(ncclCommDestroy(fresh));
  RANK_NCCL(ncclCommDestroy(comm));
  return 0;
}

TEST(Revoke, ThenShrinkAndSplit) {
  auto r = runRanks("revoke_then_shrink", 3);
  EXPECT_TRUE(r.allOk()) << r.describe();
}

THESEUS_RANK_FN(shrink_bad_args) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  ncclComm_t out = reinterpret_cast<ncclComm_t>(0x1);
  int self[1] = {ctx.rank};
  RANK_CHECK(ncclCommShrink(comm, self, 1, &out, nullptr, NCCL_SHRINK_DEFAULT) == ncclInvalidArgument);
  RANK_CHECK(out == nullptr);
  int other = (ctx.rank + 1) % ctx.nranks;
  int dup[2] = {other, other};
  RANK_CHECK(ncclCommShrink(comm, dup, 2, &out, nullptr, NCCL_SHRINK_DEFAULT) == ncclInvalidArgument);
  int range[1] = {ctx.nranks};
  RANK_CHECK(ncclCommShrink(comm, range, 1, &out, nullptr, NCCL_SHRINK_DEFAULT) == ncclInvalidArgument);
  RANK_CHECK(ncclCommShrink(comm, nullptr, 1, &out, nullptr, NCCL_SHRINK_DEFAULT) == ncclInvalidArgument);
  RANK_CHECK(ncclCommShrink(comm, &other, 1, &out, nullptr, 5) == ncclInvalidArgument);
  RANK_CHECK(ncclCommShrink(comm, &other, 1, nullptr, nullptr, 0) == ncclInvalidArgument);
  RANK_CHECK(ncclCommSplit(comm, -7, 0, &out, nullptr) == ncclInvalidArgument);
  RANK_CHECK(ncclCommSplit(comm, 0, 0, nullptr, nullptr) == ncclInvalidArgument);
  // None of that touched the communicator: a real split still works.
  ncclComm_t same;
  RANK_NCCL(ncclCommSplit(comm, 1, 0, &same, nullptr));
  RANK_NCCL(ncclCommDestroy(same));
  RANK_NCCL(ncclCommDestroy(comm));
  return 0;
}

TEST(Shrink, BadArgumentsChangeNothing) {
  auto r = runRanks("shrink_bad_args", 2);
  EXPECT_TRUE(r.allOk()) << r.describe();
}
