// SCAFFOLD (temporary, replaced by the shm/socket transports and the allocator).
#include "transport/memory.h"
#include "transport/transport_manager.h"

namespace theseus::transport {

Result<void*> memAlloc(size_t) { return internalError("ncclMemAlloc is not implemented yet"); }
Status memFree(void*) { return internalError("ncclMemFree is not implemented yet"); }
Result<std::unique_ptr<TransportManager>> createTransportManager(bootstrap::Bootstrap&, const TransportOptions&) {
  return internalError("transports are not implemented yet");
}

}  // namespace theseus::transport
