// Epoch-consistent hot-swap under stress, with real rank processes: thousands
// of mixed collectives (every collective, several types and ops, in place or
// not, sizes across the random tables' range cuts, grouped collectives,
// send/recv in between, a split communicator with its own sequence space)
// while the leader swaps to a random decision table every few collectives
// (THESEUS_EPOCH_TEST_SWAP_EVERY). Every result is checked against the
// reference (collective_check.h); afterwards all ranks' decision logs of each
// communicator must be identical (invariant 1) and show many swaps.
#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../collectives/collective_check.h"
#include "mp_test.h"
#include "test_files.h"
#include "theseus/theseus.h"

using theseus::test::CheckCase;
using theseus::test::Coll;
using theseus::test::readFile;
using theseus::test::runRanks;
using theseus::test::SpawnOptions;

namespace {

CheckCase randomCase(std::mt19937_64& rng, int nranks, int salt) {
  static const Coll kColls[] = {Coll::kAllReduce, Coll::kAllReduce, Coll::kBroadcast, Coll::kReduce,
                                Coll::kAllGather, Coll::kReduceScatter, Coll::kAlltoAll, Coll::kGather, Coll::kScatter};
  static const ncclDataType_t kTypes[] = {ncclFloat32, ncclInt32, ncclFloat64, ncclUint8, ncclBfloat16};
  static const ncclRedOp_t kOps[] = {ncclSum, ncclSum, ncclMax, ncclProd, ncclAvg};
  static const size_t kCounts[] = {1, 3, 64, 257, 1000, 4096, 17000, 70000};
  CheckCase c;
  c.coll = kColls[rng() % 9];
  c.type = kTypes[rng() % 5];
  c.op = kOps[rng() % 5];
  if (c.op == ncclProd) c.type = ncclFloat64;  // products of many ranks stay exact in doubles
  c.count = kCounts[rng() % 8] + rng() % 7;
  c.inPlace = rng() % 2 == 0;
  c.root = static_cast<int>(rng() % nranks);
  c.memAlloc = rng() % 4 == 0;
  c.salt = salt;
  return c;
}

// Two allreduces in one group: x = rank + i, y = 2 * rank; checked exactly.
int groupedPair(const theseus::test::RankContext& ctx, ncclComm_t comm, size_t count) {
  std::vector<int32_t> x(count), y(count);
  for (size_t i = 0; i < count; ++i) {
    x[i] = ctx.rank + static_cast<int32_t>(i % 100);
    y[i] = 2 * ctx.rank;
  }
  RANK_NCCL(ncclGroupStart());
  RANK_NCCL(ncclAllReduce(x.data(), x.data(), count, ncclInt32, ncclSum, comm, nullptr));
  RANK_NCCL(ncclAllReduce(y.data(), y.data(), count, ncclInt32, ncclSum, comm, nullptr));
  RANK_NCCL(ncclGroupEnd());
  const int32_t ranks = ctx.nranks * (ctx.nranks - 1) / 2;
  for (size_t i = 0; i < count; ++i) {
    RANK_CHECK(x[i] == ranks + ctx.nranks * static_cast<int32_t>(i % 100));
    RANK_CHECK(y[i] == 2 * ranks);
  }
  return 0;
}

// A ring exchange with send/recv (they take no collective number).
int ringExchange(const theseus::test::RankContext& ctx, ncclComm_t comm, size_t count) {
  std::vector<float> out(count, static_cast<float>(ctx.rank)), in(count, -1.f);
  int next = (ctx.rank + 1) % ctx.nranks, prev = (ctx.rank + ctx.nranks - 1) % ctx.nranks;
  RANK_NCCL(ncclGroupStart());
  RANK_NCCL(ncclSend(out.data(), count, ncclFloat32, next, comm, nullptr));
  RANK_NCCL(ncclRecv(in.data(), count, ncclFloat32, prev, comm, nullptr));
  RANK_NCCL(ncclGroupEnd());
  for (float v : in) RANK_CHECK(v == static_cast<float>(prev));
  return 0;
}

int runMix(const theseus::test::RankContext& ctx, ncclComm_t comm, int nranks, int rank, int iterations,
           uint64_t seed) {
  std::mt19937_64 rng(seed);  // the same stream on every rank: the same calls in the same order
  theseus::test::RankContext me = ctx;
  me.rank = rank;
  me.nranks = nranks;
  for (int i = 0; i < iterations; ++i) {
    uint64_t kind = rng() % 20;
    size_t count = 1 + rng() % 5000;
    if (kind == 0 && nranks > 1) {
      if (ringExchange(me, comm, count) != 0) return 1;
    } else if (kind == 1) {
      if (groupedPair(me, comm, count) != 0) return 1;
    } else {
      CheckCase c = randomCase(rng, nranks, i);
      std::string why;
      if (!theseus::test::runCheck(comm, rank, nranks, c, &why)) {
        uint64_t seq = 0, version = 0;
        theseusGetEpochInfo(comm, &seq, &version, nullptr);
        fprintf(stderr, "[rank %d] iteration %d (collective #%llu, table v%llu) FAILED %s: %s\n", rank, i,
                static_cast<unsigned long long>(seq), static_cast<unsigned long long>(version),
                theseus::test::describe(c).c_str(), why.c_str());
        return 1;
      }
    }
  }
  return 0;
}

THESEUS_RANK_FN(epoch_stress_body) {
  const int iterations = std::stoi(ctx.args.at(0));
  const uint64_t seed = std::stoull(ctx.args.at(1));
  ncclComm_t world, half;
  RANK_NCCL(ncclCommInitRank(&world, ctx.nranks, ctx.id, ctx.rank));
  if (runMix(ctx, world, ctx.nranks, ctx.rank, iterations / 2, seed) != 0) return 1;
  // A child communicator: its own leader and sequence numbers, swapping too, interleaved with the parent.
  RANK_NCCL(ncclCommSplit(world, ctx.rank % 2, ctx.rank, &half, nullptr));
  int hrank, hsize;
  RANK_NCCL(ncclCommUserRank(half, &hrank));
  RANK_NCCL(ncclCommCount(half, &hsize));
  for (int round = 0; round < 4; ++round) {
    if (runMix(ctx, half, hsize, hrank, iterations / 16, seed * 7 + ctx.rank % 2 + round) != 0) return 1;
    if (runMix(ctx, world, ctx.nranks, ctx.rank, iterations / 16, seed * 13 + round) != 0) return 1;
  }
  uint64_t seq = 0, version = 0;
  RANK_NCCL(theseusGetEpochInfo(world, &seq, &version, nullptr));
  // The extension API returns the same text the library writes to THESEUS_DECISION_LOG.
  size_t needed = 0;
  RANK_NCCL(theseusGetDecisionLog(world, nullptr, 0, &needed));
  std::string text(needed, '\0');
  RANK_NCCL(theseusGetDecisionLog(world, text.data(), needed, &needed));
  text.resize(needed - 1);
  RANK_CHECK(std::count(text.begin(), text.end(), '\n') >= 10);
  if (ctx.rank == 0)
    printf("[rank 0] %llu collectives on the world communicator, last table v%llu\n",
           static_cast<unsigned long long>(seq), static_cast<unsigned long long>(version));
  RANK_NCCL(ncclCommDestroy(half));
  RANK_NCCL(ncclCommDestroy(world));
  return 0;
}

// log.<rank>.<comm> files in `dir`, grouped by communicator.
std::map<std::string, std::map<int, std::string>> readLogs(const std::string& dir) {
  std::map<std::string, std::map<int, std::string>> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.rfind("log.", 0) != 0) continue;
    size_t dot = name.find('.', 4);
    out[name.substr(dot + 1)][std::stoi(name.substr(4, dot - 4))] = readFile(dir + "/" + name);
  }
  closedir(d);
  return out;
}

struct StressParam {
  int nranks;
  int iterations;
  int swapEvery;
};

class EpochStress : public ::testing::TestWithParam<StressParam> {};

TEST_P(EpochStress, AllRanksSwapAtTheSameCollectiveAndResultsAreRight) {
  const StressParam p = GetParam();
  std::string dir = "/tmp/theseus-epoch-stress-" + std::to_string(getpid()) + "-" + std::to_string(p.nranks);
  ASSERT_EQ(system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()), 0);
  SpawnOptions o;
  o.timeoutSec = 400;
  o.args = {std::to_string(p.iterations), std::to_string(1000 + p.nranks)};
  o.env["THESEUS_EPOCH_TEST_SWAP_EVERY"] = std::to_string(p.swapEvery);
  o.env["THESEUS_EPOCH_TEST_SEED"] = std::to_string(p.nranks);
  o.env["THESEUS_DECISION_LOG"] = dir + "/log.%r.%c";
  o.env["THESEUS_EPOCH_WAIT_TIMEOUT_MS"] = "120000";
  EXPECT_RANKS_OK(runRanks("epoch_stress_body", p.nranks, o));
  auto logs = readLogs(dir);
  // The world communicator and the two halves (one with a single rank when nranks is 2 or 3).
  EXPECT_EQ(logs.size(), p.nranks >= 2 ? 3u : 1u);
  size_t worldLines = 0;
  for (const auto& [comm, byRank] : logs) {
    ASSERT_FALSE(byRank.empty());
    const std::string& first = byRank.begin()->second;
    for (const auto& [rank, text] : byRank)
      EXPECT_EQ(text, first) << "communicator " << comm << ": rank " << rank << " logged other decisions than rank "
                             << byRank.begin()->first;
    if (static_cast<int>(byRank.size()) == p.nranks)
      worldLines = static_cast<size_t>(std::count(first.begin(), first.end(), '\n'));
  }
  EXPECT_GE(worldLines, 20u) << "the world communicator should have swapped tables many times";
  (void)system(("rm -rf " + dir).c_str());
}

INSTANTIATE_TEST_SUITE_P(Ranks, EpochStress,
                         ::testing::Values(StressParam{2, 2400, 5}, StressParam{3, 1600, 7}, StressParam{4, 1600, 6},
                                           StressParam{5, 1000, 9}, StressParam{8, 640, 8}),
                         [](const auto& info) { return std::to_string(info.param.nranks) + "ranks"; });

}  // namespace
