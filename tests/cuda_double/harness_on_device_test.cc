// The nccl-tests-compatible harness on device buffers through the CUDA
// executor, on the CUDA test double: every collective, the 12 datatypes and
// every op, in and out of place, checked with -c 1 on 1, 2 and 4 ranks of one
// device — the matrix scripts/gpu-check.sh runs on a GPU. Each run must have
// used device buffers (the double's device is named in the report) and the
// CUDA executor for every operation (no staging fallback warning).
#include <gtest/gtest.h>

#include <regex>
#include <sstream>

#include "proc_runner.h"

namespace theseus::test {
namespace {

std::string diag(const ProcResult& r) { return "exit " + std::to_string(r.exitCode) + "\n" + r.out + "\n" + r.err; }

int dataRows(const std::string& out) {
  std::istringstream in(out);
  int n = 0;
  static const std::regex kRow(R"(^ +[0-9]+ +[0-9]+ +\S+ +\S+ +-?[0-9]+ .*)");
  for (std::string line; std::getline(in, line);)
    if (std::regex_match(line, kRow)) ++n;
  return n;
}

struct Param {
  const char* prog;
  bool usesOp;
  bool usesRoot;
  int nranks;
};
// How ctest lists a case (the default prints the struct's bytes).
void PrintTo(const Param& p, std::ostream* os) { *os << p.prog << " on " << p.nranks << " rank(s)"; }

class OnDevice : public testing::TestWithParam<Param> {};

TEST_P(OnDevice, EveryTypeAndOpThroughTheCudaExecutor) {
  const Param p = GetParam();
  // Sizes 8 B (counts that round to 0 or 1), 256 B, 8 KiB and 256 KiB (several
  // slices per connection), one timed iteration; a hang is aborted after 30 s.
  std::vector<std::string> argv = {THESEUS_RUN, "-np", std::to_string(p.nranks), "--timeout", "200", "--",
                                   std::string(PERF_BIN_DIR) + "/" + p.prog + "_cuda_double",
                                   "-b", "8", "-e", "256K", "-f", "32", "-n", "1", "-w", "0", "-c", "1", "-a", "0",
                                   "-d", "all", "-T", "30"};
  if (p.usesOp) argv.insert(argv.end(), {"-o", "all"});
  if (p.usesRoot) argv.insert(argv.end(), {"-r", std::to_string(p.nranks - 1)});
  ProcResult r = runProcess(argv, {{"THESEUS_DEVICE_EXECUTOR", "cuda"}, {"NCCL_DEBUG", "WARN"}}, 240);
  ASSERT_EQ(r.exitCode, 0) << diag(r);
  EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos) << diag(r);
  EXPECT_NE(r.out.find("Theseus CUDA test double"), std::string::npos) << "device buffers expected\n" << diag(r);
  EXPECT_EQ(r.err.find("staged through host memory"), std::string::npos) << diag(r);
  // -o all: every (type, op) pair but fp8 avg/mulsum (NCCL has none): 68 pairs; 4 sizes.
  EXPECT_EQ(dataRows(r.out), (p.usesOp ? 68 : 12) * 4) << diag(r);
}

std::vector<Param> everyCollective() {
  const Param base[] = {{"all_reduce_perf", true, false, 0},     {"all_gather_perf", false, false, 0},
                        {"broadcast_perf", false, true, 0},      {"reduce_perf", true, true, 0},
                        {"reduce_scatter_perf", true, false, 0}, {"alltoall_perf", false, false, 0},
                        {"gather_perf", false, true, 0},         {"scatter_perf", false, true, 0},
                        {"sendrecv_perf", false, false, 0},      {"hypercube_perf", false, false, 0}};
  std::vector<Param> all;
  for (Param p : base)
    for (int n : {1, 2, 4}) {
      p.nranks = n;
      all.push_back(p);
    }
  return all;
}

INSTANTIATE_TEST_SUITE_P(Harness, OnDevice, testing::ValuesIn(everyCollective()),
                         [](const testing::TestParamInfo<Param>& i) {
                           std::string name = i.param.prog;
                           name = name.substr(0, name.size() - 5);  // drop "_perf"
                           return name + "_" + std::to_string(i.param.nranks) + "ranks";
                         });

// Where the device FIFOs keep their slots: in the receiver's GPU memory,
// opened by the sender through CUDA IPC (separate processes) or shared as is
// (ranks as threads of one process, -t 2); in pinned host memory with
// NCCL_P2P_DISABLE=1. Results are checked in every case.
TEST(OnDeviceSlots, InGpuMemoryThroughCudaIpcUnlessP2pIsDisabled) {
  struct Case {
    int np;
    const char* threads;
    const char* p2pDisable;
    const char* want;
    const char* unwanted;
  };
  const Case cases[] = {{2, "1", "0", "1 with device FIFOs (slots in GPU memory with 1)", "keep their slots in host memory"},
                        {4, "1", "0", "3 with device FIFOs (slots in GPU memory with 3)", "keep their slots in host memory"},
                        {1, "2", "0", "1 with device FIFOs (slots in GPU memory with 1)", "keep their slots in host memory"},
                        {2, "1", "1", "1 with device FIFOs", "slots in GPU memory"}};
  for (const Case& c : cases) {
    std::vector<std::string> argv = {THESEUS_RUN, "-np", std::to_string(c.np), "--timeout", "100", "--",
                                     std::string(PERF_BIN_DIR) + "/all_reduce_perf_cuda_double",
                                     "-b", "8", "-e", "1M", "-f", "16", "-n", "2", "-w", "1", "-c", "1", "-o", "sum,avg",
                                     "-t", c.threads, "-T", "30"};
    ProcResult r = runProcess(argv,
                              {{"THESEUS_DEVICE_EXECUTOR", "cuda"}, {"NCCL_DEBUG", "INFO"}, {"NCCL_DEBUG_SUBSYS", "INIT"},
                               {"NCCL_P2P_DISABLE", c.p2pDisable}},
                              120);
    const std::string what = "np " + std::to_string(c.np) + " -t " + c.threads + " NCCL_P2P_DISABLE=" + c.p2pDisable;
    ASSERT_EQ(r.exitCode, 0) << what << "\n" << diag(r);
    EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos) << what << "\n" << diag(r);
    const std::string all = r.out + r.err;
    EXPECT_NE(all.find(c.want), std::string::npos) << what << "\n" << diag(r);
    EXPECT_EQ(all.find(c.unwanted), std::string::npos) << what << "\n" << diag(r);
  }
}

}  // namespace
}  // namespace theseus::test
