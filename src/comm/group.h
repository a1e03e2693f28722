// Groups (ncclGroupStart/End): thread-local and nestable. Everything issued
// inside a group is deferred to the outermost ncclGroupEnd:
//  * communicator jobs (init, split, shrink, finalize, destroy): run
//    concurrently, one thread each, so one thread can initialise several ranks
//    of one communicator; with a non-blocking config they continue in the
//    background and ncclGroupEnd returns ncclInProgress;
//  * operations (collectives, send/recv): handed together, per communicator,
//    to the collective engine, which progresses all communicators of the group
//    at once (one thread may drive several ranks).
// A call made outside a group is an implicit group of one.
#pragma once

#include <functional>
#include <vector>

#include "common/status.h"
#include "device/memory_kind.h"
#include "nccl.h"
#include "schedule/ir.h"

namespace theseus::comm {

class Communicator;

struct OpDesc {
  enum class Kind : uint8_t { kCollective, kSend, kRecv };
  Kind kind = Kind::kCollective;
  schedule::Collective collective = schedule::Collective::kAllReduce;
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  size_t count = 0;            // elements, with NCCL's meaning for the call
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  int root = 0;                // rooted collectives
  int peer = -1;               // send/recv
  cudaStream_t stream = nullptr;
  // Where the buffers live (classified once per group, before lowering).
  device::MemoryKind sendMemory = device::MemoryKind::kHost;
  device::MemoryKind recvMemory = device::MemoryKind::kHost;
  void* apiEvent = nullptr;    // the NCCL profiler's CollApi/P2pApi event (comm/profiling.h)
};

// The operations of one group on one communicator, in issue order.
struct CommOps {
  Communicator* comm = nullptr;
  std::vector<OpDesc> ops;
  void* groupApiEvent = nullptr;  // the NCCL profiler's GroupApi event of an explicit group
  device::MemoryKindMask kinds = 0;  // the kinds of the buffers its ranks use (classifyGroup; 0: none known)
};

Status groupStart();
Status groupEnd();
Status groupSimulateEnd(ncclSimInfo_t* info);
int groupDepth();

// Queues an operation (validated by the caller) in the current group, or runs
// it at once as an implicit group.
Status enqueueOp(Communicator* comm, const OpDesc& op);

// Queues a communicator job. `comm` is the communicator the job creates or acts
// on (its async error tracks the job when non-blocking). Outside a group it
// runs at once.
Status enqueueJob(Communicator* comm, bool blocking, std::function<Status()> job);

// Implemented in comm/enqueue.cc: lowers the operations of a group on every
// communicator and runs them with the executor for their memory.
Status executeOps(std::vector<CommOps>& work);
// Estimated time in microseconds of the operations, without running them.
Status estimateOps(const std::vector<CommOps>& work, float* microseconds);

}  // namespace theseus::comm
