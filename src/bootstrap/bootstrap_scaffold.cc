// SCAFFOLD (temporary, replaced by the bootstrap implementation).
#include "bootstrap/bootstrap.h"

namespace theseus::bootstrap {

Status createUniqueId(ncclUniqueId*) { return internalError("bootstrap is not implemented yet"); }
Result<std::unique_ptr<Bootstrap>> createFromUniqueIds(const ncclUniqueId*, int, int, int, const InitOptions&) {
  return internalError("bootstrap is not implemented yet");
}
Result<std::unique_ptr<Bootstrap>> createChild(Bootstrap&, const std::vector<int>&, uint64_t, const InitOptions&) {
  return internalError("bootstrap is not implemented yet");
}

}  // namespace theseus::bootstrap
