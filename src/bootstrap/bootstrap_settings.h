// The bootstrap's tunables (knob registry), read when a communicator is made.
#pragma once

#include <cstddef>
#include <cstdint>

namespace theseus::bootstrap {

// THESEUS_BOOTSTRAP_TIMEOUT_MS: rendezvous, control links, out-of-band collectives.
int64_t bootstrapTimeoutMs();
// THESEUS_CONNECT_TIMEOUT_MS: connectTo/acceptFrom of data connections (and the transports).
int64_t connectTimeoutMs();
// THESEUS_BOOTSTRAP_ROOT_TTL_MS: how long a root listener waits for its first rank.
int64_t rootTtlMs();
// THESEUS_BOOTSTRAP_MAX_MSG_BYTES: largest control message (allGather contribution or result).
size_t maxMessageBytes();

}  // namespace theseus::bootstrap
