// ncclCommSuspend, ncclCommResume and ncclCommMemStats.
//
// Suspend and resume are communicator jobs, queued in the current group like
// init and finalize (done at ncclGroupEnd; with a non-blocking config they run
// in the background and ncclCommGetAsyncError reports them). No operation may
// be running on the communicator, and none may be issued while it is
// suspended: collectives fail with ncclInvalidUsage until ncclCommResume.
// NCCL_SUSPEND_MEM frees the executor scratch; the transports' FIFOs stay (the
// peers write into them, like NCCL's persistent memory). Every rank calls them
// together, as NCCL's design asks, but nothing here talks to the peers.
//
// MemStats reports the communicator's real allocations: Suspend = what a
// suspend frees now, Persist = the transports' FIFOs, Total = both, Suspended
// = 0/1. In host mode these bytes are host memory (shared segments): the
// memory Theseus allocates for the communicator, whichever kind it is.
#include "comm/collective_engine.h"
#include "comm/group.h"
#include "comm/lifecycle.h"
#include "comm/lifecycle_internal.h"
#include "common/knobs.h"
#include "common/log.h"

namespace theseus::comm {
namespace {

const BoolKnob kDisableMemManager("NCCL_DISABLE_MEM_MANAGER", false,
                                  "1: ncclCommSuspend and ncclCommResume fail with ncclInvalidUsage (as in NCCL, "
                                  "where they need the memory manager)");

Status checkSuspendable(Communicator* comm, const char* what) {
  if (kDisableMemManager.get())
    return invalidUsage("%s: NCCL_DISABLE_MEM_MANAGER=1 turns suspend and resume off", what);
  if (comm->lifecycle() != Lifecycle::kReady || comm->engine() == nullptr)
    return invalidUsage("%s: communicator %p is not ready (initialising, finalized, revoked or failed)", what,
                        static_cast<void*>(comm));
  return Status::ok();
}

// Runs `change` on the engine as a job of the current group.
Status enqueueMemoryJob(Communicator* comm, const char* what, std::function<Status(CollectiveEngine&)> change) {
  auto st = stateOf(comm);
  if (st == nullptr) return invalidArgument("%s: unknown communicator", what);
  TH_CHECK(checkSuspendable(comm, what));
  const bool blocking = comm->config().blocking;
  if (!blocking) comm->setAsyncError(ncclInProgress);
  return enqueueJob(comm, blocking, [st, what, change, blocking] {
    JobScope job(st);
    TH_CHECK(job.status());
    Communicator* c = st->comm;
    Status s = st->opsInFlight.load() > 0
                   ? invalidUsage("%s: operations are still running on communicator %p", what, static_cast<void*>(c))
                   : change(*c->engine());
    if (!blocking) c->setAsyncError(s.isOk() ? ncclSuccess : s.code(), s.message());
    if (s.isOk()) TH_INFO(log::kInit, "comm %p rank %d - %s COMPLETE", static_cast<void*>(c), c->rank(), what);
    return s;
  });
}

}  // namespace

Status commSuspend(Communicator* comm, int flags) {
  if ((flags & ~NCCL_SUSPEND_MEM) != 0)
    return invalidArgument("ncclCommSuspend: flags %#x are invalid (0 or NCCL_SUSPEND_MEM)", flags);
  const bool releaseMemory = (flags & NCCL_SUSPEND_MEM) != 0;
  return enqueueMemoryJob(comm, "ncclCommSuspend",
                          [releaseMemory](CollectiveEngine& e) { return e.suspend(releaseMemory); });
}

Status commResume(Communicator* comm) {
  return enqueueMemoryJob(comm, "ncclCommResume", [](CollectiveEngine& e) { return e.resume(); });
}

Status commMemStats(Communicator* comm, int stat, uint64_t* value) {
  if (value == nullptr) return invalidArgument("ncclCommMemStats: value is NULL");
  CollectiveEngine::Memory m;
  if (comm->engine() != nullptr) m = comm->engine()->memory();  // no engine (failed, destroyed parts): nothing held
  switch (stat) {
    case ncclStatGpuMemSuspend: *value = m.releasable; break;
    case ncclStatGpuMemSuspended: *value = m.suspended ? 1 : 0; break;
    case ncclStatGpuMemPersist: *value = m.persistent; break;
    case ncclStatGpuMemTotal: *value = m.releasable + m.persistent; break;
    default: return invalidArgument("ncclCommMemStats: stat %d is not a ncclCommMemStat_t", stat);
  }
  return Status::ok();
}

}  // namespace theseus::comm
