// NCCL 2.29's ncclCommGetUniqueId + ncclCommGrow and ncclCommSuspend /
// ncclCommResume / ncclCommMemStats, with real rank processes.
//
// Grow: all ranks start in one communicator ("world"); the first `old` ranks
// split off the communicator to grow, its rank 0 gets the grow id and
// broadcasts it over world (a real collective), then the old ranks and the
// joining ranks call ncclCommGrow together and run an allreduce on the result.
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "lifecycle_util.h"
#include "mp_test.h"

using namespace lifecycle_test;
using theseus::test::runRanks;

namespace {

// Sums `rank` over `comm` (host memory, so the call has completed when it returns).
bool allReduceRanks(ncclComm_t comm, int rank, int nranks) {
  std::vector<int> buf(1024, rank);
  if (ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclInt32, ncclSum, comm, nullptr) != ncclSuccess) return false;
  const int expect = nranks * (nranks - 1) / 2;
  for (int v : buf)
    if (v != expect) return false;
  return true;
}

}  // namespace

// args[0]: ranks of the communicator that grows (the others join it).
THESEUS_RANK_FN(grow_world) {
  const int old = std::stoi(ctx.args.at(0));
  ncclComm_t world;
  RANK_NCCL(ncclCommInitRank(&world, ctx.nranks, ctx.id, ctx.rank));
  const bool existing = ctx.rank < old;
  ncclComm_t parent = nullptr;
  RANK_NCCL(ncclCommSplit(world, existing ? 0 : NCCL_SPLIT_NOCOLOR, ctx.rank, &parent, nullptr));
  RANK_CHECK(existing == (parent != nullptr));

  ncclUniqueId id{};
  if (ctx.rank == 0) {
    RANK_NCCL(ncclCommGetUniqueId(parent, &id));
    // One pending id per communicator.
    ncclUniqueId second;
    RANK_CHECK(ncclCommGetUniqueId(parent, &second) == ncclInvalidUsage);
    RANK_CHECK(strstr(ncclGetLastError(nullptr), "not been used yet") != nullptr);
  }
  RANK_NCCL(ncclBroadcast(&id, &id, sizeof(id), ncclUint8, 0, world, nullptr));

  ncclComm_t grown = nullptr;
  if (existing) {
    RANK_NCCL(ncclCommGrow(parent, ctx.nranks, ctx.rank == 0 ? &id : nullptr, -1, &grown, nullptr));
  } else {
    RANK_NCCL(ncclCommGrow(nullptr, ctx.nranks, &id, ctx.rank, &grown, nullptr));
  }
  int count = 0, rank = -1;
  RANK_NCCL(ncclCommCount(grown, &count));
  RANK_NCCL(ncclCommUserRank(grown, &rank));
  RANK_CHECK(count == ctx.nranks);
  RANK_CHECK(rank == ctx.rank);  // existing ranks keep their numbers, new ones take theirs
  RANK_CHECK(allReduceRanks(grown, rank, count));
  if (existing) {
    RANK_CHECK(allReduceRanks(parent, ctx.rank, old));  // the parent still works
    // The id was used: growing with it again is refused on the coordinator, and
    // then no rank passes a valid id, which every rank reports alike.
    ncclComm_t again = nullptr;
    RANK_CHECK(ncclCommGrow(parent, ctx.nranks, ctx.rank == 0 ? &id : nullptr, -1, &again, nullptr) ==
               ncclInvalidArgument);
    RANK_CHECK(strstr(ncclGetLastError(nullptr), "not issued by ncclCommGetUniqueId") != nullptr);
    if (again != nullptr) ncclCommDestroy(again);
    RANK_NCCL(ncclCommDestroy(parent));
  }
  RANK_NCCL(ncclCommDestroy(grown));
  RANK_NCCL(ncclCommDestroy(world));
  return 0;
}

TEST(Grow, TwoRanksGrowToFour) {
  theseus::test::SpawnOptions o;
  o.args = {"2"};
  auto r = runRanks("grow_world", 4, o);
  EXPECT_TRUE(r.allOk()) << r.describe();
}

TEST(Grow, OneRankGrowsToThree) {
  theseus::test::SpawnOptions o;
  o.args = {"1"};
  auto r = runRanks("grow_world", 3, o);
  EXPECT_TRUE(r.allOk()) << r.describe();
}

// Argument and usage errors of ncclCommGrow that need no joining rank.
THESEUS_RANK_FN(grow_errors) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  ncclComm_t out = reinterpret_cast<ncclComm_t>(0x1);
  ncclUniqueId id{};
  RANK_CHECK(ncclCommGrow(comm, ctx.nranks + 1, nullptr, 0, &out, nullptr) == ncclInvalidArgument);  // rank != -1
  RANK_CHECK(out == nullptr);
  RANK_CHECK(ncclCommGrow(comm, ctx.nranks, nullptr, -1, &out, nullptr) == ncclInvalidArgument);  // not larger
  RANK_CHECK(ncclCommGrow(nullptr, 4, nullptr, 3, &out, nullptr) == ncclInvalidArgument);  // new rank without id
  RANK_CHECK(ncclCommGrow(nullptr, 4, &id, 4, &out, nullptr) == ncclInvalidArgument);     // rank out of range
  RANK_CHECK(ncclCommGrow(comm, ctx.nranks + 1, nullptr, -1, nullptr, nullptr) == ncclInvalidArgument);
  RANK_CHECK(ncclCommGetUniqueId(comm, nullptr) == ncclInvalidArgument);
  // Every rank passes an id (none issued by this communicator): all fail alike, nobody waits.
  ncclUniqueId mine;
  RANK_NCCL(ncclGetUniqueId(&mine));
  ncclComm_t grown = nullptr;
  RANK_CHECK(ncclCommGrow(comm, ctx.nranks + 1, &mine, -1, &grown, nullptr) == ncclInvalidUsage);
  RANK_CHECK(strstr(ncclGetLastError(nullptr), "both passed an id") != nullptr);
  if (grown != nullptr) {
    ncclResult_t async = ncclSuccess;
    RANK_NCCL(ncclCommGetAsyncError(grown, &async));
    RANK_CHECK(async == ncclInvalidUsage);
    RANK_NCCL(ncclCommDestroy(grown));
  }
  RANK_CHECK(allReduceRanks(comm, ctx.rank, ctx.nranks));  // nothing was disturbed
  RANK_NCCL(ncclCommDestroy(comm));
  return 0;
}

TEST(Grow, ErrorsAreClearAndConsistent) {
  auto r = runRanks("grow_errors", 2);
  EXPECT_TRUE(r.allOk()) << r.describe();
}

// Suspend releases the executor scratch, refuses work until resume, and resume
// allocates it again; MemStats follows every step.
THESEUS_RANK_FN(suspend_resume) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  auto stat = [&](ncclCommMemStat_t s) {
    uint64_t v = ~0ull;
    return ncclCommMemStats(comm, s, &v) == ncclSuccess ? v : ~0ull;
  };
  RANK_CHECK(allReduceRanks(comm, ctx.rank, ctx.nranks));
  const uint64_t releasable = stat(ncclStatGpuMemSuspend);
  const uint64_t persist = stat(ncclStatGpuMemPersist);
  RANK_CHECK(releasable > 0);  // the allreduce used scratch
  RANK_CHECK(stat(ncclStatGpuMemTotal) == releasable + persist);
  RANK_CHECK(stat(ncclStatGpuMemSuspended) == 0);
  RANK_CHECK(persist > 0);  // shared-memory FIFOs with the local peers

  RANK_NCCL(ncclCommSuspend(comm, NCCL_SUSPEND_MEM));
  RANK_CHECK(stat(ncclStatGpuMemSuspended) == 1);
  RANK_CHECK(stat(ncclStatGpuMemSuspend) == 0);
  RANK_CHECK(stat(ncclStatGpuMemPersist) == persist);
  int x = 1;
  RANK_CHECK(ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, comm, nullptr) == ncclInvalidUsage);
  RANK_CHECK(strstr(ncclGetLastError(nullptr), "suspended") != nullptr);
  RANK_CHECK(ncclCommSuspend(comm, NCCL_SUSPEND_MEM) == ncclInvalidUsage);  // already

  RANK_NCCL(ncclCommResume(comm));
  RANK_CHECK(stat(ncclStatGpuMemSuspended) == 0);
  RANK_CHECK(stat(ncclStatGpuMemSuspend) == releasable);  // allocated again
  RANK_CHECK(allReduceRanks(comm, ctx.rank, ctx.nranks));
  RANK_CHECK(ncclCommResume(comm) == ncclInvalidUsage);  // not suspended

  // Suspend without NCCL_SUSPEND_MEM keeps the memory.
  RANK_NCCL(ncclCommSuspend(comm, 0));
  RANK_CHECK(stat(ncclStatGpuMemSuspend) == releasable);
  RANK_NCCL(ncclCommResume(comm));

  uint64_t v;
  RANK_CHECK(ncclCommMemStats(comm, static_cast<ncclCommMemStat_t>(7), &v) == ncclInvalidArgument);
  RANK_CHECK(ncclCommMemStats(comm, ncclStatGpuMemTotal, nullptr) == ncclInvalidArgument);
  RANK_CHECK(ncclCommSuspend(comm, 0x4) == ncclInvalidArgument);
  RANK_NCCL(ncclCommDestroy(comm));
  return 0;
}

// With a non-blocking config suspend and resume may return ncclInProgress; the async error says when done.
THESEUS_RANK_FN(suspend_nonblocking) {
  ncclConfig_t config = nonBlockingConfig();
  ncclComm_t comm;
  ncclResult_t r = ncclCommInitRankConfig(&comm, ctx.nranks, ctx.id, ctx.rank, &config);
  RANK_CHECK(r == ncclSuccess || r == ncclInProgress);
  RANK_CHECK(waitAsync(comm) == ncclSuccess);
  RANK_CHECK(allReduceRanks(comm, ctx.rank, ctx.nranks));
  r = ncclCommSuspend(comm, NCCL_SUSPEND_MEM);
  RANK_CHECK(r == ncclSuccess || r == ncclInProgress);
  RANK_CHECK(waitAsync(comm) == ncclSuccess);
  uint64_t suspended = 0;
  RANK_NCCL(ncclCommMemStats(comm, ncclStatGpuMemSuspended, &suspended));
  RANK_CHECK(suspended == 1);
  r = ncclCommResume(comm);
  RANK_CHECK(r == ncclSuccess || r == ncclInProgress);
  RANK_CHECK(waitAsync(comm) == ncclSuccess);
  RANK_CHECK(allReduceRanks(comm, ctx.rank, ctx.nranks));
  RANK_NCCL(ncclCommDestroy(comm));
  return 0;
}

TEST(Suspend, NonBlocking) {
  auto r = runRanks("suspend_nonblocking", 2);
  EXPECT_TRUE(r.allOk()) << r.describe();
}

TEST(Suspend, ReleasesAndRestoresScratch) {
  auto r = runRanks("suspend_resume", 3);
  EXPECT_TRUE(r.allOk()) << r.describe();
}

// A grouped suspend runs at ncclGroupEnd, like NCCL's.
THESEUS_RANK_FN(suspend_in_group) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  RANK_CHECK(allReduceRanks(comm, ctx.rank, ctx.nranks));
  uint64_t suspended = 7;
  RANK_NCCL(ncclGroupStart());
  RANK_NCCL(ncclCommSuspend(comm, NCCL_SUSPEND_MEM));
  RANK_NCCL(ncclCommMemStats(comm, ncclStatGpuMemSuspended, &suspended));
  RANK_CHECK(suspended == 0);  // not yet: deferred to the group's end
  RANK_NCCL(ncclGroupEnd());
  RANK_NCCL(ncclCommMemStats(comm, ncclStatGpuMemSuspended, &suspended));
  RANK_CHECK(suspended == 1);
  RANK_NCCL(ncclCommResume(comm));
  RANK_CHECK(allReduceRanks(comm, ctx.rank, ctx.nranks));
  RANK_NCCL(ncclCommDestroy(comm));
  return 0;
}

TEST(Suspend, InAGroupRunsAtGroupEnd) {
  auto r = runRanks("suspend_in_group", 2);
  EXPECT_TRUE(r.allOk()) << r.describe();
}

// NCCL_DISABLE_MEM_MANAGER=1 turns suspend and resume off, as in NCCL.
THESEUS_RANK_FN(suspend_disabled) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  RANK_CHECK(ncclCommSuspend(comm, NCCL_SUSPEND_MEM) == ncclInvalidUsage);
  RANK_CHECK(strstr(ncclGetLastError(nullptr), "NCCL_DISABLE_MEM_MANAGER") != nullptr);
  RANK_CHECK(allReduceRanks(comm, ctx.rank, ctx.nranks));
  RANK_NCCL(ncclCommDestroy(comm));
  return 0;
}

TEST(Suspend, DisabledByTheMemoryManagerKnob) {
  theseus::test::SpawnOptions o;
  o.env.emplace("NCCL_DISABLE_MEM_MANAGER", "1");
  auto r = runRanks("suspend_disabled", 2, o);
  EXPECT_TRUE(r.allOk()) << r.describe();
}
