// End to end with Theseus' libnccl (label e2e): every collective, datatype and
// reduction op checked with -c 1 on 1, 2, 3 and 4 ranks launched by
// theseus-run; several ranks per process; ranks in separate network
// namespaces; the harness under mpirun; and the corruption interposer caught
// through the real library.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "perf_matrix.h"
#include "proc_runner.h"

namespace theseus::test {
namespace {

std::string diag(const ProcResult& r) { return "exit " + std::to_string(r.exitCode) + "\n" + r.out + "\n" + r.err; }

ProcResult launch(int np, const std::string& prog, const std::vector<std::string>& args,
                  const std::vector<std::string>& launcherArgs = {}) {
  // A hung operation is aborted after 15 s (-T); the whole run is bounded by --timeout.
  std::vector<std::string> argv = {THESEUS_RUN, "-np", std::to_string(np), "--timeout", "120"};
  argv.insert(argv.end(), launcherArgs.begin(), launcherArgs.end());
  argv.push_back("--");
  argv.push_back(std::string(PERF_BIN_DIR) + "/" + prog);
  argv.insert(argv.end(), args.begin(), args.end());
  argv.insert(argv.end(), {"-T", "15"});
  return runProcess(argv, {}, 150);
}

class EveryCollective : public testing::TestWithParam<PerfCase> {};

TEST_P(EveryCollective, ChecksEveryTypeAndOp) {
  const PerfCase p = GetParam();
  // Two sizes (8 B: counts that round to 0 or 1; 1 KiB: every rank has several
  // elements), one timed iteration, rank 0's time (-a 0: one bookkeeping
  // all-reduce less per measurement), so the whole matrix stays quick.
  std::vector<std::string> args = {"-b", "8",  "-e", "1K", "-f", "128", "-n", "1",   "-w",
                                   "0", "-c", "1",  "-a", "0",  "-d",  "all"};
  if (p.usesOp) args.insert(args.end(), {"-o", "all"});
  if (p.usesRoot) args.insert(args.end(), {"-r", std::to_string(p.nranks - 1)});
  ProcResult r = launch(p.nranks, p.prog, args);
  if (std::string(p.prog) == "hypercube_perf" && (p.nranks & (p.nranks - 1)) != 0) {
    EXPECT_NE(r.exitCode, 0);
    EXPECT_NE(r.err.find("power-of-two"), std::string::npos) << diag(r);
    return;
  }
  ASSERT_EQ(r.exitCode, 0) << diag(r);
  EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos) << diag(r);
  // -o all: every (type, op) pair but fp8 avg/mulsum (NCCL has none): 68 pairs; 2 sizes.
  EXPECT_EQ(perfDataRows(r.out), (p.usesOp ? 68 : 12) * 2) << diag(r);
}

INSTANTIATE_TEST_SUITE_P(Harness, EveryCollective, testing::ValuesIn(everyPerfProgram({1, 2, 3, 4})),
                         perfCaseName);

TEST(HarnessE2E, SeveralRanksPerProcess) {
  for (const std::vector<std::string>& v : {std::vector<std::string>{"-g", "2"}, {"-t", "2"}, {"-t", "2", "-p", "1"}}) {
    std::vector<std::string> args = {"-b", "8", "-e", "64K", "-f", "8", "-n", "2", "-c", "1", "-o", "sum,avg"};
    args.insert(args.end(), v.begin(), v.end());
    ProcResult r = launch(2, "all_reduce_perf", args);
    EXPECT_EQ(r.exitCode, 0) << diag(r);
    EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos) << diag(r);
    EXPECT_NE(r.out.find("#  Rank  3 Group  0"), std::string::npos) << "4 ranks expected\n" << diag(r);
  }
}

// --in_place 0 runs only the out-of-place half (sendrecv's in-place half is a
// race by NCCL's semantics, which sanitizer runs must leave out): every row's
// in-place columns read N/A, the JSON's in_place is null, and the out-of-place
// half is still checked.
TEST(HarnessE2E, InPlaceZeroRunsOnlyTheOutOfPlaceHalf) {
  const std::string json = testing::TempDir() + "in_place_0." + std::to_string(getpid()) + ".json";
  ProcResult r = launch(2, "sendrecv_perf", {"-b", "8", "-e", "1K", "-f", "8", "-n", "1", "-c", "1", "--in_place", "0",
                                             "-J", json});
  ASSERT_EQ(r.exitCode, 0) << diag(r);
  EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos) << diag(r);
  EXPECT_EQ(perfDataRows(r.out), 3) << diag(r);
  std::istringstream lines(r.out);
  int notRun = 0;
  for (std::string line; std::getline(lines, line);)
    if (line.find("      N/A     N/A     N/A     N/A") != std::string::npos) {
      ++notRun;
      EXPECT_NE(line.find("       0      N/A"), std::string::npos) << "out-of-place checked, 0 wrong: " << line;
    }
  EXPECT_EQ(notRun, 3) << diag(r);
  std::ifstream f(json);
  std::stringstream text;
  text << f.rdbuf();
  std::remove(json.c_str());
  EXPECT_NE(text.str().find("\"in_place\": null"), std::string::npos) << text.str();
  EXPECT_EQ(text.str().find("\"in_place\": {"), std::string::npos) << text.str();
}

TEST(HarnessE2E, RanksInSeparateNetworkNamespaces) {
  if (geteuid() != 0) GTEST_SKIP() << "--netns needs root";
  ProcResult r = launch(3, "all_reduce_perf", {"-b", "8", "-e", "256K", "-f", "16", "-n", "2", "-c", "1"}, {"--netns"});
  EXPECT_EQ(r.exitCode, 0) << diag(r);
  EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos) << diag(r);
}

TEST(HarnessE2E, UnderMpirun) {
  ProcResult r = runMpirun({"--allow-run-as-root", "--oversubscribe", "-np", "2",
                            std::string(PERF_BIN_DIR) + "/all_reduce_perf", "-b", "8", "-e", "64K", "-f", "8", "-n",
                            "2", "-c", "1"},
                           // OpenMPI's own allocations are not ours to check (sanitizer builds only).
                           {{"ASAN_OPTIONS", "detect_leaks=0"}}, 170);
  EXPECT_EQ(r.exitCode, 0) << diag(r);
  EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos) << diag(r);
  EXPECT_NE(r.out.find("#  Rank  1 Group  0"), std::string::npos) << diag(r);
}

TEST(HarnessE2E, CorruptionThroughTheRealLibraryIsCaught) {
  // Rank 1's result gets one flipped bit: every rank must report the wrong count and exit 1.
  ProcResult r = launch(2, "all_reduce_perf", {"-b", "1K", "-e", "1K", "-n", "1"},
                        {"-x", std::string("LD_PRELOAD=") + CORRUPT_LIB, "-x", "CORRUPT_COUNT=256", "-x",
                         "CORRUPT_RANK=1"});
  EXPECT_EQ(r.exitCode, 1) << diag(r);
  EXPECT_NE(r.out.find("# Out of bounds values : 2 FAILED"), std::string::npos) << diag(r);
  EXPECT_NE(r.err.find("rank 1: all_reduce_perf out-of-place"), std::string::npos) << diag(r);
}

// A new user's first try of NCCL's tuning variables: NCCL_DEBUG=INFO says what took effect and how,
// and the tuner plugin's choices (within NCCL_ALGO and NCCL_PROTO) are what runs; a variable without
// effect is named once, and a misspelt one gets the closest known name.
TEST(HarnessE2E, NcclTuningVariablesAndATunerPluginSayWhatTookEffect) {
  std::string rules = "/tmp/theseus-e2e-tuner-" + std::to_string(getpid()) + ".csv";
  FILE* f = fopen(rules.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fputs("allreduce,0,65535,tree,simple,2\nallreduce,65536,-1,ring,ll,4\n", f);
  fclose(f);
  ProcResult r = launch(2, "all_reduce_perf", {"-b", "8", "-e", "1M", "-f", "16", "-n", "2", "-c", "1"},
                        {"-x", "NCCL_ALGO=Tree", "-x", "NCCL_PROTO=Simple", "-x",
                         std::string("NCCL_TUNER_PLUGIN=") + TEST_TUNER_LIB, "-x", "TEST_TUNER_CONFIG=" + rules, "-x",
                         "NCCL_DEBUG=INFO", "-x", "NCCL_DEBUG_SUBSYS=INIT,TUNING,ENV", "-x", "NCCL_IB_ADAPTIVE_ROUTING=1", "-x",
                         "NCCL_SOCKET_IFNMAE=lo"});
  unlink(rules.c_str());
  const std::string all = r.out + r.err;
  EXPECT_EQ(r.exitCode, 0) << diag(r);
  EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos) << diag(r);
  for (const char* line :
       {"NCCL tuner plugin 'test_tuner' v6 (", "NCCL plugin 'test_tuner': test tuner: 2 rule(s) for 2 ranks on 1 node(s)",
        "NCCL_ALGO=Tree takes effect: schedules allowed double_binary_tree,tree",
        "NCCL_PROTO=Simple takes effect on the NCCL tuner's cost table: protocols allowed Simple",
        "allreduce [0, 65535] -> double_binary_tree(channels=2)  (NCCL tuner 'test_tuner': Tree/Simple, 2 channels)",
        // Ring/LL is outside NCCL_ALGO and NCCL_PROTO: the tuner's channel count still applies to the tree.
        "allreduce [65536, inf] -> double_binary_tree(channels=4)",
        "allreduce of 8 bytes uses double_binary_tree(channels=2)",
        "allreduce of 1048576 bytes uses double_binary_tree(channels=4)",
        // Variables that do nothing here, and a typo.
        "NCCL_IB_ADAPTIVE_ROUTING has no effect in Theseus: not implemented by Theseus' IB network",
        "NCCL_SOCKET_IFNMAE is not a variable NCCL or Theseus knows; did you mean NCCL_SOCKET_IFNAME?"})
    EXPECT_NE(all.find(line), std::string::npos) << "missing: " << line << "\n" << diag(r);
}

}  // namespace
}  // namespace theseus::test
