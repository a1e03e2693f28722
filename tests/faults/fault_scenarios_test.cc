// Faults that are not deaths (issue 14): a rank stopped with SIGSTOP (a "hang"; over TCP it is
// also a peer that stops reading, so the others' socket buffers fill up), and a peer that
// writes garbage into its connections mid-stream. Survivors must fail within the stall timeout
// (THESEUS_STALL_TIMEOUT_MS), never hang, and say what happened: the stopped rank by name and
// "no peer is known to have failed"; the rank that sent garbage. (A network partition between
// hosts is in tests/netns.)
#include <arpa/inet.h>
#include <dirent.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "checked_collectives.h"
#include "mp_test.h"

using theseus::test::checkedCollective;
using theseus::test::runRanks;
using theseus::test::SpawnOptions;

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kVictim = 2;

double secondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// Writes random bytes into every connected TCP socket of this process.
int writeGarbageToMySockets() {
  int hit = 0;
  std::mt19937 gen(99);
  std::string junk(4096, '\0');
  for (auto& c : junk) c = static_cast<char>(gen());
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return 0;
  while (dirent* e = readdir(d)) {
    const int fd = std::atoi(e->d_name);
    sockaddr_storage peer{};
    socklen_t len = sizeof(peer);
    int type = 0;
    socklen_t tlen = sizeof(type);
    if (e->d_name[0] == '.' || getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) != 0 || type != SOCK_STREAM) continue;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0 || peer.ss_family == AF_UNIX) continue;
    if (send(fd, junk.data(), junk.size(), MSG_DONTWAIT | MSG_NOSIGNAL) > 0) ++hit;
  }
  closedir(d);
  return hit;
}

}  // namespace

// args: what rank 2 does after 50 collectives ("stop" or "garbage"), a directory for the
// survivors' rendezvous. Survivors run collectives until one fails, check the message, and
// rank 0 kills rank 2 once every survivor has checked.
THESEUS_RANK_FN(misbehaving_peer) {
  const std::string fault = ctx.args.at(0), dir = ctx.args.at(1);
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  std::mt19937_64 gen(5);
  std::vector<float> a(size_t{1} << 15), b(size_t{1} << 15);
  bool wrong = false;
  ncclResult_t r = ncclSuccess;
  auto start = Clock::now();
  for (int i = 0; r == ncclSuccess && secondsSince(start) < 60; ++i) {
    if (ctx.rank == kVictim && i == 50) {
      std::ofstream(dir + "/victim") << getpid() << "\n";
      if (fault == "stop") raise(SIGSTOP);
      fprintf(stderr, "[rank %d] wrote garbage into %d sockets\n", ctx.rank, writeGarbageToMySockets());
      for (;;) pause();
    }
    if (i == 50) start = Clock::now();
    r = checkedCollective(comm, ctx.rank, ctx.nranks, gen, a, b, &wrong);
    RANK_CHECK(!wrong);
  }
  const std::string why = ncclGetLastError(nullptr);
  const double took = secondsSince(start);
  fprintf(stderr, "[rank %d] failed after %.2f s: %s\n", ctx.rank, took, why.c_str());
  const int verdict = [&] {
    RANK_CHECK(r != ncclSuccess);
    RANK_CHECK(took < 15);
    if (fault == "stop") {
      RANK_CHECK(why.find("no progress") != std::string::npos);
      RANK_CHECK(why.find("no peer is known to have failed") != std::string::npos);
      RANK_CHECK(why.find("rank " + std::to_string(kVictim) + " (pid") != std::string::npos);
      RANK_CHECK(why.find("is stopped") != std::string::npos);
    } else {
      RANK_CHECK(why.find("rank " + std::to_string(kVictim)) != std::string::npos);
    }
    return 0;
  }();
  // Nobody aborts before every survivor has failed on its own (an abort looks like a failure to
  // the others, who would rightly name it); then rank 0 kills the victim, pass or fail.
  std::ofstream(dir + "/checked." + std::to_string(ctx.rank)) << "\n";
  for (int k = 0; k < 2000 && !(exists(dir + "/checked.0") && exists(dir + "/checked.1")); ++k)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (ctx.rank == 0) {
    std::ifstream f(dir + "/victim");
    int pid = 0;
    f >> pid;
    if (pid > 0) kill(pid, SIGKILL);
  }
  (void)ncclCommAbort(comm);
  return verdict;
}

class Misbehaving : public ::testing::TestWithParam<std::tuple<const char*, const char*>> {};

TEST_P(Misbehaving, SurvivorsFailInTimeSayingWhatHappened) {
  const auto [fault, transport] = GetParam();
  char tmpl[] = "/tmp/theseus-faults-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  SpawnOptions o;
  o.env["THESEUS_TRANSPORT"] = transport;
  o.env["THESEUS_STALL_TIMEOUT_MS"] = "2000";
  o.args = {fault, tmpl};
  o.timeoutSec = 90;
  auto r = runRanks("misbehaving_peer", 3, o);
  ASSERT_EQ(r.exitCodes.size(), 3u);
  for (size_t k = 0; k < 3; ++k)
    EXPECT_EQ(r.exitCodes[k], r.ranks[k] == kVictim ? 128 + SIGKILL : 0) << fault << " over " << transport << ": "
                                                                         << r.describe();
  (void)system((std::string("rm -rf ") + tmpl).c_str());
}

INSTANTIATE_TEST_SUITE_P(Faults, Misbehaving,
                         ::testing::Values(std::make_tuple("stop", "auto"), std::make_tuple("stop", "socket"),
                                           std::make_tuple("garbage", "socket")),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param)) + "_" + std::get<1>(info.param);
                         });
