// Group internals used by the lifecycle and by tests.
#pragma once

#include <functional>
#include <vector>

#include "comm/group.h"

namespace theseus::comm {

// Queues releasing a communicator (destroy, abort) in the current group, or
// runs it now outside a group. Releases are exempt from the rule against mixing
// blocking and non-blocking communicators, and run after everything else.
Status enqueueRelease(Communicator* comm, std::function<Status()> job);

// Replaces executeOps/estimateOps (tests of the group logic); nullptr restores them.
using OpsRunner = Status (*)(std::vector<CommOps>& work);
using OpsEstimator = Status (*)(const std::vector<CommOps>& work, float* microseconds);
void setOpsRunnersForTesting(OpsRunner run, OpsEstimator estimate);

}  // namespace theseus::comm
