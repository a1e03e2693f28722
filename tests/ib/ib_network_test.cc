// Theseus' IB network end to end over the libibverbs test double (tests/ib_double): real
// processes, real QPs of the double moving bytes between them, the net-plugin backend on top.
// Shared memory is off (NCCL_SHM_DISABLE=1), so every pair of ranks goes through IB; each rank
// is its own "host" to the double (THESEUS_FAKE_IBV_HOST), so LIDs and GIDs differ per rank.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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
#include "test_files.h"
#include "theseus/theseus.h"

using theseus::test::readFile;
using theseus::test::runRanks;
using theseus::test::SpawnOptions;

namespace {

bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// A fault through one of the test double's files: writes <dir>/<file> once rank 0 marked
// <dir>/started and, with `heal`, removes it once rank 0 marked <dir>/heal (each wait at most 2 min).
std::thread markedFault(const std::string& dir, const std::string& file, const std::string& content, bool heal) {
  return std::thread([dir, file, content, heal] {
    auto waitFor = [&](const std::string& mark) {
      for (int i = 0; i < 12000 && !exists(dir + "/" + mark); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    };
    waitFor("started");
    std::ofstream(dir + "/" + file) << content;
    if (!heal) return;
    waitFor("heal");
    unlink((dir + "/" + file).c_str());
  });
}

// A fresh directory for the double's sockets and fault files, and the ranks' logs.
class Ib : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/theseus-ib-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (!HasFailure() && getenv("THESEUS_TEST_KEEP_DIRS") == nullptr) (void)system(("rm -rf " + dir_).c_str());
    else fprintf(stderr, "kept %s\n", dir_.c_str());
  }
  SpawnOptions options() const {
    SpawnOptions o;
    o.timeoutSec = 180;
    o.env["NCCL_IBVERBS_LIB"] = THESEUS_FAKE_IBVERBS;
    o.env["THESEUS_FAKE_IBV_DIR"] = dir_;
    o.env["NCCL_SHM_DISABLE"] = "1";
    o.env["NCCL_DEBUG"] = "INFO";
    o.env["NCCL_DEBUG_SUBSYS"] = "INIT,NET";
    o.env["NCCL_DEBUG_FILE"] = dir_ + "/log.%p";
    o.args = {dir_};
    return o;
  }
  // Takes host 1's port of `device` down once rank 0 marked <dir>/started, and with `heal` up
  // again once it marked <dir>/heal (the test double's port file).
  std::thread portDown(bool heal, const std::string& device = "fake_mlx5_0") const {
    return markedFault(dir_, "down-host1-" + device + "-1", "down\n", heal);
  }
  // ib_survives on 3 ranks with `args` while host 1's port of `device` goes down (and with `heal`
  // up again): every rank must pass.
  void survivesPortDown(SpawnOptions o, const std::vector<std::string>& args, bool heal,
                        const std::string& device = "fake_mlx5_0") {
    o.args.insert(o.args.end(), args.begin(), args.end());
    std::thread downer = portDown(heal, device);
    auto r = runRanks("ib_survives", 3, o);
    downer.join();
    EXPECT_TRUE(r.allOk()) << r.describe();
  }
  std::string dir_;
};

// Every rank is a host of its own to the double.
void ownHost(const theseus::test::RankContext& ctx) {
  setenv("THESEUS_FAKE_IBV_HOST", ("host" + std::to_string(ctx.rank)).c_str(), 1);
}

std::string myLog(const std::string& dir) { return readFile(dir + "/log." + std::to_string(getpid())); }

// Large allreduce (4 MiB + a tail), allgather, broadcast (largeCollectivesCheck), then a seeded mix of
// checked collectives.
int collectives(ncclComm_t comm, const theseus::test::RankContext& ctx, int mix) {
  const std::string wrong = theseus::test::largeCollectivesCheck(comm, ctx.rank, ctx.nranks, 1);
  if (!wrong.empty()) {
    fprintf(stderr, "[rank %d] %s\n", ctx.rank, wrong.c_str());
    return 1;
  }
  std::mt19937_64 gen(1234);
  std::vector<float> x(size_t{1} << 15), y(size_t{1} << 15);
  for (int i = 0; i < mix; ++i) {
    bool wrong = false;
    RANK_NCCL(theseus::test::checkedCollective(comm, ctx.rank, ctx.nranks, gen, x, y, &wrong));
    RANK_CHECK(!wrong);
  }
  return 0;
}

}  // namespace

// args: dir, mix count, then texts this rank's log must show.
THESEUS_RANK_FN(ib_collectives) {
  ownHost(ctx);
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  if (int rc = collectives(comm, ctx, std::stoi(ctx.args.at(1)))) return rc;
  RANK_NCCL(ncclCommDestroy(comm));
  const std::string log = myLog(ctx.args.at(0));
  for (size_t k = 2; k < ctx.args.size(); ++k) {
    if (log.find(ctx.args[k]) == std::string::npos) {
      fprintf(stderr, "[rank %d] the log does not show \"%s\":\n%s\n", ctx.rank, ctx.args[k].c_str(), log.c_str());
      return 1;
    }
  }
  return 0;
}

// Runs checked collectives until one fails (at most 60 s): a fault the test injects must end the
// job on every rank with an error, never a wrong result or a hang. Rank 0 marks <dir>/started after
// 20 collectives. The error text goes to <dir>/error.<rank>. args: dir, then "fault=<rank>:<spec>".
THESEUS_RANK_FN(ib_until_error) {
  ownHost(ctx);
  const std::string dir = ctx.args.at(0);
  for (size_t k = 1; k < ctx.args.size(); ++k) {
    const std::string& a = ctx.args[k];
    if (a.rfind("fault=", 0) == 0 && std::stoi(a.substr(6)) == ctx.rank)
      setenv("THESEUS_FAKE_IBV_FAULT", a.substr(a.find(':') + 1).c_str(), 1);
  }
  int victim = -1;
  for (size_t k = 1; k < ctx.args.size(); ++k)
    if (ctx.args[k].rfind("kill=", 0) == 0) victim = std::stoi(ctx.args[k].substr(5));
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  std::mt19937_64 gen(99);
  std::vector<float> x(size_t{1} << 15), y(size_t{1} << 15);
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (long i = 0; std::chrono::steady_clock::now() < end; ++i) {
    if (ctx.rank == 0 && i == 20) std::ofstream(dir + "/started") << "1\n";
    if (ctx.rank == victim && i == 30) raise(SIGKILL);
    bool wrong = false;
    ncclResult_t r = theseus::test::checkedCollective(comm, ctx.rank, ctx.nranks, gen, x, y, &wrong);
    RANK_CHECK(!wrong);
    if (r != ncclSuccess) {
      std::ofstream(dir + "/error." + std::to_string(ctx.rank)) << ncclGetLastError(comm) << "\n";
      ncclCommAbort(comm);
      return 0;
    }
  }
  fprintf(stderr, "[rank %d] no error within 60 s\n", ctx.rank);
  return 1;
}

// A fault mid-job that the failover absorbs: `count` checked collectives must all succeed (rank 0
// marks <dir>/started after 20, when the test takes a port down); then rank `moved` (-1: any rank)
// must count a failover in rank.<r>.net_failovers, and the rank's log must show `text` (and the
// texts of "log=<text>" arguments after it, in that order; no rank's log may show a "nolog=<text>").
// args: dir, count, moved, text, then "fault=<rank>:<spec>", "heal=<i>" (rank 0 marks <dir>/heal
// at collective i, when the test brings the port back; every rank pauses there so the move back
// has time to happen), "log=<text>", "nolog=<text>" and "away" (rank `moved` sees rank.<r>.net_away
// at 1 or more before the heal, and back at 0 at the end).
THESEUS_RANK_FN(ib_survives) {
  ownHost(ctx);
  const std::string dir = ctx.args.at(0);
  const int count = std::stoi(ctx.args.at(1)), moved = std::stoi(ctx.args.at(2));
  int heal = -1;
  std::vector<std::string> texts = {ctx.args.at(3)}, absent;
  bool away = false;
  // Polls rank.<moved>.net_away (published by the epoch thread) for up to 5 s until `ok` holds.
  auto awayIs = [&](ncclComm_t comm, bool (*ok)(double)) {
    const std::string name = "rank." + std::to_string(ctx.rank) + ".net_away";
    double value = -1;
    int isSet = 0;
    for (int i = 0; i < 250; ++i) {
      if (theseusGetAttribute(comm, name.c_str(), &value, &isSet) == ncclSuccess && isSet && ok(value)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    fprintf(stderr, "[rank %d] %s stayed at %g\n", ctx.rank, name.c_str(), value);
    return false;
  };
  for (size_t k = 4; k < ctx.args.size(); ++k) {
    const std::string& a = ctx.args[k];
    if (a.rfind("log=", 0) == 0) texts.push_back(a.substr(4));
    if (a.rfind("nolog=", 0) == 0) absent.push_back(a.substr(6));
    if (a == "away") away = true;
    if (a.rfind("fault=", 0) == 0 && std::stoi(a.substr(6)) == ctx.rank)
      setenv("THESEUS_FAKE_IBV_FAULT", a.substr(a.find(':') + 1).c_str(), 1);
    if (a.rfind("heal=", 0) == 0) heal = std::stoi(a.substr(5));
  }
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  std::mt19937_64 gen(99);
  std::vector<float> x(size_t{1} << 15), y(size_t{1} << 15);
  std::vector<double> us;
  for (int i = 0; i < count; ++i) {
    if (ctx.rank == 0 && i == 20) std::ofstream(dir + "/started") << "1\n";
    if (i == 20) std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the port goes down meanwhile
    if (away && ctx.rank == moved && i == heal) RANK_CHECK(awayIs(comm, [](double v) { return v >= 1; }));
    if (ctx.rank == 0 && i == heal) std::ofstream(dir + "/heal") << "1\n";
    if (i == heal) std::this_thread::sleep_for(std::chrono::milliseconds(800));  // up again, past the backoff
    bool wrong = false;
    auto t0 = std::chrono::steady_clock::now();
    RANK_NCCL(theseus::test::checkedCollective(comm, ctx.rank, ctx.nranks, gen, x, y, &wrong));
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    RANK_CHECK(!wrong);
  }
  // What the failover cost: the slowest collective against the median (printed for the notes).
  std::vector<double> sorted = us;
  std::sort(sorted.begin(), sorted.end());
  const size_t slowest = static_cast<size_t>(std::max_element(us.begin(), us.end()) - us.begin());
  fprintf(stderr, "[rank %d] %d collectives: median %.0f us, 99th %.0f us, slowest %.0f us (collective %zu)\n",
          ctx.rank, count, sorted[sorted.size() / 2], sorted[sorted.size() * 99 / 100], sorted.back(), slowest);
  if (away && ctx.rank == moved) RANK_CHECK(awayIs(comm, [](double v) { return v == 0; }));
  if (moved == ctx.rank) {
    const std::string name = "rank." + std::to_string(ctx.rank) + ".net_failovers";
    double value = 0;
    int isSet = 0;
    for (int i = 0; i < 100 && value < 1; ++i) {
      RANK_NCCL(theseusGetAttribute(comm, name.c_str(), &value, &isSet));
      if (value < 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    RANK_CHECK(value >= 1);
  }
  RANK_NCCL(ncclCommDestroy(comm));
  const std::string log = myLog(dir);
  if (moved >= 0 && moved == ctx.rank) {
    size_t at = 0;
    for (const std::string& text : texts) {
      at = log.find(text, at);
      if (at == std::string::npos) {
        fprintf(stderr, "[rank %d] the log does not show \"%s\" where due:\n%s\n", ctx.rank, text.c_str(), log.c_str());
        return 1;
      }
    }
  }
  for (const std::string& text : absent) {
    if (log.find(text) != std::string::npos) {
      fprintf(stderr, "[rank %d] the log shows \"%s\":\n%s\n", ctx.rank, text.c_str(), log.c_str());
      return 1;
    }
  }
  return 0;
}

// A port that degrades (the double's rate-file: its link trains down to 2.5 Gb/s and its requests
// are paced at that rate) while a JSON policy watches rank.<r>.net_rate_gbps. Each iteration is a
// checked collective, a timed 4 MiB allreduce and a small control allreduce in which rank 1 says
// whether its traffic has left its port and come back (args[2] "other_nic": net_away; "any": its
// log), so every rank moves through the phases at the same iteration:
//   healthy (20 iterations) -> rank 0 marks <dir>/started, the test degrades host 1's port ->
//   degraded until rank 1 reports the move -> 30 iterations moved -> rank 0 marks <dir>/heal,
//   the rate-file goes -> until rank 1 reports it is back home -> 30 more.
// Prints the 4 MiB allreduce's median per phase; rank 1 checks it counted no failover.
THESEUS_RANK_FN(ib_degraded) {
  ownHost(ctx);
  const std::string dir = ctx.args.at(0), mode = ctx.args.at(1);
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  auto attribute = [&](const std::string& name) {
    double value = -1;
    int isSet = 0;
    if (theseusGetAttribute(comm, name.c_str(), &value, &isSet) != ncclSuccess || !isSet) return -1.0;
    return value;
  };
  auto count = [](const std::string& text, const std::string& what) {
    int n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  // Rank 1's view: 1 while its traffic is off its port, 2 once it came back (after the heal).
  auto where = [&](bool healed) -> int {
    if (ctx.rank != 1) return 0;
    if (mode == "other_nic") {
      const double away = attribute("rank.1.net_away");
      return away >= 1 ? 1 : (healed && away == 0 ? 2 : 0);
    }
    const std::string log = myLog(dir);
    const int toTcp = count(log, "the connection moves to TCP"), back = count(log, "the connection moved back to IB");
    if (toTcp == 0) return 0;
    return healed && back >= toTcp ? 2 : (back < toTcp ? 1 : 0);
  };
  const size_t n = (size_t{4} << 20) / sizeof(float);
  std::vector<float> big(n, 1.0f), out(n);
  float *dbig = nullptr, *dout = nullptr;
  dbig = big.data();
  dout = out.data();
  std::mt19937_64 gen(7);
  std::vector<float> x(size_t{1} << 15), y(size_t{1} << 15);
  enum Phase { kHealthy, kDegraded, kMoved, kHealing, kHome, kDone };
  const char* names[] = {"healthy", "degraded, not moved yet", "moved", "healed, not back yet", "back home"};
  std::vector<double> ms[5];
  Phase phase = kHealthy;
  int inPhase = 0;
  for (int i = 0; phase != kDone; ++i) {
    RANK_CHECK(i < 5000);
    if (phase == kHealthy && inPhase == 20) {
      if (ctx.rank == 0) std::ofstream(dir + "/started") << "1\n";
      phase = kDegraded;
      inPhase = 0;
    }
    bool wrong = false;
    RANK_NCCL(theseus::test::checkedCollective(comm, ctx.rank, ctx.nranks, gen, x, y, &wrong));
    RANK_CHECK(!wrong);
    auto t0 = std::chrono::steady_clock::now();
    RANK_NCCL(ncclAllReduce(dbig, dout, n, ncclFloat, ncclSum, comm, nullptr));
    ms[phase].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    RANK_CHECK(out[0] == static_cast<float>(ctx.nranks) && out[n - 1] == static_cast<float>(ctx.nranks));
    int mine = where(phase >= kHealing), seen = 0;
    RANK_NCCL(ncclAllReduce(&mine, &seen, 1, ncclInt, ncclMax, comm, nullptr));
    ++inPhase;
    if (phase == kDegraded && seen == 1) phase = kMoved, inPhase = 0;
    else if (phase == kMoved && inPhase == 30) {
      if (ctx.rank == 0) std::ofstream(dir + "/heal") << "1\n";
      phase = kHealing;
      inPhase = 0;
    } else if (phase == kHealing && seen == 2) phase = kHome, inPhase = 0;
    else if (phase == kHome && inPhase == 30) phase = kDone;
  }
  std::string summary;
  for (int p = 0; p < 5; ++p) {
    std::vector<double> v = ms[p];
    std::sort(v.begin(), v.end());
    char line[160];
    snprintf(line, sizeof(line), "%s%s: %zu x, median %.1f ms", p ? "; " : "", names[p], v.size(),
             v.empty() ? 0.0 : v[v.size() / 2]);
    summary += line;
  }
  fprintf(stderr, "[rank %d] 4 MiB allreduce: %s\n", ctx.rank, summary.c_str());
  if (ctx.rank == 1) RANK_CHECK(attribute("rank.1.net_failovers") == 0);  // planned moves are no failures
  RANK_NCCL(ncclCommDestroy(comm));
  if (ctx.rank == 1) {
    const std::string log = myLog(dir);
    const std::string moved = mode == "other_nic" ? "to another HCA: the policy moves traffic off its own port"
                                                  : "the policy moves traffic off its own port fake_mlx5_0:1; the "
                                                    "connection moves to TCP";
    for (const std::string& text : {std::string("runs at 2500 Mb/s, below its 200000 Mb/s at start"), moved,
                                    std::string("the connection moved back to IB")}) {
      if (log.find(text) == std::string::npos) {
        fprintf(stderr, "[rank 1] the log does not show \"%s\":\n%s\n", text.c_str(), log.c_str());
        return 1;
      }
    }
  }
  return 0;
}

// Collectives on buffers the ranks registered with ncclCommRegister (registeredCollectivesCheck):
// their pieces go zero-copy, the network sending from the user's memory with the buffer's own MR;
// then the buffers are deregistered and freed and unregistered collectives still run right.
// args: dir, then texts the log must show.
THESEUS_RANK_FN(ib_registered) {
  ownHost(ctx);
  const std::string dir = ctx.args.at(0);
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  const int n = ctx.nranks;
  const std::string wrongRegistered = theseus::test::registeredCollectivesCheck(comm, ctx.rank, n);
  if (!wrongRegistered.empty()) {
    fprintf(stderr, "[rank %d] %s\n", ctx.rank, wrongRegistered.c_str());
    return 1;
  }
  const std::string wrong = theseus::test::largeCollectivesCheck(comm, ctx.rank, n, 1);
  if (!wrong.empty()) {
    fprintf(stderr, "[rank %d] after deregistering: %s\n", ctx.rank, wrong.c_str());
    return 1;
  }
  RANK_NCCL(ncclCommDestroy(comm));
  const std::string log = myLog(dir);
  for (size_t k = 1; k < ctx.args.size(); ++k) {
    if (log.find(ctx.args[k]) == std::string::npos) {
      fprintf(stderr, "[rank %d] the log does not show \"%s\":\n%s\n", ctx.rank, ctx.args[k].c_str(), log.c_str());
      return 1;
    }
  }
  return 0;
}

// NCCL_NET=IB where the double has no device: init fails and says why.
THESEUS_RANK_FN(ib_required) {
  ownHost(ctx);
  ncclComm_t comm;
  ncclResult_t r = ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank);
  RANK_CHECK(r == ncclInvalidUsage);
  const std::string last = ncclGetLastError(nullptr);
  RANK_CHECK(last.find("NCCL_NET/netName 'IB': the IB network is not available here") != std::string::npos);
  return 0;
}

TEST_F(Ib, CollectivesRunOverIbWithEverySchedule) {
  for (const char* schedule : {"ring", "double_binary_tree", "recursive_doubling", "halving_doubling", "direct"}) {
    SpawnOptions o = options();
    o.env["THESEUS_SCHEDULE"] = schedule;
    o.args.insert(o.args.end(), {"20", "through network 'IB'", "IB: network device 0: fake_mlx5_0:1 (IB, LID"});
    auto r = runRanks("ib_collectives", 4, o);
    EXPECT_TRUE(r.allOk()) << "schedule " << schedule << ": " << r.describe();
  }
}

// RoCE (GID addressing, RoCE v2 IPv4-mapped GID by default) with messages split over 4 QPs.
TEST_F(Ib, RoceWithSeveralQpsPerConnection) {
  SpawnOptions o = options();
  o.env["THESEUS_FAKE_IBV_DEVICES"] = "roce0:link=eth";
  o.env["NCCL_IB_QPS_PER_CONNECTION"] = "4";
  o.args.insert(o.args.end(), {"50", "through network 'IB'", "roce0:1 (RoCE, GID index 3"});
  auto r = runRanks("ib_collectives", 3, o);
  EXPECT_TRUE(r.allOk()) << r.describe();
}

// NCCL_IB_HCA picks the HCA: with two, "=mlx5_1" leaves mlx5_0 out.
TEST_F(Ib, NcclIbHcaChoosesTheDevice) {
  SpawnOptions o = options();
  o.env["THESEUS_FAKE_IBV_DEVICES"] = "mlx5_0,mlx5_1";
  o.env["NCCL_IB_HCA"] = "=mlx5_1";
  o.args.insert(o.args.end(), {"5", "IB: mlx5_0:1 left out by NCCL_IB_HCA==mlx5_1", "network device 0: mlx5_1:1",
                               "through network 'IB' device 0 (mlx5_1 port 1"});
  auto r = runRanks("ib_collectives", 2, o);
  EXPECT_TRUE(r.allOk()) << r.describe();
}

TEST_F(Ib, NcclNetIbWithoutADeviceFailsInit) {
  SpawnOptions o = options();
  o.env["THESEUS_FAKE_IBV_DEVICES"] = "";
  o.env["NCCL_NET"] = "IB";
  auto r = runRanks("ib_required", 2, o);
  EXPECT_TRUE(r.allOk()) << r.describe();
}

// Without NCCL_NET, no device means TCP: the job runs and the log says why IB is not used.
TEST_F(Ib, NoDeviceFallsBackToSockets) {
  SpawnOptions o = options();
  o.env["THESEUS_FAKE_IBV_DEVICES"] = "";
  o.args.insert(o.args.end(), {"5", "IB: not used: no verbs devices"});
  auto r = runRanks("ib_collectives", 2, o);
  EXPECT_TRUE(r.allOk()) << r.describe();
}

// A port that goes down mid-job. With the failover (the default) the job goes on over TCP and
// every result is right; the rank whose port went down counts the move in rank.<r>.net_failovers.
TEST_F(Ib, APortDownMidJobMovesTheConnectionsToTcp) {
  survivesPortDown(options(), {"400", "1", "the connection moves to TCP"}, false);
}

// The port comes back: the connections move back to IB (after the 0.5 s backoff), still with every
// result right, and the failover counts stay.
TEST_F(Ib, APortThatComesBackMovesTheConnectionsBack) {
  survivesPortDown(options(), {"600", "1", "the connection moved back to IB", "heal=200"}, true);
}

// Two HCAs per host (rank 1 sets up on fake_mlx5_1, the local rank's choice): its port goes down
// and its connections move to the host's other HCA after a short TCP interlude, then back to their
// own port once it is up again; every result right all along.
TEST_F(Ib, APortDownMovesTheConnectionsToAnotherHcaAndBack) {
  SpawnOptions o = options();
  o.env["THESEUS_FAKE_IBV_DEVICES"] = "fake_mlx5_0,fake_mlx5_1";
  survivesPortDown(o,
                   {"600", "1", "the connection moves to TCP", "heal=200", "log=fake_mlx5_1:1 -> fake_mlx5_0:1",
                    "log=moves to another HCA", "log=the connection moved back to IB",
                    "log=fake_mlx5_0:1 -> fake_mlx5_1:1", "log=moves back to its own port",
                    "log=the connection moved back to IB", "away"},
                   true, "fake_mlx5_1");
}

// A port that degrades without failing: the policy (a "nics" rule on rank.<r>.net_rate_gbps)
// moves its traffic at an epoch boundary, here to the host's other HCA ("other_nic") or, with one
// HCA per host, to TCP ("any"), and back once the rate is whole again. Every result right, the
// decision logs of all ranks identical and showing the NIC choice, no failover counted.
void degradedPortMoves(const std::string& dir, SpawnOptions o, const std::string& move) {
  const std::string policy = dir + "/policy.json";
  std::ofstream(policy) << R"({"version": 1, "name": "nic-health", "rules": [],
    "nics": [{"name": "degraded port", "move": ")"
                        << move << R"J(", "when": "rank.$r.net_rate_gbps < 0.5 * max(rank.*.net_rate_gbps)"}]})J";
  o.env["THESEUS_POLICY"] = policy;
  o.env["THESEUS_POLICY_INTERVAL_MS"] = "50";
  o.env["THESEUS_ATTRS_INTERVAL_MS"] = "50";
  o.env["THESEUS_DECISION_LOG"] = dir + "/decisions.%r";
  o.env["NCCL_DEBUG_SUBSYS"] = "INIT,NET,POLICY";
  o.args.push_back(move);
  const std::string device = move == "other_nic" ? "fake_mlx5_1" : "fake_mlx5_0";
  std::thread degrade = markedFault(dir, "rate-host1-" + device + "-1", "2500\n", true);
  auto r = runRanks("ib_degraded", 3, o);
  if (!exists(dir + "/heal")) std::ofstream(dir + "/heal") << "1\n";  // let the thread go
  if (!exists(dir + "/started")) std::ofstream(dir + "/started") << "1\n";
  degrade.join();
  ASSERT_TRUE(r.allOk()) << r.describe();
  const std::string log0 = readFile(dir + "/decisions.0");
  EXPECT_NE(log0.find(R"("nics":[{"move":")" + move + R"(","rank":1,"why":"nic rule 0 'degraded port'"}])"),
            std::string::npos)
      << log0;
  EXPECT_EQ(readFile(dir + "/decisions.1"), log0);
  EXPECT_EQ(readFile(dir + "/decisions.2"), log0);
}

TEST_F(Ib, APolicyMovesADegradedPortsTrafficToAnotherHcaAndBack) {
  SpawnOptions o = options();
  o.env["THESEUS_FAKE_IBV_DEVICES"] = "fake_mlx5_0,fake_mlx5_1";
  degradedPortMoves(dir_, o, "other_nic");
}

TEST_F(Ib, APolicyMovesADegradedPortsTrafficToTcpAndBack) { degradedPortMoves(dir_, options(), "any"); }

// The device executor's interpreter (emulated) with every rank a host of its own: its FIFOs to the
// other ranks are proxied over IB (transport/fifo_proxy.h), every schedule, results checked.
TEST_F(Ib, TheDeviceExecutorReachesOtherHostsThroughTheFifoProxy) {
  for (const char* schedule : {"ring", "double_binary_tree", "direct"}) {
    SpawnOptions o = options();
    o.env["THESEUS_SCHEDULE"] = schedule;
    o.env["THESEUS_DEVICE_EXECUTOR"] = "emulate";
    o.env["THESEUS_TEST_HOST_PER_RANK"] = "1";
    o.args.insert(o.args.end(), {"10", "through network 'IB'", "through a proxy"});
    auto r = runRanks("ib_collectives", 3, o);
    EXPECT_TRUE(r.allOk()) << "schedule " << schedule << ": " << r.describe();
  }
}

// Registered buffers go zero-copy over IB, with every schedule, RoCE and several QPs included;
// with THESEUS_NET_ZERO_COPY=0 the same runs copy (and say nothing about zero-copy).
TEST_F(Ib, RegisteredBuffersGoZeroCopy) {
  for (const char* schedule : {"ring", "recursive_doubling", "direct"}) {
    SpawnOptions o = options();
    o.env["THESEUS_SCHEDULE"] = schedule;
    o.env["NCCL_DEBUG_SUBSYS"] = "INIT,NET,REG";
    o.args.push_back("registered buffer goes to rank");
    auto r = runRanks("ib_registered", 3, o);
    EXPECT_TRUE(r.allOk()) << "schedule " << schedule << ": " << r.describe();
  }
  SpawnOptions o = options();
  o.env["THESEUS_FAKE_IBV_DEVICES"] = "roce0:link=eth";
  o.env["NCCL_IB_QPS_PER_CONNECTION"] = "3";
  o.env["NCCL_DEBUG_SUBSYS"] = "INIT,NET,REG";
  o.args.push_back("zero-copy");
  auto r = runRanks("ib_registered", 4, o);
  EXPECT_TRUE(r.allOk()) << r.describe();
  o = options();
  o.env["THESEUS_NET_ZERO_COPY"] = "0";
  r = runRanks("ib_registered", 2, o);
  EXPECT_TRUE(r.allOk()) << r.describe();
}

// With THESEUS_IB_FAILOVER_HCA=0 the connections stay on TCP until their own port is back.
TEST_F(Ib, WithoutHcaFailoverTheConnectionsWaitOnTcp) {
  SpawnOptions o = options();
  o.env["THESEUS_FAKE_IBV_DEVICES"] = "fake_mlx5_0,fake_mlx5_1";
  o.env["THESEUS_IB_FAILOVER_HCA"] = "0";
  survivesPortDown(o, {"400", "1", "the connection moves to TCP", "nolog=moves to another HCA"}, false, "fake_mlx5_1");
}

// Without the failover (THESEUS_IB_FAILOVER=0) the same ends the job on every rank with an error
// (no hang, no wrong result), and the rank whose port went down names it (the port down, or the
// completions it flushed, whichever it saw first).
TEST_F(Ib, APortDownWithoutFailoverFailsEveryRankCleanly) {
  SpawnOptions o = options();
  o.env["THESEUS_IB_FAILOVER"] = "0";
  std::thread downer = portDown(false);
  auto r = runRanks("ib_until_error", 3, o);
  downer.join();
  EXPECT_TRUE(r.allOk()) << r.describe();
  EXPECT_NE(readFile(dir_ + "/error.1").find("fake_mlx5_0:1"), std::string::npos) << readFile(dir_ + "/error.1");
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_TRUE(exists(dir_ + "/error." + std::to_string(rank))) << rank;
    fprintf(stderr, "rank %d: %s", rank, readFile(dir_ + "/error." + std::to_string(rank)).c_str());
  }
}

// Completion errors on one rank — its QP to the error state (a local fatal error), a write the peer
// refuses (remote access error): the connections move to TCP and the job's results stay right.
TEST_F(Ib, CompletionErrorsMoveTheConnectionToTcp) {
  for (const char* fault : {"qp_error_after=300", "rem_access_after=300"}) {
    SpawnOptions o = options();
    o.args.insert(o.args.end(), {"400", "-1", "the connection moves to TCP", std::string("fault=1:") + fault});
    auto r = runRanks("ib_survives", 3, o);
    EXPECT_TRUE(r.allOk()) << fault << ": " << r.describe();
    (void)system(("rm -f " + dir_ + "/started").c_str());
  }
}

// A local QP error on the sender at many points of the job, the failover off: every rank fails
// within seconds, never at the stall timeout. (A send that fails after its operation moved on is
// what transport/async_failure.h is for; seen with a protocol bug since fixed, it is not produced
// on purpose here: the double's faults surface while the operation still waits.)
TEST_F(Ib, ALocalSendErrorAnywhereEndsTheJobAtOnce) {
  for (int n : {31, 77, 150, 233, 401}) {
    SpawnOptions o = options();
    o.env["THESEUS_IB_FAILOVER"] = "0";
    o.env["THESEUS_STALL_TIMEOUT_MS"] = "120000";
    o.args.push_back("fault=1:qp_error_after=" + std::to_string(n));
    auto r = runRanks("ib_until_error", 3, o);
    EXPECT_TRUE(r.allOk()) << n << ": " << r.describe();
    EXPECT_LT(r.seconds, 20.0) << n;
    for (int rank = 0; rank < 3; ++rank)
      EXPECT_EQ(readFile(dir_ + "/error." + std::to_string(rank)).find("made no progress"), std::string::npos) << n;
    (void)system(("rm -f " + dir_ + "/error.* " + dir_ + "/started").c_str());
  }
}

// With the failover off, they end the job with the status named.
TEST_F(Ib, CompletionErrorsWithoutFailoverAreNamed) {
  for (const char* fault : {"qp_error_after=300", "rem_access_after=300"}) {
    SpawnOptions o = options();
    o.env["THESEUS_IB_FAILOVER"] = "0";
    o.args.push_back(std::string("fault=1:") + fault);
    auto r = runRanks("ib_until_error", 3, o);
    EXPECT_TRUE(r.allOk()) << fault << ": " << r.describe();
    const std::string err = readFile(dir_ + "/error.1");
    EXPECT_NE(err.find("completed with status"), std::string::npos) << fault << ": " << err;
    fprintf(stderr, "%s: rank 1: %s", fault, err.c_str());
    (void)system(("rm -f " + dir_ + "/error.* " + dir_ + "/started").c_str());
  }
}

// A rank killed mid-job: the failover does not hide it; the others fail (naming it), no hang.
TEST_F(Ib, APeerKilledMidJobFailsTheOthersCleanly) {
  SpawnOptions o = options();
  o.args.push_back("kill=2");
  auto r = runRanks("ib_until_error", 3, o);
  ASSERT_EQ(r.exitCodes.size(), 3u);
  for (size_t k = 0; k < r.exitCodes.size(); ++k)
    EXPECT_EQ(r.exitCodes[k], r.ranks[k] == 2 ? 128 + SIGKILL : 0) << r.describe();
  for (int rank = 0; rank < 2; ++rank) {
    const std::string err = readFile(dir_ + "/error." + std::to_string(rank));
    EXPECT_NE(err.find("rank 2"), std::string::npos) << rank << ": " << err;
    fprintf(stderr, "rank %d: %s", rank, err.c_str());
  }
}
