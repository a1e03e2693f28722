// Creating communicators through the API: 1..8 rank processes, InitAll,
// several ranks from one thread in one group, several roots, NCCL_COMM_ID,
// non-blocking init polled from another thread, config struct sizes.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

#include <gtest/gtest.h>

#include "lifecycle_util.h"
#include "mp_test.h"

using namespace lifecycle_test;
using theseus::test::runRanks;
using theseus::test::SpawnOptions;


// init -> queries -> finalize -> destroy.
THESEUS_RANK_FN(init_basic) {
  ncclComm_t comm = nullptr;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  RANK_CHECK(comm != nullptr);
  int count = -1, rank = -1, dev = -1;
  ncclResult_t async = ncclInternalError;
  RANK_NCCL(ncclCommCount(comm, &count));
  RANK_NCCL(ncclCommUserRank(comm, &rank));
  RANK_NCCL(ncclCommCuDevice(comm, &dev));
  RANK_NCCL(ncclCommGetAsyncError(comm, &async));
  RANK_CHECK(count == ctx.nranks);
  RANK_CHECK(rank == ctx.rank);
  RANK_CHECK(dev == 0);  // no CUDA in use: device 0, like cudaGetDevice's default
  RANK_CHECK(async == ncclSuccess);
  RANK_NCCL(ncclCommFinalize(comm));
  RANK_NCCL(ncclCommGetAsyncError(comm, &async));
  RANK_CHECK(async == ncclSuccess);
  RANK_NCCL(ncclCommDestroy(comm));
  return 0;
}

TEST(Init, OneToEightRankProcesses) {
  for (int n : {1, 2, 3, 4, 5, 8}) {
    auto r = runRanks("init_basic", n);
    EXPECT_TRUE(r.allOk()) << n << " ranks: " << r.describe();
    EXPECT_LT(r.seconds, 30.0);
  }
}

TEST(Init, InitAllInOneProcess) {
  ncclComm_t comms[4];
  ASSERT_EQ(ncclCommInitAll(comms, 4, nullptr), ncclSuccess) << ncclGetLastError(nullptr);
  for (int i = 0; i < 4; ++i) {
    int count, rank, dev;
    ASSERT_EQ(ncclCommCount(comms[i], &count), ncclSuccess);
    ASSERT_EQ(ncclCommUserRank(comms[i], &rank), ncclSuccess);
    ASSERT_EQ(ncclCommCuDevice(comms[i], &dev), ncclSuccess);
    EXPECT_EQ(count, 4);
    EXPECT_EQ(rank, i);
    EXPECT_EQ(dev, i) << "devlist NULL means devices 0..n-1";
  }
  for (auto c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);

  const int devlist[3] = {5, 2, 7};
  ASSERT_EQ(ncclCommInitAll(comms, 3, devlist), ncclSuccess) << ncclGetLastError(nullptr);
  for (int i = 0; i < 3; ++i) {
    int dev;
    ASSERT_EQ(ncclCommCuDevice(comms[i], &dev), ncclSuccess);
    EXPECT_EQ(dev, devlist[i]);
  }
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ncclCommDestroy(comms[i]), ncclSuccess);

  const int dup[3] = {1, 2, 1};
  EXPECT_EQ(ncclCommInitAll(comms, 3, dup), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("device 1 twice"), std::string::npos) << ncclGetLastError(nullptr);
  const int negative[2] = {0, -1};
  EXPECT_EQ(ncclCommInitAll(comms, 2, negative), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitAll(comms, 0, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitAll(nullptr, 2, nullptr), ncclInvalidArgument);
}

// Ranks 2k and 2k+1 of a 2*nprocs communicator, both from this thread in one group.
THESEUS_RANK_FN(two_ranks_one_thread) {
  const int n = 2 * ctx.nranks;
  ncclComm_t comms[2];
  RANK_NCCL(ncclGroupStart());
  for (int i = 0; i < 2; ++i) RANK_NCCL(ncclCommInitRank(&comms[i], n, ctx.id, 2 * ctx.rank + i));
  RANK_NCCL(ncclGroupEnd());
  for (int i = 0; i < 2; ++i) {
    int rank;
    RANK_NCCL(ncclCommUserRank(comms[i], &rank));
    RANK_CHECK(rank == 2 * ctx.rank + i);
  }
  RANK_NCCL(ncclGroupStart());
  for (auto c : comms) RANK_NCCL(ncclCommDestroy(c));
  RANK_NCCL(ncclGroupEnd());
  return 0;
}

TEST(Init, SeveralRanksFromOneThreadInOneGroup) {
  // All four ranks in this process, from this thread (what nccl-tests does by default).
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comms[4];
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(ncclCommInitRank(&comms[i], 4, id, i), ncclSuccess);
  for (int i = 0; i < 4; ++i) EXPECT_NE(comms[i], nullptr) << "handles are written before the group ends";
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
  for (int i = 0; i < 4; ++i) {
    int rank;
    ASSERT_EQ(ncclCommUserRank(comms[i], &rank), ncclSuccess);
    EXPECT_EQ(rank, i);
    EXPECT_EQ(ncclCommDestroy(comms[i]), ncclSuccess);
  }
  // And across processes: three processes with two ranks each.
  auto r = runRanks("two_ranks_one_thread", 3);
  EXPECT_TRUE(r.allOk()) << r.describe();
}

THESEUS_RANK_FN(init_scalable) {
  std::vector<ncclUniqueId> ids(1 + ctx.args.size());
  ids[0] = ctx.id;
  for (size_t i = 0; i < ctx.args.size(); ++i) RANK_CHECK(theseus::test::decodeId(ctx.args[i], &ids[i + 1]));
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRankScalable(&comm, ctx.nranks, ctx.rank, static_cast<int>(ids.size()), ids.data(), nullptr));
  int count, rank;
  RANK_NCCL(ncclCommCount(comm, &count));
  RANK_NCCL(ncclCommUserRank(comm, &rank));
  RANK_CHECK(count == ctx.nranks && rank == ctx.rank);
  RANK_NCCL(ncclCommDestroy(comm));
  return 0;
}

TEST(Init, ScalableWithSeveralRoots) {
  for (auto [nranks, nIds] : {std::pair{5, 2}, std::pair{7, 3}}) {
    SpawnOptions o;
    for (int i = 1; i < nIds; ++i) {
      ncclUniqueId extra;
      ASSERT_EQ(ncclGetUniqueId(&extra), ncclSuccess);
      o.args.push_back(theseus::test::encodeId(extra));
    }
    auto r = runRanks("init_scalable", nranks, o);
    EXPECT_TRUE(r.allOk()) << nranks << " ranks, " << nIds << " roots: " << r.describe();
  }
}

THESEUS_RANK_FN(init_from_comm_id) {
  ncclUniqueId id;
  RANK_NCCL(ncclGetUniqueId(&id));  // from NCCL_COMM_ID, no networking
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, id, ctx.rank));
  // A second communicator from the same NCCL_COMM_ID right after.
  ncclComm_t again;
  RANK_NCCL(ncclCommInitRank(&again, ctx.nranks, id, ctx.rank));
  RANK_NCCL(ncclCommDestroy(again));
  RANK_NCCL(ncclCommDestroy(comm));
  return 0;
}

TEST(Init, NcclCommIdStartsTheRootInRankZero) {
  SpawnOptions o;
  o.createUniqueId = false;
  o.env["NCCL_COMM_ID"] = "127.0.0.1:" + std::to_string(freeLoopbackPort());
  auto r = runRanks("init_from_comm_id", 3, o);
  EXPECT_TRUE(r.allOk()) << r.describe();
}

// Non-blocking init, finalize and split, polled from another thread (PyTorch's watchdog pattern).
THESEUS_RANK_FN(init_nonblocking) {
  ncclConfig_t cfg = nonBlockingConfig();
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, ctx.nranks, ctx.id, ctx.rank, &cfg);
  RANK_CHECK(r == ncclInProgress || r == ncclSuccess);
  RANK_CHECK(comm != nullptr);  // written at once
  ncclResult_t polled = ncclInternalError;
  std::thread poller([&] { polled = waitAsync(comm); });
  poller.join();
  RANK_CHECK(polled == ncclSuccess);
  int count;
  RANK_NCCL(ncclCommCount(comm, &count));
  RANK_CHECK(count == ctx.nranks);

  ncclComm_t child = nullptr;
  r = ncclCommSplit(comm, 0, ctx.rank, &child, nullptr);  // inherits non-blocking
  RANK_CHECK(r == ncclInProgress || r == ncclSuccess);
  RANK_CHECK(waitAsync(comm) == ncclSuccess);
  RANK_CHECK(child != nullptr);
  RANK_CHECK(waitAsync(child) == ncclSuccess);

  for (ncclComm_t c : {child, comm}) {
    r = ncclCommFinalize(c);
    RANK_CHECK(r == ncclInProgress || r == ncclSuccess);
    RANK_CHECK(waitAsync(c) == ncclSuccess);
    RANK_NCCL(ncclCommDestroy(c));
  }
  return 0;
}

TEST(Init, NonBlockingPolledFromAnotherThread) {
  auto r = runRanks("init_nonblocking", 4);
  EXPECT_TRUE(r.allOk()) << r.describe();
}

// The caller's config struct as an older or newer header lays it out.
THESEUS_RANK_FN(init_config_size) {
  const size_t size = std::stoul(ctx.args.at(0));
  const unsigned version = static_cast<unsigned>(std::stoul(ctx.args.at(1)));
  std::vector<char> raw(size + 64, '\x5a');
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.size = size;
  cfg.version = version;
  cfg.blocking = 1;
  cfg.maxCTAs = 8;
  memcpy(raw.data(), &cfg, std::min(size, sizeof(cfg)));
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRankConfig(&comm, ctx.nranks, ctx.id, ctx.rank, reinterpret_cast<ncclConfig_t*>(raw.data())));
  for (size_t i = size; i < raw.size(); ++i) RANK_CHECK(raw[i] == '\x5a');  // nothing written past it
  RANK_NCCL(ncclCommDestroy(comm));
  return 0;
}

TEST(Init, ConfigStructSizesFromOlderAndNewerHeaders) {
  for (auto [size, version] : {std::pair{48, 22602}, std::pair{72, 22703}, std::pair{80, 22809},
                               std::pair{112, 23007}}) {
    SpawnOptions o;
    o.args = {std::to_string(size), std::to_string(version)};
    auto r = runRanks("init_config_size", 2, o);
    EXPECT_TRUE(r.allOk()) << size << " bytes: " << r.describe();
  }
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclConfig_t bad = NCCL_CONFIG_INITIALIZER;
  bad.magic = 0xdeadbeef;
  ncclComm_t comm = reinterpret_cast<ncclComm_t>(0x1);
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 1, id, 0, &bad), ncclInvalidArgument);
  EXPECT_EQ(comm, nullptr);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("NCCL_CONFIG_INITIALIZER"), std::string::npos);
  ncclConfig_t invalid = NCCL_CONFIG_INITIALIZER;
  invalid.blocking = 3;
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 1, id, 0, &invalid), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("config.blocking=3"), std::string::npos);
  ncclConfig_t fine = NCCL_CONFIG_INITIALIZER;
  ASSERT_EQ(ncclCommInitRankConfig(&comm, 1, id, 0, &fine), ncclSuccess) << "a rejected call leaves the id usable";
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}
