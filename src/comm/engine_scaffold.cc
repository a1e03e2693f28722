// SCAFFOLD (temporary, replaced by comm/enqueue.cc and the collective engine).
#include "comm/collective_engine.h"
#include "comm/group.h"

namespace theseus::comm {

Status executeOps(std::vector<CommOps>&) { return internalError("collectives are not implemented yet"); }
Status estimateOps(const std::vector<CommOps>&, float*) { return internalError("not implemented yet"); }
Result<std::unique_ptr<CollectiveEngine>> createCollectiveEngine(Communicator&) {
  return internalError("the collective engine is not implemented yet");
}

}  // namespace theseus::comm
