// The rank side of a fault trial (fault_trial.h) and the trials' random choice.
#include "fault_trial.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "checked_collectives.h"
#include "mp_test.h"
#include "nccl.h"

namespace fault_test {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

const char* const kPhases[] = {"init", "collective", "swap", "split", "shrink", "destroy"};

// The victim's timer: SIGKILL `us` microseconds from now, wherever its main thread is.
void armKiller(int us) {
  std::thread([us] {
    std::this_thread::sleep_for(std::chrono::microseconds(us));
    raise(SIGKILL);
  }).detach();
}

// Whether `why` names `victim` (a rank of the job's first communicator) as the rank that failed
// first: the last rank named before " failed first" when the message has that phrase ("rank 1
// (host pid P)", or "rank 0 (parent rank 1, host pid P)" in a child), else "rank <victim>" as
// a whole word somewhere.
bool namesVictim(const std::string& why, int victim) {
  const std::string v = "rank " + std::to_string(victim);
  const size_t first = why.find(" failed first");
  if (first != std::string::npos) {
    const size_t named = why.rfind("rank ", first);
    return named != std::string::npos && std::atoi(why.c_str() + named + 5) == victim;
  }
  for (size_t at = why.find(v); at != std::string::npos; at = why.find(v, at + 1)) {
    const char next = at + v.size() < why.size() ? why[at + v.size()] : ' ';
    if (next < '0' || next > '9') return true;
  }
  return false;
}

// After the failure: a communicator without the victim (and `alsoExcluded`, when >= 0) works.
int recover(const theseus::test::RankContext& ctx, ncclComm_t comm, int victim, int alsoExcluded) {
  int excluded[2] = {victim, alsoExcluded};
  const int nExcluded = alsoExcluded >= 0 ? 2 : 1;
  ncclComm_t small = nullptr;
  RANK_NCCL(ncclCommShrink(comm, excluded, nExcluded, &small, nullptr, NCCL_SHRINK_ABORT));
  int count = 0, me = -1;
  RANK_NCCL(ncclCommCount(small, &count));
  RANK_NCCL(ncclCommUserRank(small, &me));
  RANK_CHECK(count == ctx.nranks - nExcluded);
  std::vector<float> v(4096, static_cast<float>(me + 1));
  RANK_NCCL(ncclAllReduce(v.data(), v.data(), v.size(), ncclFloat, ncclSum, small, nullptr));
  for (float x : v) RANK_CHECK(x == static_cast<float>(count * (count + 1) / 2));
  RANK_NCCL(ncclCommDestroy(small));
  return 0;
}

// What a survivor checks once a call failed.
int judge(const theseus::test::RankContext& ctx, const Trial& t, ncclResult_t r, Clock::time_point start,
          const char* where) {
  const std::string why = ncclGetLastError(nullptr);
  const double took = secondsSince(start);
  if (!namesVictim(why, t.victim) || took > kSurvivorLimitSec) {
    fprintf(stderr, "[rank %d] %s failed with %d after %.2f s, not naming rank %d as the first to fail: %s\n", ctx.rank,
            where, r, took, t.victim, why.c_str());
    return 1;
  }
  return 0;
}

Trial trialFrom(const std::vector<std::string>& args) {
  Trial t;
  t.phase = args.at(0);
  t.victim = std::stoi(args.at(1));
  t.delayUs = std::stoi(args.at(2));
  t.seed = std::stoull(args.at(3));
  return t;
}

}  // namespace

Trial randomTrial(std::mt19937_64& gen, bool withInit) {
  Trial t;
  const size_t first = withInit ? 0 : 1;  // kPhases[0] is init
  t.phase = kPhases[first + gen() % (sizeof(kPhases) / sizeof(kPhases[0]) - first)];
  t.victim = static_cast<int>(gen() % (t.phase == "shrink" ? 3 : 4));  // shrink: rank 3 is excluded alive
  const int maxUs = t.phase == "init" ? 60000 : t.phase == "destroy" ? 3000 : 150000;
  t.delayUs = static_cast<int>(gen() % static_cast<uint64_t>(maxUs));
  t.transport = gen() % 2 ? "socket" : "auto";
  t.seed = gen();
  return t;
}

bool runTrial(const Trial& t, theseus::test::SpawnOptions o, theseus::test::SpawnResult* r) {
  o.env["THESEUS_TRANSPORT"] = t.transport;
  o.env["THESEUS_BOOTSTRAP_TIMEOUT_MS"] = "5000";
  o.env["THESEUS_STALL_TIMEOUT_MS"] = "15000";
  if (t.phase == "swap") o.env["THESEUS_EPOCH_TEST_SWAP_EVERY"] = "3";
  o.args = {t.phase, std::to_string(t.victim), std::to_string(t.delayUs), std::to_string(t.seed)};
  o.timeoutSec = 60;
  *r = theseus::test::runRanks("fault_trial", 4, o);
  bool ok = r->exitCodes.size() == 4 && !r->timedOut;
  for (size_t k = 0; ok && k < r->exitCodes.size(); ++k)
    ok = r->exitCodes[k] == (r->ranks[k] == t.victim ? 128 + SIGKILL : 0);
  return ok;
}

std::string describe(const Trial& t) {
  return "phase " + t.phase + ", victim rank " + std::to_string(t.victim) + ", kill after " +
         std::to_string(t.delayUs) + " us, transport " + t.transport + ", seed " + std::to_string(t.seed);
}

}  // namespace fault_test

using fault_test::Trial;
using theseus::test::checkedCollective;

// A rank of a fault trial (fault_trial.h); args: phase, victim, delay (us), seed.
THESEUS_RANK_FN(fault_trial) {
  using namespace fault_test;
  const Trial t = trialFrom(ctx.args);
  const bool victim = ctx.rank == t.victim;
  std::mt19937_64 gen(t.seed);
  std::vector<float> a(size_t{1} << 16), b(size_t{1} << 16);
  bool wrong = false;

  auto start = Clock::now();
  if (t.phase == "init" && victim) armKiller(t.delayUs);
  ncclComm_t comm = nullptr;
  ncclUniqueId id = ctx.id;
  if (getenv("NCCL_COMM_ID") != nullptr) RANK_NCCL(ncclGetUniqueId(&id));
  ncclResult_t r = ncclCommInitRank(&comm, ctx.nranks, id, ctx.rank);
  if (r != ncclSuccess) return judge(ctx, t, r, start, "ncclCommInitRank");

  if (t.phase == "destroy") {
    // The victim's clock starts when *it* finished the three collectives: a peer may still be
    // finishing the last one (its data from the victim still in flight, lost with the victim's
    // sockets), so an error there is judged like any survivor's, not a failure of the trial.
    for (int i = 0; i < 3; ++i) {
      r = checkedCollective(comm, ctx.rank, ctx.nranks, gen, a, b, &wrong);
      if (r != ncclSuccess && !victim) return judge(ctx, t, r, start, "a collective before the destroy");
      RANK_NCCL(r);
    }
    RANK_CHECK(!wrong);
    start = Clock::now();
    if (victim) armKiller(t.delayUs);
    (void)ncclCommDestroy(comm);  // a survivor may succeed or fail, but returns in time
    if (victim) for (;;) pause();
    RANK_CHECK(secondsSince(start) < kSurvivorLimitSec);
    return 0;
  }

  const int excludedAlive = t.phase == "shrink" ? ctx.nranks - 1 : -1;
  if (ctx.rank == excludedAlive) {
    // Left out of every shrink: it waits for the victim's death to reach it, then leaves.
    ncclResult_t async = ncclSuccess;
    while (async == ncclSuccess && secondsSince(start) < kSurvivorLimitSec) {
      RANK_NCCL(ncclCommGetAsyncError(comm, &async));
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    RANK_CHECK(async == ncclRemoteError);
    RANK_CHECK(namesVictim(ncclGetLastError(comm), t.victim));
    RANK_NCCL(ncclCommAbort(comm));
    return 0;
  }

  if (t.phase != "init") start = Clock::now();
  if (t.phase != "init" && victim) armKiller(t.delayUs);
  const char* where = "a collective";
  for (int i = 0; r == ncclSuccess && !wrong; ++i) {
    RANK_CHECK(secondsSince(start) < kSurvivorLimitSec);  // the victim died long ago: this is a hang
    if (t.phase == "split") {
      where = "ncclCommSplit or its child";
      ncclComm_t child = nullptr;
      r = ncclCommSplit(comm, (ctx.rank + i) % 2, ctx.rank, &child, nullptr);
      int n = 0, me = 0;
      if (r == ncclSuccess && child != nullptr) {
        (void)ncclCommCount(child, &n);
        (void)ncclCommUserRank(child, &me);
        r = checkedCollective(child, me, n, gen, a, b, &wrong);
        if (r == ncclSuccess) r = ncclCommDestroy(child);
        else (void)ncclCommAbort(child);
      }
    } else if (t.phase == "shrink") {
      where = "ncclCommShrink or its child";
      ncclComm_t child = nullptr;
      int excluded[1] = {excludedAlive};
      r = ncclCommShrink(comm, excluded, 1, &child, nullptr, NCCL_SHRINK_DEFAULT);
      if (r == ncclSuccess) {
        r = checkedCollective(child, ctx.rank, ctx.nranks - 1, gen, a, b, &wrong);
        if (r == ncclSuccess) r = ncclCommDestroy(child);
        else (void)ncclCommAbort(child);
      }
    } else {
      r = checkedCollective(comm, ctx.rank, ctx.nranks, gen, a, b, &wrong);
    }
  }
  if (wrong) {
    fprintf(stderr, "[rank %d] a collective returned ncclSuccess with wrong data\n", ctx.rank);
    return 1;
  }
  if (judge(ctx, t, r, start, where) != 0) return 1;
  // A victim killed at the very end of init can leave some survivors with a communicator and some
  // without one (their init failed naming it), as with NVIDIA's library: those
  // without cannot take part in a shrink, so after an init-phase death the job starts again instead.
  if (t.phase == "init") {
    (void)ncclCommAbort(comm);
    return 0;
  }
  if (recover(ctx, comm, t.victim, excludedAlive) != 0) return 1;
  (void)ncclCommAbort(comm);
  return 0;
}
