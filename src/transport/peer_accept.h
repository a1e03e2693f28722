// Claiming a peer's data connection from the bootstrap (acceptFrom) on a
// set-up helper thread, in short slices so that cancellation (the connection
// is destroyed) and abort are noticed while the peer has not come yet.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "bootstrap/bootstrap.h"
#include "common/deadline.h"
#include "common/status.h"

namespace theseus::transport {

// `what` names the connection in the timeout error ("its TCP connection (channel 0, socket 1)");
// `timeoutMs` is the length quoted there. An error that comes before a slice ran out is a real
// failure (the peer died, the bootstrap closed) and is returned as such.
Result<int> acceptFromPeer(bootstrap::Bootstrap& boot, int peer, uint32_t tag, Deadline deadline,
                           const AbortFlag* abort, const std::atomic<bool>& cancel, int64_t timeoutMs,
                           const std::string& what);

}  // namespace theseus::transport
