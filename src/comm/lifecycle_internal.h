// Lifecycle internals shared by lifecycle*.cc and group.cc.
//
// Ownership. Every communicator handle we hand out has a LifecycleState,
// held by a process-wide registry. Destroy and abort never free a handle at
// once: they release its resources, mark it dead (kDeadMagic) and park it in a
// bounded graveyard, so a stale handle (double destroy, use after destroy) is
// a clean ncclInvalidArgument instead of a use-after-free.
//
// Concurrency. Background work on a communicator is either a *job* (init,
// split, shrink, finalize: counted in activeJobs) or *operations* (a group's
// collectives running in executeOps: counted in opsInFlight). Destroy/abort set
// `closing` first, then wait (bounded) until neither is running, then release.
// A job or an operations batch that starts after `closing` was set fails
// without touching the communicator. ncclCommAbort also sets both abort flags
// at once, so whatever runs ends promptly.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

#include "comm/communicator.h"
#include "common/deadline.h"
#include "common/status.h"

namespace theseus::comm {

struct Communicator::LifecycleState {
  Communicator* comm = nullptr;
  std::mutex mu;
  std::condition_variable cv;
  int activeJobs = 0;              // guarded by mu
  bool finalizeRequested = false;  // guarded by mu
  bool revoked = false;            // guarded by mu
  bool dead = false;               // guarded by mu: resources released, handle invalid
  uint64_t childSeq = 0;           // guarded by mu: split/shrink calls so far (same order on every rank)
  uint64_t abortShrinks = 0;       // guarded by mu: NCCL_SHRINK_ABORT calls so far (see commShrink)
  std::optional<ncclUniqueId> pendingGrowId;  // guarded by mu: issued by ncclCommGetUniqueId, not yet grown with
  std::atomic<bool> closing{false};  // destroy/abort started: no new jobs or operations
  std::atomic<int> opsInFlight{0};
  // Ends bootstrap waits (init, split, shrink). Only ncclCommAbort sets it: revoke and
  // NCCL_SHRINK_ABORT stop operations (comm->abortFlag()) but keep the bootstrap usable.
  AbortFlag bootstrapAbort;
};
using LifecycleState = Communicator::LifecycleState;

// A new communicator object with its state registered (handle valid, kInitializing).
std::shared_ptr<LifecycleState> newCommunicator(const CommConfig& config);
// The registry's reference to a live or dead communicator's state (null if unknown).
std::shared_ptr<LifecycleState> stateOf(Communicator* comm);

// Runs for the duration of one job; fails (ok() false) when the communicator is
// being destroyed or aborted, in which case the job must not touch it.
class JobScope {
 public:
  explicit JobScope(const std::shared_ptr<LifecycleState>& state);
  ~JobScope();
  JobScope(const JobScope&) = delete;
  JobScope& operator=(const JobScope&) = delete;
  const Status& status() const { return status_; }

 private:
  std::shared_ptr<LifecycleState> state_;
  Status status_;
};

// Waits (bounded) until no operation runs on the communicator.
Status waitForOpsIdle(LifecycleState& state, int64_t timeoutMs, const char* why);

// Releases a communicator (destroy: clean BYE; abort: peers see a failure).
Status reclaim(const std::shared_ptr<LifecycleState>& state, bool abort);

// The last step of every creation: transports, engine, ready (or failed with `failure`).
Status finishInit(Communicator* comm, Result<std::unique_ptr<bootstrap::Bootstrap>> boot, int cudaDev);
// What a rank reports of CUDA at bootstrap: its THESEUS_DEVICE_EXECUTOR (which every rank must share), whether
// its process uses CUDA (loaded the driver, which sees a device: every rank's report decides
// THESEUS_DEVICE_EXECUTOR=auto for the communicator), and its GPU `cudaDev` by PCI bus id (which ranks of a
// host share one, comm/shared_gpus.h).
void reportCuda(bootstrap::InitOptions* options, int cudaDev);
// The rendezvous over `ids`, then finishInit (the caller holds the job scope).
Status initFromUniqueIds(const std::shared_ptr<LifecycleState>& st, const ncclUniqueId* ids, int nIds, int rank,
                         int nranks, int cudaDev);

}  // namespace theseus::comm
