// Where a communicator's operations meet the NCCL profiler plugin
// (telemetry/nccl_profiler.h lists the events and their nesting). Every hook
// returns at once when the communicator has no profiler session.
#pragma once

#include <vector>

#include "comm/communicator.h"
#include "comm/group.h"
#include "exec/executor.h"

namespace theseus::comm {

// The hooks below are inline null checks; the work is in the *Slow functions
// (profiling.cc), reached only with a profiler session.
void profileGroupJoinedSlow(CommOps& w, int depth);
void profileGroupEndStartsSlow(CommOps& w);
void profileGroupDoneSlow(CommOps& w);
void profileApiStartSlow(Communicator* comm, OpDesc& op, void* groupApiEvent);
void profileApiStopSlow(Communicator* comm, OpDesc& op);

// An explicit group: the GroupApi event when a communicator first queues an
// operation in it (depth = the group nesting then), and its end.
inline void profileGroupJoined(CommOps& w, int depth) {
  if (w.comm->profiler() != nullptr) profileGroupJoinedSlow(w, depth);
}
inline void profileGroupEndStarts(CommOps& w) {
  if (w.comm->profiler() != nullptr) profileGroupEndStartsSlow(w);
}
inline void profileGroupDone(CommOps& w) {
  if (w.comm->profiler() != nullptr) profileGroupDoneSlow(w);
}

// The CollApi/P2pApi event of one call (parent: the group's GroupApi event).
inline void profileApiStart(Communicator* comm, OpDesc& op, void* groupApiEvent) {
  if (comm->profiler() != nullptr) profileApiStartSlow(comm, op, groupApiEvent);
}
inline void profileApiStop(Communicator* comm, OpDesc& op) {
  if (comm->profiler() != nullptr) profileApiStopSlow(comm, op);
}

// The events of one launch of a communicator's lowered operations: Group,
// Coll/P2p, KernelLaunch and ProxyOp, started before the executor runs and
// stopped (innermost first) after it returns, whatever it returned.
struct LaunchEvents {
  void* group = nullptr;
  void* kernel = nullptr;
  std::vector<void*> ops;      // per operation of the CommOps
  std::vector<void*> proxies;
};
// Whether any communicator of the batch has a profiler session.
inline bool anyProfiled(const std::vector<CommOps>& work) {
  for (const auto& w : work)
    if (w.comm->profiler() != nullptr) return true;
  return false;
}
void profileLaunchStart(CommOps& w, const exec::Lane& lane, LaunchEvents* out);
void profileLaunchStop(Communicator* comm, LaunchEvents* events);

}  // namespace theseus::comm
