// State of one run of a *_perf binary inside one process: the ranks it drives
// (threads x ranks per thread), their communicators, streams and buffers, and
// the helpers every worker thread shares.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "perf_coll.h"
#include "perf_memory.h"
#include "perf_options.h"
#include "perf_report.h"
#include "perf_team.h"
#include "perf_world.h"

namespace theseus::perf {

struct RankSlot {
  int rank = 0;       // global rank
  int thread = 0;     // worker thread driving it
  int device = -1;    // CUDA device, -1 in host mode
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  bool ownsStream = false;
  Buffer send;
  Buffer recv;
  Buffer scratch;     // bookkeeping collectives (NcclCrossRank)
  std::vector<void*> regHandles;
  std::vector<ncclWindow_t> windows;
};

struct ThreadCtx;

// Combination of per-rank values over every rank of the run, used for the
// #wrong counts, the times (-a), barriers and the device list.
class CrossRank {
 public:
  virtual ~CrossRank() = default;
  // `perSlot` holds one vector per rank the thread drives (equal lengths).
  virtual Status combine(ThreadCtx& t, const std::vector<std::vector<double>>& perSlot, Combine op,
                         std::vector<double>* out) = 0;
  virtual Status barrier(ThreadCtx& t) = 0;
  // Every rank contributes `width` bytes; `all` receives nranks*width bytes in rank order.
  virtual Status gather(ThreadCtx& t, const std::vector<std::string>& perSlot, size_t width, std::string* all) = 0;
};

struct RunContext {
  RunContext(const Options& o, const CollectiveTest& t, World& w);

  const Options& opts;
  const CollectiveTest& test;
  World& world;
  int nranks = 1;
  int ranksPerProc = 1;
  int firstRank = 0;         // global rank of this process' first slot
  bool cudaMode = false;
  BufferKind bufferKind = BufferKind::kHostNccl;
  size_t bufferBytes = 0;    // each of send and recv, unalign included
  size_t scratchBytes = 0;
  ncclUniqueId id{};
  std::vector<ncclDataType_t> types;   // -d, minus what the GPUs cannot do (fp8 before sm_90)
  std::vector<RankSlot> slots;   // slot index = thread * nGpus + gpu
  ThreadTeam team;
  std::unique_ptr<Watchdog> watchdog;
  std::unique_ptr<CrossRank> cross;

  // Aborts every live communicator once (timeout or a failed thread) so no
  // thread stays blocked in NCCL; later destruction skips them.
  void abortAll();
  bool commsAborted();
  // Keeps the first error; fails the team so waiting threads return.
  void recordError(const Status& s);
  Status firstError();

 private:
  std::mutex mu_;
  bool aborted_ = false;
  Status firstError_;
};

struct ThreadCtx {
  RunContext& run;
  int thread = 0;
  std::vector<RankSlot*> slots;
  bool printer = false;      // global rank 0 prints the table
  uint64_t checkRep = 0;     // data-check iteration counter (the input seed)
  // Results (meaningful on the printer).
  std::vector<ResultRow> rows;
  double busBwSum = 0;
  int busBwCount = 0;
  long long errors = 0;      // measurements with wrong values (identical on every rank)
};

// Waits until every slot's stream is idle (CUDA mode), polling
// ncclCommGetAsyncError and the watchdog; returns at once in host mode, where
// an operation has completed when its call returns.
Status waitForSlots(ThreadCtx& t, const char* what);

std::unique_ptr<CrossRank> makeCrossRank(RunContext& run);

}  // namespace theseus::perf
