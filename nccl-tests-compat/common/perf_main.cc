// perfMain: the life of a *_perf process.
//
//  1. parse the command line; find out how we were launched (perf_world.h);
//  2. rank 0 prints nccl-tests' preamble; the unique id is shared;
//  3. communicators are created: with -p 0 by the main thread for every local
//     rank in one ncclGroupStart/End, with -p 1 by each worker thread for its
//     own ranks (that is how nccl-tests exercises grouped multi-rank init);
//  4. every worker thread (the main thread is thread 0) allocates its ranks'
//     buffers inside a group, publishes its device lines, runs the sweep
//     (perf_bench.cc) and frees its buffers;
//  5. communicators are destroyed (in one group), rank 0 prints the footer and
//     writes -J; every process returns the same exit code for wrong results.
// Any failure fails the thread team and aborts the local communicators, so no
// thread stays blocked in NCCL; the launcher then stops the other processes.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "perf_bench.h"
#include "perf_context.h"
#include "perf_cuda.h"
#include "perf_nccl_calls.h"

namespace theseus::perf {
namespace {

constexpr size_t kDeviceLineWidth = 160;

class Runner {
 public:
  Runner(const Options& opts, const CollectiveTest& test, World& world) : run_(opts, test, world) {}
  int run();

 private:
  Status setup();
  Status dropUnsupportedTypes();
  void printPreamble();
  Status initComms(const std::vector<RankSlot*>& slots);
  Status allocate(ThreadCtx& t);
  Status release(ThreadCtx& t);
  Status publishDevices(ThreadCtx& t);
  void threadMain(int thread);
  Status destroyComms();
  Status printFooter(const ThreadCtx& t);
  int finish();
  std::string deviceLine(const RankSlot& s) const;

  RunContext run_;
  const Options& o() const { return run_.opts; }
  bool printerProc() const { return run_.world.proc() == 0; }
  int libraryVersion_ = 0;
  std::vector<std::string> deviceLines_;  // printer only
  std::vector<std::unique_ptr<ThreadCtx>> threads_;
};

Status Runner::setup() {
  World& w = run_.world;
  run_.ranksPerProc = o().nThreads * o().nGpus;
  run_.nranks = w.nprocs() * run_.ranksPerProc;
  run_.firstRank = w.proc() * run_.ranksPerProc;
  PERF_CHECK(run_.test.checkRanks(run_.nranks));
  if (run_.test.usesRoot() && o().root >= run_.nranks)
    return usageError("-r %d: root must be < the number of ranks (%d)", o().root, run_.nranks);
  run_.cudaMode = o().memory == MemoryMode::kAuto && cuda::deviceCount() > 0;
  if (run_.cudaMode) {
    run_.bufferKind = o().useMalloc ? BufferKind::kDeviceCuda : BufferKind::kDeviceNccl;
  } else {
    // With a GPU visible ncclMemAlloc returns device memory, so --host uses malloc there.
    bool gpuVisible = cuda::deviceCount() > 0;
    run_.bufferKind = (o().useMalloc || gpuVisible) ? BufferKind::kHostMalloc : BufferKind::kHostNccl;
  }
  run_.types = o().types;
  if (run_.cudaMode) PERF_CHECK(dropUnsupportedTypes());
  // Buffers hold the largest send or receive region of any datatype at maxBytes.
  size_t maxEs = 1;
  for (ncclDataType_t t : run_.types) {
    size_t es = typeInfo(t).size;
    CollCounts k = run_.test.counts(o().maxBytes / es, es, run_.nranks);
    run_.bufferBytes = std::max(run_.bufferBytes, std::max(k.sendCount, k.recvCount) * es);
    maxEs = std::max(maxEs, es);
  }
  run_.bufferBytes += o().unalign * maxEs;
  run_.scratchBytes = std::max<size_t>(4096, static_cast<size_t>(run_.nranks) * kDeviceLineWidth);
  PERF_NCCL(ncclGetVersion(&libraryVersion_));
  run_.watchdog = std::make_unique<Watchdog>(o().nThreads, o().timeoutSec, [this](int thread, const std::string& what) {
    fprintf(stderr, "%s: process %d thread %d: %s did not complete within %g s (-T): aborting communicators\n",
            run_.test.program(), run_.world.proc(), thread, what.c_str(), o().timeoutSec);
    run_.recordError(errorf(kExitTimeout, "%s timed out after %g s", what.c_str(), o().timeoutSec));
    run_.abortAll();
  });
  run_.cross = makeCrossRank(run_);
  const int ndev = cuda::deviceCount();
  run_.slots.resize(run_.ranksPerProc);
  for (int i = 0; i < run_.ranksPerProc; ++i) {
    RankSlot& s = run_.slots[i];
    s.rank = run_.firstRank + i;
    s.thread = i / o().nGpus;
    if (run_.cudaMode) s.device = (w.localProc() * run_.ranksPerProc + i) % ndev;
  }
  return Status::ok();
}

// NCCL reduces fp8 only on compute capability >= 9.0 (nccl-tests skips them too).
Status Runner::dropUnsupportedTypes() {
  const int ndev = cuda::deviceCount();
  int minCc = 1000;
  for (int i = 0; i < run_.ranksPerProc; ++i)
    minCc = std::min(minCc, cuda::computeCapability((run_.world.localProc() * run_.ranksPerProc + i) % ndev));
  if (minCc >= 90) return Status::ok();
  std::vector<ncclDataType_t> kept;
  for (ncclDataType_t t : run_.types)
    if (t != ncclFloat8e4m3 && t != ncclFloat8e5m2) kept.push_back(t);
  if (kept.size() != run_.types.size()) {
    if (kept.empty()) return usageError("fp8 datatypes need GPUs of compute capability 9.0 or newer");
    if (printerProc()) printf("# f8e4m3/f8e5m2 skipped: compute capability %d.%d < 9.0\n", minCc / 10, minCc % 10);
  }
  run_.types = kept;
  return Status::ok();
}

void Runner::printPreamble() {
  if (!printerProc()) return;
  printf("# nccl-tests version 2.19.6 (Theseus nccl-tests-compat) nccl-headers=%d nccl-library=%d\n",
         NCCL_VERSION_CODE, libraryVersion_);
  printf("# Collective test starting: %s\n", run_.test.program());
  std::string step = o().stepFactor > 1 ? strprintf("%llu(factor)", static_cast<unsigned long long>(o().stepFactor))
                                        : strprintf("%zu(bytes)", o().stepBytes);
  printf("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %s warmup iters: %d iters: %d agg iters: %d "
         "validation: %d graph: %d unalign: %zu\n",
         o().nThreads, o().nGpus, o().minBytes, o().maxBytes, step.c_str(), o().warmupIters, o().iters,
         o().aggIters, o().check, o().graphLaunches, o().unalign);
  printf("#\n# Using devices\n");
  fflush(stdout);
}

// ncclCommInitRankConfig for `slots` in one group (the grouped multi-rank init
// nccl-tests uses), with nccl-tests' config.
Status Runner::initComms(const std::vector<RankSlot*>& slots) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  if (o().ctaPolicy >= 0) config.CTAPolicy = o().ctaPolicy;
  config.nvlinkCentricSched = 1;
  Watchdog::Scope scope(*run_.watchdog, slots.at(0)->thread, "communicator initialisation");
  PERF_NCCL(ncclGroupStart());
  ncclResult_t first = ncclSuccess;
  int failedRank = -1;
  for (RankSlot* s : slots) {
    if (s->device >= 0) {
      Status d = cuda::setDevice(s->device);
      if (!d.isOk()) {
        (void)ncclGroupEnd();
        return d;
      }
    }
    ncclResult_t r = ncclCommInitRankConfig(&s->comm, run_.nranks, run_.id, s->rank, &config);
    if (r != ncclSuccess && first == ncclSuccess) {
      first = r;
      failedRank = s->rank;
    }
  }
  ncclResult_t r = ncclGroupEnd();
  if (first != ncclSuccess)
    return ncclCallError(first, strprintf("ncclCommInitRankConfig (rank %d)", failedRank).c_str());
  if (r != ncclSuccess) return ncclCallError(r, "ncclGroupEnd (communicator initialisation)");
  return Status::ok();
}

Status Runner::allocate(ThreadCtx& t) {
  for (RankSlot* s : t.slots) {
    if (s->device >= 0) {
      PERF_CHECK(cuda::setDevice(s->device));
      if (!o().streamNull) {
        PERF_CHECK(cuda::streamCreate(&s->stream));
        s->ownsStream = true;
      }
    }
  }
  PERF_NCCL(ncclGroupStart());  // nccl-tests allocates inside a group
  Status st;
  for (RankSlot* s : t.slots) {
    if (s->device >= 0 && st.isOk()) st = cuda::setDevice(s->device);
    if (st.isOk()) st = Buffer::allocate(run_.bufferKind, run_.bufferBytes, &s->send);
    if (st.isOk()) st = Buffer::allocate(run_.bufferKind, run_.bufferBytes, &s->recv);
    if (st.isOk()) st = Buffer::allocate(run_.bufferKind, run_.scratchBytes, &s->scratch);
  }
  ncclResult_t r = ncclGroupEnd();
  PERF_CHECK(st);
  if (r != ncclSuccess) return ncclCallError(r, "ncclGroupEnd (buffer allocation)");
  if (o().localRegister == 0) return Status::ok();
  PERF_NCCL(ncclGroupStart());
  for (RankSlot* s : t.slots) {
    for (Buffer* b : {&s->send, &s->recv}) {
      if (o().localRegister == 1) {
        void* h = nullptr;
        ncclResult_t rr = ncclCommRegister(s->comm, b->data(), b->size(), &h);
        if (rr != ncclSuccess && st.isOk()) st = ncclCallError(rr, "ncclCommRegister");
        s->regHandles.push_back(h);
      } else {
        ncclWindow_t w = nullptr;
        ncclResult_t rr = ncclCommWindowRegister(s->comm, b->data(), b->size(), &w, NCCL_WIN_COLL_SYMMETRIC);
        if (rr != ncclSuccess && st.isOk()) st = ncclCallError(rr, "ncclCommWindowRegister");
        s->windows.push_back(w);
      }
    }
  }
  r = ncclGroupEnd();
  PERF_CHECK(st);
  if (r != ncclSuccess) return ncclCallError(r, "ncclGroupEnd (buffer registration)");
  return Status::ok();
}

Status Runner::release(ThreadCtx& t) {
  Status first;
  auto keep = [&](Status s) {
    if (!s.isOk() && first.isOk()) first = s;
  };
  const bool live = !run_.commsAborted();
  for (RankSlot* s : t.slots) {
    for (void* h : s->regHandles)
      if (live && h != nullptr && ncclCommDeregister(s->comm, h) != ncclSuccess)
        keep(errorf(kExitError, "ncclCommDeregister failed: %s", ncclGetLastError(nullptr)));
    for (ncclWindow_t w : s->windows)
      if (live && w != nullptr && ncclCommWindowDeregister(s->comm, w) != ncclSuccess)
        keep(errorf(kExitError, "ncclCommWindowDeregister failed: %s", ncclGetLastError(nullptr)));
    s->regHandles.clear();
    s->windows.clear();
    keep(s->send.release());
    keep(s->recv.release());
    keep(s->scratch.release());
    if (s->ownsStream) keep(cuda::streamDestroy(s->stream));
    s->ownsStream = false;
  }
  return first;
}

std::string Runner::deviceLine(const RankSlot& s) const {
  char host[64] = {0};
  gethostname(host, sizeof(host) - 1);
  std::string dev = "-", bus = "host", name = bufferKindName(run_.bufferKind);
  if (s.device >= 0) {
    dev = std::to_string(s.device);
    std::string n, b;
    if (cuda::describeDevice(s.device, &n, &b).isOk()) {
      name = n;
      bus = b;
    }
  }
  return strprintf("#  Rank %2d Group %2d Pid %6d on %10s device %2s [%s] %s", s.rank, 0, static_cast<int>(getpid()),
                   host, dev.c_str(), bus.c_str(), name.c_str());
}

Status Runner::publishDevices(ThreadCtx& t) {
  std::vector<std::string> mine;
  for (RankSlot* s : t.slots) mine.push_back(deviceLine(*s));
  std::string all;
  PERF_CHECK(run_.cross->gather(t, mine, kDeviceLineWidth, &all));
  if (!t.printer) return Status::ok();
  for (int r = 0; r < run_.nranks; ++r) {
    std::string line = all.substr(r * kDeviceLineWidth, kDeviceLineWidth);
    line.resize(strnlen(line.c_str(), kDeviceLineWidth));
    printf("%s\n", line.c_str());
    const size_t text = line.find_first_not_of("# ");
    if (text == std::string::npos)  // the gather (a device-buffer allreduce) lost this rank's line
      return errorf(kExitError, "rank %d's device line did not arrive through the bookkeeping all-gather", r);
    deviceLines_.push_back(line.substr(text));
  }
  printf("#\n");
  for (const std::string& h : tableHeader(o().reportCpuTime)) printf("%s\n", h.c_str());
  fflush(stdout);
  return Status::ok();
}

void Runner::threadMain(int thread) {
  ThreadCtx& t = *threads_[thread];
  Status s;
  if (o().parallelInit) s = initComms(t.slots);
  if (s.isOk()) s = run_.team.barrier();
  if (s.isOk()) s = allocate(t);
  if (s.isOk()) s = publishDevices(t);
  if (s.isOk()) s = runBenchmarks(t);
  if (s.isOk() && t.printer) s = printFooter(t);
  // Nobody leaves before rank 0 has printed: a launcher stops every rank as
  // soon as one exits non-zero (as all do after wrong results).
  if (s.isOk()) s = run_.cross->barrier(t);
  if (!s.isOk()) {
    if (run_.watchdog->fired() && s.exitCode() != kExitTimeout) s = Status(kExitTimeout, s.message());
    if (s.message().rfind("rank", 0) != 0) {
      int lo = t.slots.front()->rank, hi = t.slots.back()->rank;
      s = s.withContext(lo == hi ? strprintf("rank %d", lo) : strprintf("ranks %d-%d", lo, hi));
    }
    run_.recordError(s);
    run_.abortAll();  // unblock the other threads of this process
  }
  Status r = release(t);
  if (!r.isOk()) run_.recordError(r);
}

Status Runner::destroyComms() {
  if (run_.commsAborted()) return Status::ok();
  PERF_NCCL(ncclGroupStart());
  ncclResult_t first = ncclSuccess;
  for (RankSlot& s : run_.slots) {
    if (s.comm == nullptr) continue;
    ncclResult_t r = ncclCommDestroy(s.comm);
    if (r != ncclSuccess && first == ncclSuccess) first = r;
    s.comm = nullptr;
  }
  ncclResult_t r = ncclGroupEnd();
  if (first != ncclSuccess) return ncclCallError(first, "ncclCommDestroy");
  if (r != ncclSuccess) return ncclCallError(r, "ncclGroupEnd (communicator destruction)");
  return Status::ok();
}

double averageBusBw(const ThreadCtx& t) { return t.busBwCount > 0 ? t.busBwSum / t.busBwCount : 0; }

double minBusBw() {
  const char* v = getenv("NCCL_TESTS_MIN_BW");
  return v != nullptr && v[0] != '\0' ? atof(v) : -1;
}

Status Runner::printFooter(const ThreadCtx& p) {
  const double avg = averageBusBw(p), minBw = minBusBw();
  for (const std::string& line : footer(p.errors, avg, minBw)) printf("%s\n", line.c_str());
  printf("#\n# Collective test concluded: %s\n", run_.test.program());
  fflush(stdout);
  if (o().jsonPath.empty()) return Status::ok();
  JsonReport j;
  j.program = run_.test.program();
  j.ncclHeaders = NCCL_VERSION_CODE;
  j.ncclLibrary = libraryVersion_;
  j.nranks = run_.nranks;
  j.nprocs = run_.world.nprocs();
  j.nThreads = o().nThreads;
  j.nGpus = o().nGpus;
  j.memory = run_.cudaMode ? "cuda" : "host";
  j.options = {{"minbytes", std::to_string(o().minBytes)}, {"maxbytes", std::to_string(o().maxBytes)},
               {"iters", std::to_string(o().iters)},      {"warmup_iters", std::to_string(o().warmupIters)},
               {"agg_iters", std::to_string(o().aggIters)}, {"check", std::to_string(o().check)},
               {"average", std::to_string(o().average)},  {"blocking", std::to_string(o().blocking)},
               {"in_place", o().inPlace ? "1" : "0"},       {"launch", launchModeName(run_.world.mode())}};
  j.devices = deviceLines_;
  j.rows = p.rows;
  j.outOfBounds = p.errors;
  j.avgBusBw = avg;
  j.passed = p.errors == 0 && !(minBw >= 0 && avg < 0.9 * minBw);
  return j.write(o().jsonPath);
}

int Runner::finish() {
  Status err = run_.firstError();
  if (!err.isOk()) {
    fprintf(stderr, "%s: process %d: %s\n", run_.test.program(), run_.world.proc(), err.message().c_str());
    return err.exitCode();
  }
  const ThreadCtx& p = *threads_[0];  // every rank knows the global error count
  const double minBw = minBusBw();
  const bool bwFailed = minBw >= 0 && averageBusBw(p) < 0.9 * minBw;
  return (p.errors > 0 || bwFailed) ? kExitWrongResults : kExitOk;
}

int Runner::run() {
  Status s = setup();
  if (s.isOk()) {
    printPreamble();
    s = run_.world.uniqueId(&run_.id);
  }
  if (!s.isOk()) {
    fprintf(stderr, "%s: process %d: %s\n", run_.test.program(), run_.world.proc(), s.message().c_str());
    return s.exitCode();
  }
  for (int t = 0; t < o().nThreads; ++t) {
    auto ctx = std::make_unique<ThreadCtx>(ThreadCtx{run_, t});
    for (int g = 0; g < o().nGpus; ++g) ctx->slots.push_back(&run_.slots[t * o().nGpus + g]);
    ctx->printer = printerProc() && t == 0;
    threads_.push_back(std::move(ctx));
  }
  if (!o().parallelInit) {
    std::vector<RankSlot*> all;
    for (RankSlot& slot : run_.slots) all.push_back(&slot);
    Status st = initComms(all);
    if (!st.isOk()) run_.recordError(st);
  }
  if (run_.firstError().isOk()) {
    std::vector<std::thread> workers;
    for (int t = 1; t < o().nThreads; ++t) workers.emplace_back([this, t] { threadMain(t); });
    threadMain(0);
    for (std::thread& w : workers) w.join();
  }
  Status d = destroyComms();
  if (!d.isOk()) run_.recordError(d);
  return finish();
}

}  // namespace

int perfMain(int argc, char** argv, const CollectiveTest& test) {
  setvbuf(stdout, nullptr, _IOFBF, 1 << 16);  // rows are flushed explicitly
  installRealNcclCalls();
  Options opts;
  Status s = parseOptions(argc, argv, &opts);
  if (!s.isOk()) {
    fprintf(stderr, "%s: %s\n", test.program(), s.message().c_str());
    return s.exitCode();
  }
  if (opts.help) {
    fputs(usageText(test.program()).c_str(), stdout);
    return kExitOk;
  }
  std::unique_ptr<World> world;
  s = World::create(&argc, &argv, &world);
  if (!s.isOk()) {
    fprintf(stderr, "%s: %s\n", test.program(), s.message().c_str());
    return s.exitCode();
  }
  Runner runner(opts, test, *world);
  return runner.run();
}

}  // namespace theseus::perf
