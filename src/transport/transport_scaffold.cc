// SCAFFOLD (temporary, replaced by the shm/socket transports and the allocator):
// a manager with no connections, so communicator init can complete meanwhile.
#include "transport/memory.h"
#include "transport/transport_manager.h"

namespace theseus::transport {
namespace {

class NoTransports final : public TransportManager {
 public:
  Result<SendConnection*> sendConnection(int, int) override { return internalError("transports not implemented yet"); }
  Result<RecvConnection*> recvConnection(int, int) override { return internalError("transports not implemented yet"); }
  Status prepare(const std::vector<int>&, int) override { return internalError("transports not implemented yet"); }
  Kind kindFor(int) const override { return Kind::kShm; }
  uint64_t activityToken() const override { return 0; }
  void waitForActivity(uint64_t, int64_t) override {}
  PeerStats stats(int) const override { return {}; }
};

}  // namespace

Result<void*> memAlloc(size_t) { return internalError("ncclMemAlloc is not implemented yet"); }
Status memFree(void*) { return internalError("ncclMemFree is not implemented yet"); }
Result<std::unique_ptr<TransportManager>> createTransportManager(bootstrap::Bootstrap&, const TransportOptions&) {
  return std::unique_ptr<TransportManager>(new NoTransports());
}

}  // namespace theseus::transport
