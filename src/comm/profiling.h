// Where a communicator's operations meet the NCCL profiler plugin
// (telemetry/nccl_profiler.h lists the events and their nesting). Every hook
// returns at once when the communicator has no profiler session.
#pragma once

#include <vector>

#include "comm/group.h"
#include "exec/executor.h"

namespace theseus::comm {

// An explicit group: the GroupApi event when a communicator first queues an
// operation in it (depth = the group nesting then), and its end.
void profileGroupJoined(CommOps& w, int depth);
void profileGroupEndStarts(CommOps& w);
void profileGroupDone(CommOps& w);

// The CollApi/P2pApi event of one call (parent: the group's GroupApi event).
void profileApiStart(Communicator* comm, OpDesc& op, void* groupApiEvent);
void profileApiStop(Communicator* comm, OpDesc& op);

// The events of one launch of a communicator's lowered operations: Group,
// Coll/P2p, KernelLaunch and ProxyOp, started before the executor runs and
// stopped (innermost first) after it returns, whatever it returned.
struct LaunchEvents {
  void* group = nullptr;
  void* kernel = nullptr;
  std::vector<void*> ops;      // per operation of the CommOps
  std::vector<void*> proxies;
};
void profileLaunchStart(CommOps& w, const exec::Lane& lane, LaunchEvents* out);
void profileLaunchStop(Communicator* comm, LaunchEvents* events);

}  // namespace theseus::comm
