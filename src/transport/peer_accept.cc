#include "transport/peer_accept.h"

#include <algorithm>

namespace theseus::transport {

Result<int> acceptFromPeer(bootstrap::Bootstrap& boot, int peer, uint32_t tag, Deadline deadline,
                           const AbortFlag* abort, const std::atomic<bool>& cancel, int64_t timeoutMs,
                           const std::string& what) {
  for (;;) {
    if (cancel.load()) return internalError("connection set-up cancelled");
    if (abort != nullptr && abort->isSet()) return remoteError("communicator aborted while waiting for rank %d", peer);
    if (deadline.expired())
      return remoteError("rank %d did not open %s within %lld ms", peer, what.c_str(),
                         static_cast<long long>(timeoutMs));
    Deadline slice = Deadline::afterMs(std::min<int64_t>(200, deadline.remainingMs()));
    auto fd = boot.acceptFrom(peer, tag, slice);
    if (fd.isOk()) return fd;
    if (slice.remainingMs() > 5) return fd.status();
  }
}

}  // namespace theseus::transport
