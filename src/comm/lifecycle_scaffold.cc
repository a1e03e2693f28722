// SCAFFOLD (temporary, replaced by the lifecycle implementation): lets the
// library link while the bootstrap and lifecycle are being written.
#include "comm/config.h"
#include "comm/group.h"
#include "comm/lifecycle.h"

namespace theseus::comm {
namespace {
Status notYet(const char* what) { return internalError("%s is not implemented yet", what); }
}  // namespace

Status getUniqueId(ncclUniqueId*) { return notYet("ncclGetUniqueId"); }
Status commInitRank(ncclComm_t*, int, const ncclUniqueId*, int, int, const ncclConfig_t*) {
  return notYet("ncclCommInitRank");
}
Status commInitAll(ncclComm_t*, int, const int*) { return notYet("ncclCommInitAll"); }
Status commSplit(Communicator*, int, int, ncclComm_t*, const ncclConfig_t*) { return notYet("ncclCommSplit"); }
Status commShrink(Communicator*, const int*, int, ncclComm_t*, const ncclConfig_t*, int) {
  return notYet("ncclCommShrink");
}
Status commFinalize(Communicator*) { return notYet("ncclCommFinalize"); }
Status commDestroy(Communicator*) { return notYet("ncclCommDestroy"); }
Status commAbort(Communicator*) { return notYet("ncclCommAbort"); }
Status commRevoke(Communicator*, int) { return notYet("ncclCommRevoke"); }
Status groupStart() { return notYet("ncclGroupStart"); }
Status groupEnd() { return notYet("ncclGroupEnd"); }
Status groupSimulateEnd(ncclSimInfo_t*) { return notYet("ncclGroupSimulateEnd"); }
int groupDepth() { return 0; }
Status enqueueOp(Communicator*, const OpDesc&) { return notYet("operations"); }
Status enqueueJob(Communicator*, bool, std::function<Status()>) { return notYet("communicator jobs"); }

}  // namespace theseus::comm
