// theseus-run: environment, exit codes, a failing rank stopping the others,
// crashes, timeouts, SIGTERM escalation, signal forwarding, output prefixing
// and per-rank files, grandchildren, usage errors, and (as root) ranks in
// separate network namespaces talking over real TCP, with cleanup.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <sstream>

#include "proc_runner.h"

namespace theseus::test {
namespace {

std::string diag(const ProcResult& r) { return "exit " + std::to_string(r.exitCode) + "\n" + r.out + "\n" + r.err; }

ProcResult run(std::vector<std::string> launcherArgs, std::vector<std::string> probeArgs, double timeout = 60,
               std::map<std::string, std::string> env = {}) {
  std::vector<std::string> argv = {THESEUS_RUN};
  argv.insert(argv.end(), launcherArgs.begin(), launcherArgs.end());
  argv.push_back("--");
  argv.push_back(PROBE);
  argv.insert(argv.end(), probeArgs.begin(), probeArgs.end());
  return runProcess(argv, env, timeout);
}

std::string tempDir(const std::string& name) {
  std::string d = testing::TempDir() + "launcher_test_" + name + "_" + std::to_string(getpid());
  mkdir(d.c_str(), 0755);
  return d;
}

pid_t readPid(const std::string& path) {
  std::ifstream f(path);
  int pid = -1;
  f >> pid;
  return pid;
}

// Running (a zombie waiting for a reaper that never comes, as in some
// containers, counts as dead).
bool alive(pid_t pid) {
  if (pid <= 0 || kill(pid, 0) != 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  size_t paren = text.rfind(')');
  return paren == std::string::npos || paren + 2 >= text.size() || text[paren + 2] != 'Z';
}

// "[r] KEY=VALUE" lines -> per rank map.
std::map<int, std::map<std::string, std::string>> parseEnv(const std::string& out) {
  std::map<int, std::map<std::string, std::string>> m;
  std::istringstream in(out);
  static const std::regex kLine(R"(\[(\d+)\] (\w+)=(.*))");
  std::smatch sm;
  for (std::string line; std::getline(in, line);)
    if (std::regex_match(line, sm, kLine)) m[std::stoi(sm[1])][sm[2]] = sm[3];
  return m;
}

TEST(Launcher, SetsTheEnvironmentTorchrunAndMpirunUsersExpect) {
  ProcResult r = run({"-np", "3", "--tag-output", "-x", "PROBE_EXTRA=hello"}, {"env"});
  ASSERT_EQ(r.exitCode, 0) << diag(r);
  auto env = parseEnv(r.out);
  ASSERT_EQ(env.size(), 3u) << r.out;
  const std::string commId = env[0]["NCCL_COMM_ID"];
  EXPECT_TRUE(std::regex_match(commId, std::regex(R"(127\.0\.0\.1:[0-9]+)"))) << commId;
  for (int rank = 0; rank < 3; ++rank) {
    auto& e = env[rank];
    EXPECT_EQ(e["RANK"], std::to_string(rank));
    EXPECT_EQ(e["THESEUS_RANK"], std::to_string(rank));
    EXPECT_EQ(e["LOCAL_RANK"], std::to_string(rank));
    EXPECT_EQ(e["THESEUS_LOCAL_RANK"], std::to_string(rank));
    EXPECT_EQ(e["WORLD_SIZE"], "3");
    EXPECT_EQ(e["THESEUS_NRANKS"], "3");
    EXPECT_EQ(e["LOCAL_WORLD_SIZE"], "3");
    EXPECT_EQ(e["THESEUS_LOCAL_SIZE"], "3");
    EXPECT_EQ(e["GROUP_RANK"], "0");
    EXPECT_EQ(e["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(e["NCCL_COMM_ID"], commId) << "every rank must get the same unique id";
    EXPECT_NE(e["MASTER_PORT"], commId.substr(commId.find(':') + 1)) << "store and NCCL ports differ";
    EXPECT_EQ(e["PROBE_EXTRA"], "hello");
    EXPECT_EQ(e["OMPI_COMM_WORLD_RANK"], "<unset>");
  }
  ProcResult o = run({"-np", "2", "--tag-output", "--ompi-env"}, {"env"});
  auto oe = parseEnv(o.out);
  EXPECT_EQ(oe[1]["OMPI_COMM_WORLD_RANK"], "1");
  EXPECT_EQ(oe[1]["OMPI_COMM_WORLD_SIZE"], "2");
  EXPECT_EQ(oe[1]["OMPI_COMM_WORLD_LOCAL_RANK"], "1");
}

TEST(Launcher, HostsWithSlotsSetLocalRanks) {
  ProcResult r = run({"-np", "4", "--tag-output", "--hosts", "localhost:3,127.0.0.1:3"}, {"env"});
  ASSERT_EQ(r.exitCode, 0) << diag(r);
  auto env = parseEnv(r.out);
  const char* expectLocal[] = {"0", "1", "2", "0"};
  const char* expectGroup[] = {"0", "0", "0", "1"};
  const char* expectLocalSize[] = {"3", "3", "3", "1"};
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(env[rank]["LOCAL_RANK"], expectLocal[rank]) << rank;
    EXPECT_EQ(env[rank]["GROUP_RANK"], expectGroup[rank]) << rank;
    EXPECT_EQ(env[rank]["LOCAL_WORLD_SIZE"], expectLocalSize[rank]) << rank;
  }
  EXPECT_EQ(env[3]["THESEUS_HOST"], "127.0.0.1");
}

TEST(Launcher, PropagatesExitCodes) {
  ProcResult ok = run({"-np", "3"}, {"exit", "9", "0"});
  EXPECT_EQ(ok.exitCode, 0) << diag(ok);
  ProcResult r = run({"-np", "3"}, {"exit", "2", "7"});
  EXPECT_EQ(r.exitCode, 7) << diag(r);
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(rank 2 \(pid [0-9]+, host localhost\) exited with status 7)")))
      << r.err;
}

TEST(Launcher, AFailingRankStopsTheOthers) {
  std::string dir = tempDir("fail");
  ProcResult r = run({"-np", "4"}, {"fail", "1", "3", dir}, 30);
  EXPECT_EQ(r.exitCode, 3) << diag(r);
  EXPECT_LT(r.seconds, 10) << "the sleeping ranks must be killed, not waited for";
  EXPECT_NE(r.err.find("rank 1 (pid"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("exited with status 3; stopping ranks 0,2,3"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 0: was killed by signal 15"), std::string::npos) << r.err;
  for (int rank : {0, 2, 3}) {
    pid_t pid = readPid(dir + "/pid." + std::to_string(rank));
    EXPECT_GT(pid, 0);
    EXPECT_FALSE(alive(pid)) << "rank " << rank << " still running";
  }
}

TEST(Launcher, ReportsACrash) {
  std::string dir = tempDir("crash");
  ProcResult r = run({"-np", "2"}, {"crash", "0", dir}, 30);
  EXPECT_EQ(r.exitCode, 128 + SIGSEGV) << diag(r);
  EXPECT_NE(r.err.find("rank 0 (pid"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("was killed by signal 11"), std::string::npos) << r.err;
  EXPECT_FALSE(alive(readPid(dir + "/pid.1")));
}

TEST(Launcher, TimeoutKillsEverybody) {
  std::string dir = tempDir("timeout");
  ProcResult r = run({"-np", "3", "--timeout", "1"}, {"sleep", "60", dir}, 30);
  EXPECT_EQ(r.exitCode, 124) << diag(r);
  EXPECT_LT(r.seconds, 6);
  EXPECT_NE(r.err.find("timeout after 1 s (--timeout); stopping ranks 0,1,2"), std::string::npos) << r.err;
  for (int rank = 0; rank < 3; ++rank) EXPECT_FALSE(alive(readPid(dir + "/pid." + std::to_string(rank))));
}

TEST(Launcher, EscalatesToSigkillAfterTheGrace) {
  std::string dir = tempDir("grace");
  ProcResult r = run({"-np", "2", "--timeout", "0.5", "--kill-grace", "0.5"}, {"ignore-term", dir}, 30);
  EXPECT_EQ(r.exitCode, 124) << diag(r);
  EXPECT_LT(r.seconds, 6);
  EXPECT_NE(r.err.find("sending SIGKILL"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("was killed by signal 9"), std::string::npos) << r.err;
  for (int rank = 0; rank < 2; ++rank) EXPECT_FALSE(alive(readPid(dir + "/pid." + std::to_string(rank))));
}

TEST(Launcher, ForwardsSigtermAndSigint) {
  for (int sig : {SIGTERM, SIGINT}) {
    Proc p({THESEUS_RUN, "-np", "3", "--tag-output", "--", PROBE, "signals"});
    for (int rank = 0; rank < 3; ++rank)
      ASSERT_TRUE(p.waitForOutput("[" + std::to_string(rank) + "] rank " + std::to_string(rank) + " ready", 20));
    p.signal(sig);
    ProcResult r = p.wait(20);
    EXPECT_EQ(r.exitCode, 128 + sig) << diag(r);
    for (int rank = 0; rank < 3; ++rank)
      EXPECT_NE(r.out.find("[" + std::to_string(rank) + "] rank " + std::to_string(rank) + " got signal " +
                           std::to_string(sig)),
                std::string::npos)
          << diag(r);
    EXPECT_NE(r.err.find("forwarding it to ranks 0,1,2"), std::string::npos) << r.err;
  }
}

TEST(Launcher, PrefixesEveryLine) {
  ProcResult r = run({"-np", "3", "--tag-output"}, {"lines"});
  ASSERT_EQ(r.exitCode, 0) << diag(r);
  std::istringstream in(r.out);
  std::map<int, int> next;  // per rank, the next line number expected (order within a rank is kept)
  int partials = 0;
  static const std::regex kLine(R"(\[(\d)\] rank (\d) line (\d+))");
  std::smatch m;
  for (std::string line; std::getline(in, line);) {
    if (std::regex_match(line, m, kLine)) {
      int rank = std::stoi(m[1]);
      EXPECT_EQ(m[2], m[1]) << "a line carries its own rank's tag: " << line;
      EXPECT_EQ(std::stoi(m[3]), next[rank]++) << line;
    } else if (std::regex_match(line, std::regex(R"(\[(\d)\] rank \1 partial)"))) {
      ++partials;
    } else {
      ADD_FAILURE() << "unexpected stdout line: '" << line << "'";
    }
  }
  for (int rank = 0; rank < 3; ++rank) EXPECT_EQ(next[rank], 50);
  EXPECT_EQ(partials, 3) << "a last line without newline is still forwarded, on its own line";
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_NE(r.err.find("[" + std::to_string(rank) + "] rank " + std::to_string(rank) + " error line\n"),
              std::string::npos);
}

TEST(Launcher, WritesPerRankFiles) {
  std::string dir = tempDir("outdir") + "/nested";
  ProcResult r = run({"-np", "2", "--output-dir", dir}, {"lines"});
  ASSERT_EQ(r.exitCode, 0) << diag(r);
  EXPECT_EQ(r.out.find("line 0"), std::string::npos) << "output goes to the files only";
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream out(dir + "/rank." + std::to_string(rank) + ".out"), err(dir + "/rank." + std::to_string(rank) + ".err");
    std::stringstream o, e;
    o << out.rdbuf();
    e << err.rdbuf();
    EXPECT_EQ(countLines(o.str(), "rank " + std::to_string(rank) + " line "), 50);
    EXPECT_NE(o.str().find("rank " + std::to_string(rank) + " partial"), std::string::npos);
    EXPECT_EQ(e.str(), "rank " + std::to_string(rank) + " error line\n");
  }
}

TEST(Launcher, KillsGrandchildrenOfAFailedJob) {
  std::string dir = tempDir("grandchild");
  ProcResult r = run({"-np", "2", "--tag-output"}, {"grandchild", "1", dir}, 30);
  EXPECT_EQ(r.exitCode, 5) << diag(r);
  EXPECT_LT(r.seconds, 10);
  for (int rank = 0; rank < 2; ++rank) {
    pid_t g = readPid(dir + "/grandchild." + std::to_string(rank));
    EXPECT_GT(g, 0);
    for (int i = 0; i < 50 && alive(g); ++i) usleep(20000);  // reaped by init
    EXPECT_FALSE(alive(g)) << "grandchild of rank " << rank;
  }
}

TEST(Launcher, UsageErrors) {
  struct Case {
    std::vector<std::string> argv;
    int code;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {{THESEUS_RUN, "--", PROBE, "env"}, 2, "missing -np N"},
      {{THESEUS_RUN, "-np", "2"}, 2, "missing the program"},
      {{THESEUS_RUN, "-np", "0", "--", PROBE}, 2, "is not a rank count"},
      {{THESEUS_RUN, "-np", "2", "--tag-output", "--output-dir", "/tmp/x", "--", PROBE}, 2, "exclusive"},
      {{THESEUS_RUN, "-np", "2", "--bogus", "--", PROBE}, 2, "unknown option '--bogus'"},
      {{THESEUS_RUN, "-np", "4", "--hosts", "a:1,b:2", "--netns", "--", PROBE}, 2, "3 slots for 4 ranks"},
      {{THESEUS_RUN, "-np", "2", "--hosts", "gpu-node-17", "--", PROBE}, 1,
       "remote hosts not supported: use mpirun"},
      {{THESEUS_RUN, "-np", "2", "--", "/nonexistent/program"}, 127, "cannot execute '/nonexistent/program'"},
  };
  for (const Case& c : cases) {
    ProcResult r = runProcess(c.argv, {}, 30);
    EXPECT_EQ(r.exitCode, c.code) << c.expect << "\n" << diag(r);
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << diag(r);
  }
}

std::string netnsList() {
  ProcResult r = runProcess({"ip", "netns", "list"}, {}, 10);
  return r.out;
}

// Runs theseus-run and reports whether namespaces of *that* run (th<pid>-*)
// outlive it (other runs may be creating their own meanwhile).
ProcResult runAndCheckNetnsGone(const std::vector<std::string>& launcherArgs, const std::vector<std::string>& probe,
                                bool* leftovers) {
  std::vector<std::string> argv = {THESEUS_RUN};
  argv.insert(argv.end(), launcherArgs.begin(), launcherArgs.end());
  argv.push_back("--");
  argv.push_back(PROBE);
  argv.insert(argv.end(), probe.begin(), probe.end());
  Proc p(argv);
  const std::string prefix = "th" + std::to_string(p.pid()) + "-";
  ProcResult r = p.wait(60);
  *leftovers = netnsList().find(prefix) != std::string::npos;
  return r;
}

TEST(Launcher, NetnsRanksTalkOverRealTcpAndAreCleanedUp) {
  if (geteuid() != 0) GTEST_SKIP() << "--netns needs root";
  bool leftovers = false;
  ProcResult r = runAndCheckNetnsGone({"-np", "3", "--netns", "--tag-output"}, {"tcp"}, &leftovers);
  ASSERT_EQ(r.exitCode, 0) << diag(r);
  EXPECT_FALSE(leftovers) << "namespaces left behind:\n" << netnsList();
  EXPECT_NE(r.out.find("[1] rank 1 connected to 10.99.0.1:29500"), std::string::npos) << r.out;
  // Rank 0 sees the peers' own namespace addresses: the traffic crossed the bridge.
  EXPECT_NE(r.out.find("from 10.99.0.2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("from 10.99.0.3"), std::string::npos) << r.out;
  ProcResult env = runAndCheckNetnsGone({"-np", "4", "--netns", "--hosts", "a,b", "--tag-output"}, {"env"}, &leftovers);
  ASSERT_EQ(env.exitCode, 0) << diag(env);
  EXPECT_FALSE(leftovers) << netnsList();
  auto e = parseEnv(env.out);
  EXPECT_EQ(e[3]["THESEUS_HOST"], "b");
  EXPECT_EQ(e[3]["LOCAL_RANK"], "1");
  EXPECT_EQ(e[2]["GROUP_RANK"], "1");
  EXPECT_EQ(e[3]["NCCL_COMM_ID"], "10.99.0.1:29500");
  // Namespaces are removed when the job fails too.
  std::string dir = tempDir("netnsfail");
  ProcResult f = runAndCheckNetnsGone({"-np", "2", "--netns"}, {"fail", "0", "4", dir}, &leftovers);
  EXPECT_EQ(f.exitCode, 4) << diag(f);
  EXPECT_FALSE(leftovers) << netnsList();
}

TEST(Launcher, CleansUpStaleNamespaces) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  // A pid above any pid_max (2^22) stands for a theseus-run that died; ours
  // makes the name unique among concurrent runs of this test.
  const std::string name = "th" + std::to_string(90000000 + getpid()) + "-br";
  ASSERT_EQ(runProcess({"ip", "netns", "add", name}).exitCode, 0);
  ProcResult r = runProcess({THESEUS_RUN, "--cleanup-netns"}, {}, 30);
  EXPECT_EQ(r.exitCode, 0) << diag(r);
  EXPECT_NE(r.out.find("removed " + name), std::string::npos) << r.out;
  EXPECT_EQ(netnsList().find(name), std::string::npos);
}

}  // namespace
}  // namespace theseus::test
