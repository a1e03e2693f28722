// Failures: a rank that never arrives, ncclCommAbort of a stuck init (from
// another thread; blocking and non-blocking), finalize/destroy misuse, and a
// process that exits without destroying its communicator (atexit goodbye).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <gtest/gtest.h>

#include "lifecycle_util.h"
#include "mp_test.h"
#include "theseus/theseus.h"

using namespace lifecycle_test;
using theseus::test::runRanks;
using theseus::test::SpawnOptions;

// One rank of the communicator is never started: init fails within the timeout, naming it.
// A caller built against NCCL 2.30 (config version >= 2.30.0) sees ncclTimeout; an older
// caller, which does not know that code, sees ncclRemoteError as NCCL 2.28 returned.
THESEUS_RANK_FN(missing_rank) {
  const bool newCaller = !ctx.args.empty() && ctx.args.at(0) == "2.30";
  const ncclResult_t expected = newCaller ? ncclTimeout : ncclRemoteError;
  auto start = std::chrono::steady_clock::now();
  ncclComm_t comm = nullptr;
  ncclResult_t r;
  if (newCaller) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    r = ncclCommInitRankConfig(&comm, ctx.nranks, ctx.id, ctx.rank, &cfg);
  } else {
    r = ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank);
  }
  double took = secondsSince(start);
  RANK_CHECK(r == expected);
  std::string last = ncclGetLastError(nullptr);
  if (last.find("rank 2 of 4 never joined") == std::string::npos) {
    fprintf(stderr, "[rank %d] unexpected error text: %s\n", ctx.rank, last.c_str());
    return 1;
  }
  RANK_CHECK(took < 1.5 + 4.0);
  ncclResult_t async;
  RANK_NCCL(ncclCommGetAsyncError(comm, &async));  // the failed handle stays valid
  RANK_CHECK(async == expected);
  float x = 0;
  RANK_CHECK(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, nullptr) == ncclInvalidUsage);
  RANK_NCCL(ncclCommDestroy(comm));
  return 0;
}

TEST(Failure, ARankThatNeverArrivesIsNamedWithinTheTimeout) {
  ScopedEnv timeout("THESEUS_BOOTSTRAP_TIMEOUT_MS", "1500");  // the root lives in this process
  SpawnOptions o;
  o.env["THESEUS_BOOTSTRAP_TIMEOUT_MS"] = "1500";
  o.onlyRanks = {0, 1, 3};
  for (const char* caller : {"2.28", "2.30"}) {
    o.args = {caller};
    auto r = runRanks("missing_rank", 4, o);
    EXPECT_TRUE(r.allOk()) << caller << ": " << r.describe();
    EXPECT_LT(r.seconds, 20.0);
  }
}

// ncclCommAbort from another thread ends an init stuck waiting for a missing rank
// (rank 0); the root then fails the other rank's init at once (rank 1).
THESEUS_RANK_FN(abort_stuck_init) {
  const bool blocking = ctx.args.at(0) == "blocking";
  auto start = std::chrono::steady_clock::now();
  ncclComm_t comm = nullptr;
  ncclResult_t initResult = ncclSuccess;
  std::thread initThread;
  if (blocking) {
    // The handle is written at once even for a blocking init; another thread reads it from there.
    initThread = std::thread([&] { initResult = ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank); });
    while (__atomic_load_n(&comm, __ATOMIC_ACQUIRE) == nullptr && secondsSince(start) < 10)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  } else {
    ncclConfig_t cfg = nonBlockingConfig();
    initResult = ncclCommInitRankConfig(&comm, ctx.nranks, ctx.id, ctx.rank, &cfg);
  }
  ncclComm_t handle = __atomic_load_n(&comm, __ATOMIC_ACQUIRE);
  bool ok = handle != nullptr;
  if (ctx.rank == 1) {
    // Not aborted here: fails because rank 0 went away, long before the 60 s bootstrap timeout.
    if (initThread.joinable()) initThread.join();
    ncclResult_t async = ok ? waitAsync(handle) : ncclInternalError;
    RANK_CHECK(ok);
    RANK_CHECK(!blocking || initResult == ncclRemoteError);
    RANK_CHECK(async == ncclRemoteError);
    RANK_CHECK(secondsSince(start) < 10.0);
    RANK_NCCL(ncclCommDestroy(handle));
    return 0;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ncclResult_t async = ncclInternalError;
  if (ok) ok = ncclCommGetAsyncError(handle, &async) == ncclSuccess && async == ncclInProgress;
  ncclResult_t aborted = ncclInternalError;
  std::thread aborter([&] { aborted = ncclCommAbort(handle); });
  aborter.join();
  if (initThread.joinable()) initThread.join();
  RANK_CHECK(ok);  // was still waiting for rank 2 when aborted
  RANK_CHECK(aborted == ncclSuccess);
  RANK_CHECK(blocking ? initResult == ncclInvalidUsage : initResult == ncclInProgress);
  RANK_CHECK(secondsSince(start) < 10.0);
  int count;
  RANK_CHECK(ncclCommCount(handle, &count) == ncclInvalidArgument);  // the handle is gone
  return 0;
}

TEST(Failure, AbortFromAnotherThreadUnblocksAStuckInit) {
  for (const char* mode : {"nonblocking", "blocking"}) {
    SpawnOptions o;
    o.onlyRanks = {0, 1};
    o.args = {mode};
    auto r = runRanks("abort_stuck_init", 3, o);
    EXPECT_TRUE(r.allOk()) << mode << ": " << r.describe();
    EXPECT_LT(r.seconds, 30.0);
  }
}

// An operation waiting for a peer that never joins it ends when another thread aborts the communicator.
THESEUS_RANK_FN(abort_stuck_op) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  if (ctx.rank == 1) {  // never takes part; leaves long after rank 0 is done
    std::this_thread::sleep_for(std::chrono::seconds(4));
    RANK_NCCL(ncclCommDestroy(comm));
    return 0;
  }
  std::vector<float> x(1024, 1.0f);
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    if (ncclCommAbort(comm) != ncclSuccess) fprintf(stderr, "[rank 0] ncclCommAbort failed\n");
  });
  auto start = std::chrono::steady_clock::now();
  ncclResult_t r = ncclAllReduce(x.data(), x.data(), x.size(), ncclFloat, ncclSum, comm, nullptr);
  double took = secondsSince(start);
  aborter.join();
  RANK_CHECK(r != ncclSuccess);
  RANK_CHECK(took < 3.0);  // ended by the abort, not by rank 1 leaving at 4 s
  return 0;
}

TEST(Failure, AbortFromAnotherThreadUnblocksAStuckOperation) {
  auto r = runRanks("abort_stuck_op", 2);
  EXPECT_TRUE(r.allOk()) << r.describe();
}

THESEUS_RANK_FN(finalize_destroy_rules) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  RANK_NCCL(ncclCommFinalize(comm));
  RANK_CHECK(ncclCommFinalize(comm) == ncclInvalidArgument);
  RANK_CHECK(std::string(ncclGetLastError(nullptr)).find("already called") != std::string::npos);
  float x = 0;
  RANK_CHECK(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, nullptr) == ncclInvalidUsage);
  RANK_CHECK(ncclCommRevoke(comm, 0) == ncclInvalidUsage);
  RANK_NCCL(ncclCommDestroy(comm));
  RANK_CHECK(ncclCommDestroy(comm) == ncclInvalidArgument);  // double destroy: caught, not a crash
  int n;
  RANK_CHECK(ncclCommCount(comm, &n) == ncclInvalidArgument);
  RANK_NCCL(ncclCommDestroy(nullptr));
  RANK_NCCL(ncclCommAbort(nullptr));
  // Destroy without finalize, and abort of a healthy communicator.
  ncclComm_t a, b;
  ncclUniqueId own;
  RANK_NCCL(ncclGetUniqueId(&own));
  RANK_NCCL(ncclCommInitRank(&a, 1, own, 0));
  RANK_NCCL(ncclCommDestroy(a));
  RANK_NCCL(ncclGetUniqueId(&own));
  RANK_NCCL(ncclCommInitRank(&b, 1, own, 0));
  RANK_NCCL(ncclCommAbort(b));
  return 0;
}

TEST(Failure, FinalizeTwiceDestroyTwiceAndUseAfterDestroy) {
  auto r = runRanks("finalize_destroy_rules", 2);
  EXPECT_TRUE(r.allOk()) << r.describe();
}

// Rank 1 returns from main without destroying; rank 0 must see a clean leave, not a failure.
THESEUS_RANK_FN(exit_without_destroy) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  if (ctx.rank == 1) return 0;  // exit() runs the atexit hook: BYE
  const std::string log = ctx.args.at(0) + "." + std::to_string(getpid());
  auto start = std::chrono::steady_clock::now();
  std::string text;
  while (secondsSince(start) < 10) {
    std::ifstream f(log);
    std::stringstream ss;
    ss << f.rdbuf();
    text = ss.str();
    if (text.find("rank 1 left") != std::string::npos || text.find("rank 1 failed") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  RANK_CHECK(text.find("rank 1 left") != std::string::npos);
  RANK_CHECK(text.find("rank 1 failed") == std::string::npos);
  RANK_NCCL(ncclCommDestroy(comm));
  unlink(log.c_str());
  return 0;
}

TEST(Failure, ExitWithoutDestroySaysGoodbye) {
  SpawnOptions o;
  std::string base = "/tmp/theseus-exit-test-" + std::to_string(getpid());
  o.env["NCCL_DEBUG"] = "INFO";
  o.env["NCCL_DEBUG_SUBSYS"] = "BOOTSTRAP";
  o.env["NCCL_DEBUG_FILE"] = base + ".%p";
  o.args = {base};
  auto r = runRanks("exit_without_destroy", 2, o);
  EXPECT_TRUE(r.allOk()) << r.describe();
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/tmp", ec))
    if (e.path().string().rfind(base + ".", 0) == 0) std::filesystem::remove(e.path(), ec);
}

// Rank 2 dies (SIGKILL) while every rank is idle: the survivors' ncclCommGetAsyncError turns
// into ncclRemoteError without them calling anything else, naming rank 2, as a watchdog
// (PyTorch's) polling it expects; the next collective fails at once with the same error.
THESEUS_RANK_FN(death_while_idle) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  float x = 1;
  RANK_NCCL(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, nullptr));
  if (ctx.rank == 2) raise(SIGKILL);
  auto start = std::chrono::steady_clock::now();
  ncclResult_t async = ncclSuccess;
  while (secondsSince(start) < 10) {
    RANK_NCCL(ncclCommGetAsyncError(comm, &async));
    if (async != ncclSuccess) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  fprintf(stderr, "[rank %d] async error after %.2f s: %s\n", ctx.rank, secondsSince(start), ncclGetLastError(comm));
  RANK_CHECK(async == ncclRemoteError);
  RANK_CHECK(secondsSince(start) < 5);
  RANK_CHECK(std::string(ncclGetLastError(comm)).find("rank 2") != std::string::npos);
  RANK_CHECK(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, nullptr) == ncclRemoteError);
  RANK_NCCL(ncclCommAbort(comm));
  return 0;
}

TEST(Failure, APeerDeathIsTheAsyncErrorWhileIdle) {
  auto r = runRanks("death_while_idle", 3);
  ASSERT_EQ(r.exitCodes.size(), 3u);
  EXPECT_EQ(r.exitCodes[0], 0) << r.describe();
  EXPECT_EQ(r.exitCodes[1], 0) << r.describe();
  EXPECT_EQ(r.exitCodes[2], 128 + SIGKILL) << r.describe();
}

// One timeout people can rely on (issue 14): theseusCommSetTimeout, or THESEUS_TIMEOUT_MS,
// bounds every wait. Rank 1 does not take part in the allreduce; rank 0 fails after about the
// communicator's 700 ms, not THESEUS_STALL_TIMEOUT_MS' 600 s. args[0]: "api" or "env".
THESEUS_RANK_FN(comm_timeout) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  RANK_CHECK(theseusCommSetTimeout(comm, -1) == ncclInvalidArgument);
  if (ctx.args.at(0) == "api") RANK_NCCL(theseusCommSetTimeout(comm, 700));
  if (ctx.rank == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(3));
    (void)ncclCommAbort(comm);
    return 0;
  }
  std::vector<float> x(1024, 1.0f);
  auto start = std::chrono::steady_clock::now();
  ncclResult_t r = ncclAllReduce(x.data(), x.data(), x.size(), ncclFloat, ncclSum, comm, nullptr);
  const double took = secondsSince(start);
  const std::string why = ncclGetLastError(nullptr);
  fprintf(stderr, "[rank 0] failed after %.2f s: %s\n", took, why.c_str());
  RANK_CHECK(r != ncclSuccess);
  RANK_CHECK(took >= 0.6 && took < 2.5);
  RANK_CHECK(why.find("no progress for 700 ms") != std::string::npos);
  (void)ncclCommAbort(comm);
  return 0;
}

TEST(Failure, TheCommunicatorTimeoutBoundsEveryWait) {
  for (const char* how : {"api", "env"}) {
    SpawnOptions o;
    o.args = {how};
    if (std::string(how) == "env") o.env["THESEUS_TIMEOUT_MS"] = "700";
    auto r = runRanks("comm_timeout", 2, o);
    EXPECT_TRUE(r.allOk()) << how << ": " << r.describe();
  }
}
