#include "perf_context.h"

#include <sched.h>

#include "perf_cuda.h"

namespace theseus::perf {

RunContext::RunContext(const Options& o, const CollectiveTest& t, World& w)
    : opts(o), test(t), world(w), team(o.nThreads) {}

void RunContext::abortAll() {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_) return;
  aborted_ = true;
  for (RankSlot& s : slots) {
    if (s.comm == nullptr) continue;
    ncclResult_t r = ncclCommAbort(s.comm);
    if (r != ncclSuccess)
      fprintf(stderr, "rank %d: ncclCommAbort failed: %s\n", s.rank, ncclGetErrorString(r));
  }
}

bool RunContext::commsAborted() {
  std::lock_guard<std::mutex> lock(mu_);
  return aborted_;
}

void RunContext::recordError(const Status& s) {
  if (s.isOk()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (firstError_.isOk()) firstError_ = s;
  }
  team.fail();
}

Status RunContext::firstError() {
  std::lock_guard<std::mutex> lock(mu_);
  return firstError_;
}

Status waitForSlots(ThreadCtx& t, const char* what) {
  RunContext& run = t.run;
  if (!run.cudaMode) return Status::ok();
  Watchdog::Scope scope(*run.watchdog, t.thread, what);
  for (RankSlot* s : t.slots) {
    for (;;) {
      bool done = false;
      PERF_CHECK(cuda::streamQuery(s->stream, &done));
      if (done) break;
      ncclResult_t async = ncclSuccess;
      PERF_NCCL(ncclCommGetAsyncError(s->comm, &async));
      if (async != ncclSuccess && async != ncclInProgress)
        return errorf(kExitError, "rank %d: asynchronous NCCL error while waiting for %s: %s", s->rank, what,
                      ncclGetErrorString(async));
      if (run.watchdog->fired()) return errorf(kExitTimeout, "rank %d: %s timed out", s->rank, what);
      sched_yield();
    }
  }
  return Status::ok();
}

}  // namespace theseus::perf
