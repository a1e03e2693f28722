// Soak (issue 14): THESEUS_SOAK_COLLECTIVES mixed collectives (default 10,000, the short
// sample in `make test`; `make soak` runs 1,000,000) on 4 ranks while the leader swaps to a
// random decision table every THESEUS_SOAK_SWAP_EVERY collectives (default 5). Every result is
// checked (tests/common/checked_collectives.h); all ranks' decision logs must be identical; RSS
// and open descriptors must stay flat between 10% of the run and its end (both printed); and
// nothing may be left in /dev/shm after a normal exit, after ncclCommAbort, or after a kill -9
// (a dead job's segments go at the next init).
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "checked_collectives.h"
#include "mp_test.h"
#include "test_files.h"
#include "theseus/theseus.h"

using theseus::test::readFile;
using theseus::test::runRanks;
using theseus::test::SpawnOptions;

namespace {

constexpr long kMaxRssGrowthKiB = 8 * 1024;

long statusKiB(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(field, 0) == 0) return std::atol(line.c_str() + strlen(field));
  return -1;
}

int openDescriptors() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n - 1;  // the directory stream itself
}

// /dev/shm entries made by process `pid` (Theseus' names end in "-p<pid>").
std::vector<std::string> shmOf(long pid) {
  std::vector<std::string> out;
  const std::string suffix = "-p" + std::to_string(pid);
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name.rfind("theseus-", 0) == 0 && name.size() > suffix.size() &&
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
        out.push_back(name);
    }
    closedir(d);
  }
  return out;
}

}  // namespace

// args: collectives, output directory, how it ends (destroy, abort, kill: rank 1 is killed).
THESEUS_RANK_FN(soak_rank) {
  const long total = std::stol(ctx.args.at(0));
  const std::string dir = ctx.args.at(1), ending = ctx.args.at(2);
  std::ofstream(dir + "/pid." + std::to_string(ctx.rank)) << getpid() << "\n";
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  std::mt19937_64 gen(20261202);
  std::vector<float> a(size_t{1} << 14), b(size_t{1} << 14);
  bool wrong = false;
  long rssFirst = 0, fdsFirst = 0;
  auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < total; ++i) {
    if (i == total / 10) rssFirst = statusKiB("VmRSS:"), fdsFirst = openDescriptors();
    if (ctx.rank == 0 && total >= 10 && i % (total / 10) == 0)
      fprintf(stderr, "[rank 0] %ld collectives: RSS %ld KiB, %d open descriptors\n", i, statusKiB("VmRSS:"),
              openDescriptors());
    ncclResult_t r = theseus::test::checkedCollective(comm, ctx.rank, ctx.nranks, gen, a, b, &wrong);
    if (r != ncclSuccess || wrong) {
      uint64_t seq = 0, version = 0;
      theseusGetEpochInfo(comm, &seq, &version, nullptr);
      fprintf(stderr, "[rank %d] collective %ld (seq %llu, table v%llu): %s\n", ctx.rank, i,
              static_cast<unsigned long long>(seq), static_cast<unsigned long long>(version),
              wrong ? "wrong result" : ncclGetLastError(comm));
      return 1;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const long rssLast = statusKiB("VmRSS:"), fdsLast = openDescriptors();
  uint64_t seq = 0, version = 0;
  RANK_NCCL(theseusGetEpochInfo(comm, &seq, &version, nullptr));
  std::ofstream(dir + "/stats." + std::to_string(ctx.rank))
      << total << " " << seconds << " " << rssFirst << " " << rssLast << " " << fdsFirst << " " << fdsLast << " "
      << version << "\n";
  RANK_CHECK(fdsLast <= fdsFirst);  // a transient descriptor (a connection being set up) may be open at the first sample
  RANK_CHECK(rssLast - rssFirst <= kMaxRssGrowthKiB);
  if (ending != "destroy") {
    // Abort and kill are not collective: a rank that ends at once can fail a peer still finishing
    // the last collective (its data is on the way, but the peer sees the link drop first). Wait
    // until every rank is past its last collective (a file each), so the ending is what is tested.
    std::ofstream(dir + "/done." + std::to_string(ctx.rank)) << "1\n";
    for (int r = 0; r < ctx.nranks; ++r) {
      const std::string done = dir + "/done." + std::to_string(r);
      for (int i = 0; i < 6000 && access(done.c_str(), F_OK) != 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  if (ending == "kill") {
    if (ctx.rank == 1) raise(SIGKILL);
    ncclResult_t async = ncclSuccess;
    for (int i = 0; i < 1000 && async == ncclSuccess; ++i) {
      RANK_NCCL(ncclCommGetAsyncError(comm, &async));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    RANK_CHECK(async == ncclRemoteError);
  }
  if (ending == "destroy") RANK_NCCL(ncclCommDestroy(comm));
  else RANK_NCCL(ncclCommAbort(comm));
  return 0;
}

// A small job after a kill -9: its init removes what the dead job left (ShmSegment::removeStaleNamed).
THESEUS_RANK_FN(soak_next_job) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  float x = 1;
  RANK_NCCL(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, nullptr));
  RANK_CHECK(x == ctx.nranks);
  RANK_NCCL(ncclCommDestroy(comm));
  return 0;
}

class Soak : public ::testing::TestWithParam<const char*> {};

TEST_P(Soak, MixedCollectivesWithSwapsStayCorrectAndFlat) {
  const std::string ending = GetParam();
  const char* env = getenv("THESEUS_SOAK_COLLECTIVES");
  long total = env != nullptr ? std::atol(env) : 10000;
  if (ending != "destroy") total = std::min<long>(total, 5000);  // the long run once; the endings short
  const char* swapEvery = getenv("THESEUS_SOAK_SWAP_EVERY");
  char tmpl[] = "/tmp/theseus-soak-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  SpawnOptions o;
  // About 3 ms a collective on 4 ranks sharing 2 cores: the long run needs most of the ctest limit (7200 s).
  o.timeoutSec = static_cast<int>(std::clamp<long>(total / 150, 600, 7000));
  o.args = {std::to_string(total), dir, ending};
  o.env["THESEUS_EPOCH_TEST_SWAP_EVERY"] = swapEvery != nullptr ? swapEvery : "5";
  o.env["THESEUS_EPOCH_TEST_SEED"] = "7";
  o.env["THESEUS_DECISION_LOG"] = dir + "/log.%r";
  auto r = runRanks("soak_rank", 4, o);
  for (size_t k = 0; k < r.exitCodes.size(); ++k)
    EXPECT_EQ(r.exitCodes[k], ending == "kill" && r.ranks[k] == 1 ? 128 + SIGKILL : 0) << r.describe();

  // Same decisions on every rank, and many of them.
  const std::string log0 = readFile(dir + "/log.0");
  const long lines = std::count(log0.begin(), log0.end(), '\n');
  EXPECT_GE(lines, std::min<long>(total / 50, 100)) << "the leader should have swapped tables many times";
  for (int rank = 1; rank < 4; ++rank) {
    const std::string log = readFile(dir + "/log." + std::to_string(rank));
    if (ending == "kill" && rank == 1) {
      // The file is written by the epoch thread a few times a second, so a kill -9 loses the
      // lines queued since its last write: what it did write must be the same decisions.
      const long written = std::count(log.begin(), log.end(), '\n');
      EXPECT_TRUE(log0.compare(0, log.size(), log) == 0 && (log.empty() || log.back() == '\n'))
          << "rank 1 logged other decisions before its kill";
      EXPECT_GE(written, lines / 2) << "rank 1's decision log lost more than a moment's lines at its kill";
    } else {
      EXPECT_TRUE(log == log0) << "rank " << rank << " logged other decisions";
    }
  }
  for (int rank = 0; rank < 4; ++rank) {
    long n = 0, rss0 = 0, rss1 = 0, fd0 = 0, fd1 = 0;
    double s = 0;
    uint64_t version = 0;
    std::istringstream(readFile(dir + "/stats." + std::to_string(rank))) >> n >> s >> rss0 >> rss1 >> fd0 >> fd1 >> version;
    fprintf(stderr, "soak (%s) rank %d: %ld collectives in %.1f s (%.1f us each), %ld decision lines, table v%llu; "
            "RSS %ld -> %ld KiB, open descriptors %ld -> %ld\n", ending.c_str(), rank, n, s, n ? s * 1e6 / n : 0.0,
            lines, static_cast<unsigned long long>(version), rss0, rss1, fd0, fd1);
  }

  // Nothing left in /dev/shm by the job's processes (after a kill -9, once the next job started).
  if (ending == "kill") EXPECT_RANKS_OK(runRanks("soak_next_job", 2));
  for (int rank = 0; rank < 4; ++rank) {
    const long pid = std::atol(readFile(dir + "/pid." + std::to_string(rank)).c_str());
    auto left = shmOf(pid);
    EXPECT_TRUE(left.empty()) << "rank " << rank << " (pid " << pid << ") left /dev/shm/" << (left.empty() ? "" : left[0]);
  }
  if (getenv("THESEUS_SOAK_KEEP") == nullptr) (void)system(("rm -rf " + dir).c_str());
  else fprintf(stderr, "soak: kept %s (THESEUS_SOAK_KEEP)\n", dir.c_str());
}

INSTANTIATE_TEST_SUITE_P(Endings, Soak, ::testing::Values("destroy", "abort", "kill"),
                         [](const auto& info) { return std::string(info.param); });
