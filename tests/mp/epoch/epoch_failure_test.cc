// The epoch protocol when things go wrong, with real rank processes and swaps
// in progress all the time (THESEUS_EPOCH_TEST_SWAP_EVERY): a rank that dies
// (the leader included), a rank that aborts while the others wait for it, an
// abort from another thread while a collective waits at the lease, destroy
// right after a burst of swaps, and configuration errors that must fail
// creation on every rank with a clear message. Nothing may hang: every rank
// reports how long it took to see the error and the test bounds it.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "mp_test.h"

using theseus::test::runRanks;
using theseus::test::SpawnOptions;

namespace {

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

SpawnOptions swapping(int every = 3) {
  SpawnOptions o;
  o.timeoutSec = 120;
  o.env["THESEUS_EPOCH_TEST_SWAP_EVERY"] = std::to_string(every);
  o.env["THESEUS_EPOCH_WAIT_TIMEOUT_MS"] = "60000";
  o.env["THESEUS_STALL_TIMEOUT_MS"] = "60000";
  return o;
}

// Runs allreduces until one fails; returns the seconds from `since` (or -1 if none failed).
double allreduceUntilError(ncclComm_t comm, int limit, std::chrono::steady_clock::time_point* since) {
  std::vector<float> buf(4096, 1.f);
  for (int i = 0; i < limit; ++i) {
    ncclResult_t r = ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm, nullptr);
    if (r != ncclSuccess) return secondsSince(*since);
  }
  return -1;
}

// args: victim rank, collectives before it dies.
THESEUS_RANK_FN(rank_dies_body) {
  const int victim = std::stoi(ctx.args.at(0));
  const int before = std::stoi(ctx.args.at(1));
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  std::vector<float> buf(4096, 1.f);
  for (int i = 0; i < before; ++i)
    RANK_NCCL(ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm, nullptr));
  if (ctx.rank == victim) _exit(0);  // no destroy, no goodbye: the peers see a failure
  auto t0 = std::chrono::steady_clock::now();
  double s = allreduceUntilError(comm, 1000000, &t0);
  RANK_CHECK(s >= 0);
  fprintf(stderr, "[rank %d] saw the failure of rank %d after %.2f s: %s\n", ctx.rank, victim, s,
          ncclGetLastError(comm));
  RANK_CHECK(s < 30);
  RANK_NCCL(ncclCommAbort(comm));
  return 0;
}

TEST(EpochFailure, ARankDiesWhileTablesAreSwapped) {
  EXPECT_RANKS_OK(runRanks("rank_dies_body", 4, [] {
    auto o = swapping();
    o.args = {"2", "200"};
    return o;
  }()));
}

TEST(EpochFailure, TheLeaderDiesWhileTablesAreSwapped) {
  EXPECT_RANKS_OK(runRanks("rank_dies_body", 4, [] {
    auto o = swapping();
    o.args = {"0", "150"};
    return o;
  }()));
}

// Rank 1 stops taking part and aborts after a while; the others are waiting for it
// (at the lease or inside a collective) and must get an error, not hang.
THESEUS_RANK_FN(peer_aborts_body) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  std::vector<float> buf(1024, 1.f);
  for (int i = 0; i < 100; ++i)
    RANK_NCCL(ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm, nullptr));
  if (ctx.rank == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    RANK_NCCL(ncclCommAbort(comm));
    return 0;
  }
  auto t0 = std::chrono::steady_clock::now();
  double s = allreduceUntilError(comm, 1000000, &t0);
  RANK_CHECK(s >= 0);
  RANK_CHECK(s < 30);
  RANK_NCCL(ncclCommAbort(comm));
  return 0;
}

TEST(EpochFailure, APeerAbortsWhileOthersWaitForIt) {
  EXPECT_RANKS_OK(runRanks("peer_aborts_body", 3, swapping()));
}

// The main thread is blocked (rank 2 is late by seconds, so the others wait at
// the lease or in the collective); another thread aborts: the blocked call must
// return at once with an error.
THESEUS_RANK_FN(abort_while_waiting_body) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  std::vector<float> buf(1024, 1.f);
  for (int i = 0; i < 50; ++i)
    RANK_NCCL(ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm, nullptr));
  if (ctx.rank == 2) {
    std::this_thread::sleep_for(std::chrono::seconds(4));
    auto t0 = std::chrono::steady_clock::now();
    double s = allreduceUntilError(comm, 1000000, &t0);  // the others aborted meanwhile
    RANK_CHECK(s >= 0 && s < 30);
    RANK_NCCL(ncclCommAbort(comm));
    return 0;
  }
  std::atomic<bool> aborted{false};
  std::chrono::steady_clock::time_point abortAt;
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    abortAt = std::chrono::steady_clock::now();
    aborted.store(true);
    (void)ncclCommAbort(comm);
  });
  ncclResult_t r = ncclSuccess;
  for (int i = 0; i < 1000000 && r == ncclSuccess && !aborted.load(); ++i)
    r = ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm, nullptr);
  auto returned = std::chrono::steady_clock::now();
  killer.join();
  RANK_CHECK(aborted.load());
  double late = std::chrono::duration<double>(returned - abortAt).count();
  fprintf(stderr, "[rank %d] the blocked collective returned %.3f s after the abort\n", ctx.rank, late);
  RANK_CHECK(late < 1);
  return 0;
}

TEST(EpochFailure, AbortFromAnotherThreadEndsAWaitAtTheLease) {
  EXPECT_RANKS_OK(runRanks("abort_while_waiting_body", 3, swapping(4)));
}

// The same on a loaded machine (two threads spinning on this machine's cores): the waiting
// ranks yield their core at each idle pass, and a yield may give it away for a whole time slice,
// so the abort must be seen by time, not after a count of passes (it took 1-3 s before).
TEST(EpochFailure, AbortFromAnotherThreadEndsAWaitOnALoadedMachine) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> hogs;
  for (int i = 0; i < 2; ++i)
    hogs.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  auto r = runRanks("abort_while_waiting_body", 3, swapping(4));
  stop = true;
  for (auto& t : hogs) t.join();
  EXPECT_RANKS_OK(r);
}

// Destroy right after a burst of swaps (one may be half prepared): no hang.
// Split children too, destroyed while their parent keeps swapping.
THESEUS_RANK_FN(destroy_during_swaps_body) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  std::vector<float> buf(256, 1.f);
  for (int i = 0; i < 300; ++i)
    RANK_NCCL(ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm, nullptr));
  for (int child = 0; child < 3; ++child) {
    ncclComm_t c;
    RANK_NCCL(ncclCommSplit(comm, 0, ctx.rank, &c, nullptr));
    for (int i = 0; i < 50 + 37 * child; ++i)
      RANK_NCCL(ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, c, nullptr));
    RANK_NCCL(ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm, nullptr));
    auto t0 = std::chrono::steady_clock::now();
    RANK_NCCL(ncclCommDestroy(c));
    RANK_CHECK(secondsSince(t0) < 10);
  }
  auto t0 = std::chrono::steady_clock::now();
  RANK_NCCL(ncclCommDestroy(comm));
  double s = secondsSince(t0);
  fprintf(stderr, "[rank %d] destroy took %.3f s\n", ctx.rank, s);
  RANK_CHECK(s < 10);
  return 0;
}

TEST(EpochFailure, DestroyDuringSwapsDoesNotHang) {
  EXPECT_RANKS_OK(runRanks("destroy_during_swaps_body", 4, swapping(2)));
}

// Configuration errors: every rank's init fails with the same clear message.
// args: the variable, its value ("@odd=<value>" sets it on odd ranks only), expected text.
THESEUS_RANK_FN(bad_config_body) {
  const std::string var = ctx.args.at(0), value = ctx.args.at(1), expect = ctx.args.at(2);
  if (value.rfind("@odd=", 0) == 0) {
    if (ctx.rank % 2 == 1) setenv(var.c_str(), value.substr(5).c_str(), 1);
  } else {
    setenv(var.c_str(), value.c_str(), 1);
  }
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank);
  RANK_CHECK(r != ncclSuccess);
  std::string why = ncclGetLastError(nullptr);
  if (why.find(expect) == std::string::npos) {
    fprintf(stderr, "[rank %d] expected '%s' in: %s\n", ctx.rank, expect.c_str(), why.c_str());
    return 1;
  }
  if (comm != nullptr) (void)ncclCommDestroy(comm);
  return 0;
}

TEST(EpochFailure, MalformedEmulationFailsInitOnEveryRank) {
  SpawnOptions o;
  o.timeoutSec = 60;
  o.args = {"THESEUS_EMULATE", "throttle:0->1:10", "THESEUS_EMULATE rule 1 'throttle:0->1:10': '10' is not a rate"};
  EXPECT_RANKS_OK(runRanks("bad_config_body", 3, o));
}

TEST(EpochFailure, APolicyThatDoesNotLoadFailsInitOnEveryRank) {
  SpawnOptions o;
  o.timeoutSec = 60;
  o.args = {"THESEUS_POLICY", "/nonexistent/policy.json", "THESEUS_POLICY=/nonexistent/policy.json"};
  EXPECT_RANKS_OK(runRanks("bad_config_body", 3, o));
}

TEST(EpochFailure, EpochModeMustBeEqualOnAllRanks) {
  SpawnOptions o;
  o.timeoutSec = 60;
  o.args = {"THESEUS_EPOCH", "@odd=0", "it must be equal on all ranks"};
  EXPECT_RANKS_OK(runRanks("bad_config_body", 3, o));
}

}  // namespace
