// The nccl-tests-compatible harness on device buffers through the CUDA
// executor, on the CUDA test double: every collective, the 12 datatypes and
// every op, in and out of place (sendrecv out of place only: racyInPlaceLeftOut),
// checked with -c 1 on 1, 2 and 4 ranks of one
// device — the matrix scripts/gpu-check.sh runs on a GPU. Each run must have
// used device buffers (the double's device is named in the report) and the
// CUDA executor for every operation (no staging fallback warning).
#include <gtest/gtest.h>


#include "perf_matrix.h"
#include "proc_runner.h"

namespace theseus::test {
namespace {

std::string diag(const ProcResult& r) { return "exit " + std::to_string(r.exitCode) + "\n" + r.out + "\n" + r.err; }

class OnDevice : public testing::TestWithParam<PerfCase> {};

TEST_P(OnDevice, EveryTypeAndOpThroughTheCudaExecutor) {
  const PerfCase p = GetParam();
  // Sizes 8 B (counts that round to 0 or 1), 256 B, 8 KiB and 256 KiB (several
  // slices per connection), one timed iteration; a hang is aborted after 30 s.
  std::vector<std::string> argv = {THESEUS_RUN, "-np", std::to_string(p.nranks), "--timeout", "200", "--",
                                   std::string(PERF_BIN_DIR) + "/" + p.prog + "_cuda_double",
                                   "-b", "8", "-e", "256K", "-f", "32", "-n", "1", "-w", "0", "-c", "1", "-a", "0",
                                   "-d", "all", "-T", "30"};
  if (p.usesOp) argv.insert(argv.end(), {"-o", "all"});
  if (p.usesRoot) argv.insert(argv.end(), {"-r", std::to_string(p.nranks - 1)});
  for (const std::string& f : racyInPlaceLeftOut(p.prog)) argv.push_back(f);
  ProcResult r = runProcess(argv, {{"THESEUS_DEVICE_EXECUTOR", "cuda"}, {"NCCL_DEBUG", "WARN"}}, 240);
  ASSERT_EQ(r.exitCode, 0) << diag(r);
  EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos) << diag(r);
  EXPECT_NE(r.out.find("Theseus CUDA test double"), std::string::npos) << "device buffers expected\n" << diag(r);
  EXPECT_EQ(r.err.find("staged through host memory"), std::string::npos) << diag(r);
  // -o all: every (type, op) pair but fp8 avg/mulsum (NCCL has none): 68 pairs; 4 sizes.
  EXPECT_EQ(perfDataRows(r.out), (p.usesOp ? 68 : 12) * 4) << diag(r);
}

INSTANTIATE_TEST_SUITE_P(Harness, OnDevice, testing::ValuesIn(everyPerfProgram({1, 2, 4})),
                         perfCaseName);

// Zero-copy: with buffers registered (-R 1: ncclCommRegister; -R 2: windows),
// local peers' kernels read them in place — ncclMemAlloc memory shared as a
// file descriptor (CUDA's VMM API), or as they are for ranks that are threads
// of one process (-t 2). Every collective, type
// and op, checked with -c 1.
class OnDeviceZeroCopy : public testing::TestWithParam<PerfCase> {};

TEST_P(OnDeviceZeroCopy, RegisteredBuffersAreReadInPlace) {
  const PerfCase p = GetParam();
  const bool threads = p.nranks == 1;  // one process, two threads: same address space
  std::vector<std::string> argv = {THESEUS_RUN, "-np", std::to_string(p.nranks), "--timeout", "200", "--",
                                   std::string(PERF_BIN_DIR) + "/" + p.prog + "_cuda_double",
                                   "-b", "8", "-e", "256K", "-f", "32", "-n", "2", "-w", "1", "-c", "1", "-a", "0",
                                   "-d", "all", "-T", "30", "-R", threads ? "2" : "1", "-t", threads ? "2" : "1"};
  if (p.usesOp) argv.insert(argv.end(), {"-o", "all"});
  if (p.usesRoot) argv.insert(argv.end(), {"-r", "1"});
  for (const std::string& f : racyInPlaceLeftOut(p.prog)) argv.push_back(f);
  ProcResult r = runProcess(argv,
                            {{"THESEUS_DEVICE_EXECUTOR", "cuda"}, {"NCCL_DEBUG", "INFO"}, {"NCCL_DEBUG_SUBSYS", "REG"}},
                            240);
  ASSERT_EQ(r.exitCode, 0) << diag(r);
  EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos) << diag(r);
  const std::string all = r.out + r.err;
  // The harness allocates with ncclMemAlloc: memory of CUDA's VMM API, shared as a file descriptor.
  EXPECT_NE(all.find(threads ? "in place (same process)" : "in place (CUDA VMM, file descriptor)"), std::string::npos)
      << diag(r);
  EXPECT_NE(all.find("in place from its registered device buffers (zero-copy)"), std::string::npos) << diag(r);
  EXPECT_EQ(all.find("through FIFO slots"), std::string::npos) << diag(r);
}

INSTANTIATE_TEST_SUITE_P(Harness, OnDeviceZeroCopy, testing::ValuesIn(everyPerfProgram({1, 2, 4})), perfCaseName);

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

// Ranks on several devices, as NCCL's "one thread, several GPUs" usage runs
// them (-g 2: one thread issues every rank's operations in one group, its
// current device whichever it set last) and as threads or processes on a
// device each. The CUDA executor launches each rank's kernel on its own
// device, and the pairs get device slots and zero-copy reads through peer
// access (threads) or, between processes, a file descriptor (ncclMemAlloc's
// VMM memory) or CUDA IPC (cudaMalloc memory, --malloc). On the CUDA test double with 2
// devices, whose launches and event records refuse a stream of another device
// than the current one, as CUDA does. sendrecv runs only its out-of-place half
// (racyInPlaceLeftOut).
TEST(OnDeviceSlots, RanksOnSeveralDevicesOfOneProcessOrMany) {
  struct Case {
    int np;
    const char* threads;
    const char* gpus;
    const char* prog;
    const char* mapping;
    bool cudaMalloc = false;  // --malloc: cudaMalloc buffers (legacy CUDA IPC) instead of ncclMemAlloc's (VMM)
  };
  const Case cases[] = {{1, "1", "2", "all_reduce_perf", "in place (same process)"},
                        {1, "1", "2", "sendrecv_perf", "in place (same process)"},
                        {1, "2", "1", "all_gather_perf", "in place (same process)"},
                        {2, "1", "1", "alltoall_perf", "in place (CUDA VMM, file descriptor)"},
                        {2, "1", "1", "alltoall_perf", "in place (CUDA IPC)", true}};
  for (const Case& c : cases) {
    std::vector<std::string> argv = {THESEUS_RUN, "-np", std::to_string(c.np), "--timeout", "100", "--",
                                     std::string(PERF_BIN_DIR) + "/" + c.prog + "_cuda_double",
                                     "-b", "8", "-e", "1M", "-f", "16", "-n", "2", "-w", "1", "-c", "1", "-d", "all",
                                     "-t", c.threads, "-g", c.gpus, "-R", "1", "-T", "30"};
    if (c.cudaMalloc) argv.push_back("--malloc");
    for (const std::string& f : racyInPlaceLeftOut(c.prog)) argv.push_back(f);
    ProcResult r = runProcess(argv,
                              {{"THESEUS_DEVICE_EXECUTOR", "cuda"}, {"THESEUS_FAKE_CUDA_DEVICES", "2"},
                               {"NCCL_DEBUG", "INFO"}, {"NCCL_DEBUG_SUBSYS", "INIT,REG"}},
                              120);
    const std::string what = std::string(c.prog) + " np " + std::to_string(c.np) + " -t " + c.threads + " -g " + c.gpus;
    ASSERT_EQ(r.exitCode, 0) << what << "\n" << diag(r);
    EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos) << what << "\n" << diag(r);
    const std::string all = r.out + r.err;
    EXPECT_NE(all.find("cudaDev 1"), std::string::npos) << what << ": a rank on device 1 expected\n" << diag(r);
    EXPECT_NE(all.find("1 with device FIFOs (slots in GPU memory with 1), registered buffers read in place by 1"),
              std::string::npos) << what << "\n" << diag(r);
    EXPECT_NE(all.find(c.mapping), std::string::npos) << what << "\n" << diag(r);
    EXPECT_EQ(all.find("keep their slots in host memory"), std::string::npos) << what << "\n" << diag(r);
  }
}

}  // namespace
}  // namespace theseus::test
