// Adaptive machinery benchmark (label `bench`; `make test` skips it). Four
// rank processes; every comparison runs in one process on two communicators
// split from the same world, alternating between them, so both sides see the
// same machine load:
//
//  1. Adaptation. Link 0->1 throttled to 10% (THESEUS_EMULATE) on a static-
//     policy communicator and on a policies/adaptive.json one; allreduce of
//     64 MiB; busbw of each and the ratio (target >= 2x). The throttle ends
//     after a while on the adaptive one: the collectives and seconds until the
//     original schedule is back (recovery).
//  2. Cost when nothing changes. THESEUS_EPOCH=0 (the initial table forever: a
//     fixed schedule, no lease, no telemetry, no epoch thread) against the
//     adaptive machinery on (adaptive.json, leases, telemetry, attribute
//     shipping, the policy loop), at 8 B and 64 MiB (targets: within 5% and 2%).
//  3. Cost of a swap. Random tables every 25 collectives (THESEUS_EPOCH_TEST_
//     SWAP_EVERY) with 8-byte allreduces: the time of the collective at which a
//     table takes effect minus the next one (same table, warm), against the
//     median 8-byte allreduce (target: at most one small collective).
//  4. Cost of tracing. THESEUS_TRACE on (per-peer steps of one operation in
//     100, attribute changes) against off, at 8 B and 64 MiB (targets: within
//     10% and 3%).
//
// Run: <build>/bin/adaptive_bench [--gtest_filter=*Cost*]   (or ctest -L bench -R adaptive -V)
// Quote ratios from one run, on a quiet machine (check `uptime`).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../../mp/epoch/adaptive_common.h"
#include "mp_test.h"
#include "test_files.h"

using theseus::test::runRanks;
using theseus::test::SpawnOptions;

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double busbw(size_t bytes, int n, double seconds) { return 2.0 * (n - 1) / n * double(bytes) / seconds / 1e9; }

// A communicator split from `world` with these variables set while it is created.
int splitWith(const theseus::test::RankContext& ctx, ncclComm_t world,
              const std::vector<std::pair<const char*, std::string>>& env, ncclComm_t* out) {
  for (const auto& [k, v] : env) setenv(k, v.c_str(), 1);
  ncclResult_t r = ncclCommSplit(world, 0, ctx.rank, out, nullptr);
  for (const auto& [k, v] : env) unsetenv(k);
  RANK_NCCL(r);
  return 0;
}

// Seconds of one allreduce of `count` floats.
double timed(ncclComm_t comm, std::vector<float>& buf, ncclResult_t* r) {
  auto t0 = Clock::now();
  *r = ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm, nullptr);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

uint64_t nextSeq(ncclComm_t comm) {
  uint64_t seq = 0;
  theseusGetEpochInfo(comm, &seq, nullptr, nullptr);
  return seq;
}

// ---- 1. adaptation -------------------------------------------------------------------------------

THESEUS_RANK_FN(adaptation_body) {
  const size_t bytes = std::stoull(ctx.args.at(0));
  const std::string adaptive = ctx.args.at(1);
  const int healAt = std::stoi(ctx.args.at(2));
  ncclComm_t world, fixed, adapt;
  RANK_NCCL(ncclCommInitRank(&world, ctx.nranks, ctx.id, ctx.rank));
  if (splitWith(ctx, world, {{"THESEUS_POLICY", "static"}, {"THESEUS_EMULATE", "throttle:0->1:10%@seq=3-"}}, &fixed))
    return 1;
  if (splitWith(ctx, world,
                {{"THESEUS_POLICY", adaptive},
                 {"THESEUS_EMULATE", "throttle:0->1:10%@seq=3-" + std::to_string(healAt)}},
                &adapt))
    return 1;
  std::vector<float> buf(bytes / sizeof(float), 1.f);
  ncclResult_t r;
  // Healthy collectives (both links learn what they achieve), then the adaptive one adapts.
  std::vector<double> healthy;
  for (int i = 0; i < 3; ++i) {
    timed(fixed, buf, &r);
    RANK_NCCL(r);
    healthy.push_back(timed(adapt, buf, &r));
    RANK_NCCL(r);
  }
  auto throttledAt = Clock::now();
  int waited = 0;
  uint64_t swapSeq = 0;
  for (; waited < 30; ++waited) {
    timed(adapt, buf, &r);
    RANK_NCCL(r);
    auto tables = theseus::test::allreduceTables(theseus::test::decisionLogOf(adapt), bytes);
    // All ranks must take the same number of steps: rank 0's view decides, broadcast through the world.
    int done = tables.size() > 1 && (tables.back().schedule != tables.front().schedule ||
                                     tables.back().order != tables.front().order);
    RANK_NCCL(ncclBroadcast(&done, &done, 1, ncclInt32, 0, world, nullptr));
    if (done) {
      swapSeq = tables.back().seq;
      break;
    }
  }
  double adaptSec = std::chrono::duration<double>(Clock::now() - throttledAt).count();
  // Interleaved measurement, both throttled.
  std::vector<double> s, a;
  for (int i = 0; i < 3; ++i) {
    s.push_back(timed(fixed, buf, &r));
    RANK_NCCL(r);
    a.push_back(timed(adapt, buf, &r));
    RANK_NCCL(r);
  }
  // Recovery: run the adaptive communicator past the end of its throttle until the original ring is back.
  while (nextSeq(adapt) < static_cast<uint64_t>(healAt)) {
    timed(adapt, buf, &r);
    RANK_NCCL(r);
  }
  auto healedAt = Clock::now();
  uint64_t healedSeq = nextSeq(adapt), backSeq = 0;
  for (int i = 0; i < 200; ++i) {
    int late = std::chrono::duration<double>(Clock::now() - healedAt).count() > 60;  // give up after a minute
    RANK_NCCL(ncclBroadcast(&late, &late, 1, ncclInt32, 0, world, nullptr));
    if (late) break;
    timed(adapt, buf, &r);
    RANK_NCCL(r);
    auto tables = theseus::test::allreduceTables(theseus::test::decisionLogOf(adapt), bytes);
    int back = tables.back().seq >= healedSeq && tables.back().schedule == tables.front().schedule &&
               tables.back().order == tables.front().order;
    RANK_NCCL(ncclBroadcast(&back, &back, 1, ncclInt32, 0, world, nullptr));
    if (back) {
      backSeq = tables.back().seq;
      break;
    }
  }
  double recoverSec = std::chrono::duration<double>(Clock::now() - healedAt).count();
  if (ctx.rank == 0) {
    const int n = ctx.nranks;
    double sb = busbw(bytes, n, median(s)), ab = busbw(bytes, n, median(a));
    printf("ADAPTATION %d ranks, allreduce %zu MiB, link 0->1 at 10%%\n", n, bytes >> 20);
    printf("  healthy (no throttle yet)      %8.1f ms  busbw %6.3f GB/s\n", median(healthy) * 1e3,
           busbw(bytes, n, median(healthy)));
    printf("  static ring, throttled         %8.1f ms  busbw %6.3f GB/s\n", median(s) * 1e3, sb);
    printf("  adaptive, throttled            %8.1f ms  busbw %6.3f GB/s\n", median(a) * 1e3, ab);
    printf("  ratio adaptive/static          %8.2fx   (target >= 2x)\n", ab / sb);
    printf("  swap around the link           at collective %llu, %d collectives / %.2f s after the throttle\n",
           static_cast<unsigned long long>(swapSeq), waited + 1, adaptSec);
    printf("  recovery after the link healed %s at collective %llu, %.2f s after collective %llu\n",
           backSeq ? "original ring back" : "NOT back", static_cast<unsigned long long>(backSeq), recoverSec,
           static_cast<unsigned long long>(healedSeq));
    printf("  decision tables (64 MiB allreduce):");
    for (const auto& t : theseus::test::allreduceTables(theseus::test::decisionLogOf(adapt), bytes)) {
      std::string order;
      for (int x : t.order) order += (order.empty() ? "" : ",") + std::to_string(x);
      printf(" #%llu:%s%s", static_cast<unsigned long long>(t.seq), t.schedule.c_str(),
             order.empty() ? "" : ("(" + order + ")").c_str());
    }
    printf("\n");
    fflush(stdout);
    RANK_CHECK(swapSeq > 0);
    RANK_CHECK(ab >= 2 * sb);
    RANK_CHECK(backSeq > 0);
  }
  RANK_NCCL(ncclCommDestroy(adapt));
  RANK_NCCL(ncclCommDestroy(fixed));
  RANK_NCCL(ncclCommDestroy(world));
  return 0;
}

TEST(AdaptiveBench, AdaptationToAThrottledLink) {
  SpawnOptions o;
  o.timeoutSec = 900;
  o.args = {std::to_string(64 << 20), std::string(THESEUS_SOURCE_DIR) + "/policies/adaptive.json", "24"};
  EXPECT_RANKS_OK(runRanks("adaptation_body", 4, o));
}

// ---- 2. cost when nothing changes ----------------------------------------------------------------

// Mean seconds per allreduce over `iters` calls.
double meanOf(ncclComm_t comm, std::vector<float>& buf, int iters, ncclResult_t* r) {
  auto t0 = Clock::now();
  for (int i = 0; i < iters && *r == ncclSuccess; ++i)
    *r = ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm, nullptr);
  return std::chrono::duration<double>(Clock::now() - t0).count() / iters;
}

// An interleaved A/B in one process: allreduces on communicator `a`, then on `b`, alternating which
// goes first each round (drifting load favours neither); prints the ratio b / a per size.
struct CostSize {
  size_t bytes;
  int iters, rounds;
  double target;  // b within this fraction of a
};

int compareAB(const theseus::test::RankContext& ctx, ncclComm_t a, ncclComm_t b, const char* tag, const char* nameA,
              const char* nameB, const std::vector<CostSize>& sizes) {
  for (const CostSize& sz : sizes) {
    std::vector<float> buf(std::max<size_t>(sz.bytes / sizeof(float), 1), 1.f);
    ncclResult_t r = ncclSuccess;
    meanOf(a, buf, sz.iters / 2 + 1, &r);  // warm up both
    meanOf(b, buf, sz.iters / 2 + 1, &r);
    std::vector<double> ta, tb;
    for (int round = 0; round < sz.rounds; ++round) {
      if (round % 2 == 0) {
        ta.push_back(meanOf(a, buf, sz.iters, &r));
        tb.push_back(meanOf(b, buf, sz.iters, &r));
      } else {
        tb.push_back(meanOf(b, buf, sz.iters, &r));
        ta.push_back(meanOf(a, buf, sz.iters, &r));
      }
    }
    RANK_NCCL(r);
    const double meanA = std::accumulate(ta.begin(), ta.end(), 0.0) / ta.size();
    const double meanB = std::accumulate(tb.begin(), tb.end(), 0.0) / tb.size();
    const double ma = median(ta), mb = median(tb);
    if (ctx.rank == 0) {
      printf("%s %d ranks, allreduce %zu B: %s %.2f us, %s %.2f us: ratio %.4f (mean of %d rounds; medians %.2f / "
             "%.2f us, ratio %.4f); target within %.0f%%: %s\n",
             tag, ctx.nranks, sz.bytes, nameA, meanA * 1e6, nameB, meanB * 1e6, meanB / meanA, sz.rounds, ma * 1e6,
             mb * 1e6, mb / ma, sz.target * 100, meanB / meanA <= 1 + sz.target ? "met" : "MISSED");
      fflush(stdout);
    }
  }
  return 0;
}

THESEUS_RANK_FN(cost_body) {
  const std::string adaptive = ctx.args.at(0);
  ncclComm_t world, fixed, on;
  RANK_NCCL(ncclCommInitRank(&world, ctx.nranks, ctx.id, ctx.rank));
  if (splitWith(ctx, world, {{"THESEUS_EPOCH", "0"}}, &fixed)) return 1;
  if (splitWith(ctx, world, {{"THESEUS_POLICY", adaptive}}, &on)) return 1;
  if (compareAB(ctx, fixed, on, "COST", "fixed (THESEUS_EPOCH=0)", "adaptive machinery on",
                {{8, 2000, 8, 0.05}, {64 << 20, 2, 8, 0.02}}))
    return 1;
  RANK_NCCL(ncclCommDestroy(on));
  RANK_NCCL(ncclCommDestroy(fixed));
  RANK_NCCL(ncclCommDestroy(world));
  return 0;
}

TEST(AdaptiveBench, CostWhenNothingChanges) {
  SpawnOptions o;
  o.timeoutSec = 900;
  o.args = {std::string(THESEUS_SOURCE_DIR) + "/policies/adaptive.json"};
  EXPECT_RANKS_OK(runRanks("cost_body", 4, o));
  EXPECT_RANKS_OK(runRanks("cost_body", 2, o));
}

// ---- 4. cost of tracing --------------------------------------------------------------------------

// THESEUS_TRACE on (default step sampling, THESEUS_TRACE_STEPS=100) against off, in one run.
THESEUS_RANK_FN(trace_cost_body) {
  const std::string dir = ctx.args.at(0);
  ncclComm_t world, off, on;
  RANK_NCCL(ncclCommInitRank(&world, ctx.nranks, ctx.id, ctx.rank));
  if (splitWith(ctx, world, {}, &off)) return 1;
  if (splitWith(ctx, world, {{"THESEUS_TRACE", dir}}, &on)) return 1;
  if (compareAB(ctx, off, on, "TRACE", "tracing off", "tracing on", {{8, 2000, 20, 0.10}, {64 << 20, 2, 12, 0.03}}))
    return 1;
  RANK_NCCL(ncclCommDestroy(on));
  RANK_NCCL(ncclCommDestroy(off));
  RANK_NCCL(ncclCommDestroy(world));
  return 0;
}

TEST(AdaptiveBench, CostOfTracing) {
  const std::string dir = theseus::test::makeTempDir("theseus-trace-cost");
  ASSERT_FALSE(dir.empty());
  SpawnOptions o;
  o.timeoutSec = 900;
  o.args = {dir};
  EXPECT_RANKS_OK(runRanks("trace_cost_body", 4, o));
  EXPECT_RANKS_OK(runRanks("trace_cost_body", 2, o));  // a rank per core: the A/B resolves small effects
  (void)system(("rm -rf " + dir).c_str());
}

// ---- 3. cost of a swap ---------------------------------------------------------------------------

THESEUS_RANK_FN(swap_cost_body) {
  const int iters = std::stoi(ctx.args.at(0));
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  std::vector<float> buf(2, 1.f);
  std::vector<double> t(iters);
  ncclResult_t r;
  for (int i = 0; i < 200; ++i) timed(comm, buf, &r);  // warm up
  const uint64_t first = nextSeq(comm);
  for (int i = 0; i < iters; ++i) {
    t[i] = timed(comm, buf, &r);
    RANK_NCCL(r);
  }
  auto tables = theseus::test::allreduceTables(theseus::test::decisionLogOf(comm), 8);
  std::vector<double> extra, base;
  for (const auto& tab : tables) {
    if (tab.seq <= first + 1 || tab.seq + 2 >= first + iters) continue;
    size_t i = tab.seq - first;
    extra.push_back(t[i] - t[i + 1]);
  }
  if (ctx.rank == 0) {
    double small = median(t);
    double meanExtra = extra.empty() ? 0 : std::accumulate(extra.begin(), extra.end(), 0.0) / extra.size();
    printf("SWAP %d ranks: %zu swaps in %d 8-byte allreduces; median allreduce %.2f us; at a swap the collective "
           "takes %.2f us longer than the next one (mean; median %.2f us): %.2f small collectives; target <= 1: %s\n",
           ctx.nranks, extra.size(), iters, small * 1e6, meanExtra * 1e6, median(extra) * 1e6, meanExtra / small,
           meanExtra <= small ? "met" : "MISSED");
    fflush(stdout);
    RANK_CHECK(extra.size() >= 20);
  }
  RANK_NCCL(ncclCommDestroy(comm));
  return 0;
}

TEST(AdaptiveBench, CostOfASwap) {
  SpawnOptions o;
  o.timeoutSec = 600;
  // A swap every ADAPTIVE_BENCH_SWAP_EVERY collectives (default 100).
  const char* every = getenv("ADAPTIVE_BENCH_SWAP_EVERY");
  o.env["THESEUS_EPOCH_TEST_SWAP_EVERY"] = every != nullptr ? every : "100";
  const char* iters = getenv("ADAPTIVE_BENCH_SWAP_ITERS");
  o.args = {iters != nullptr ? iters : "8000"};
  const char* n = getenv("ADAPTIVE_BENCH_SWAP_RANKS");
  EXPECT_RANKS_OK(runRanks("swap_cost_body", n != nullptr ? atoi(n) : 4, o));
}

}  // namespace
