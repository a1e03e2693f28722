#include "bootstrap/bootstrap_settings.h"

#include <algorithm>

#include "common/knobs.h"

namespace theseus::bootstrap {
namespace {

const IntKnob kBootstrapTimeoutMs("THESEUS_BOOTSTRAP_TIMEOUT_MS", 120000,
                                  "Longest wait of the bootstrap: for all ranks to join a communicator, for control "
                                  "links, and for out-of-band allGather/barrier (milliseconds)");
const IntKnob kConnectTimeoutMs("THESEUS_CONNECT_TIMEOUT_MS", 60000,
                                "Longest wait for a data connection to a peer (connectTo/acceptFrom), milliseconds");
const IntKnob kRootTtlMs("THESEUS_BOOTSTRAP_ROOT_TTL_MS", 3600000,
                         "How long the root listener started by ncclGetUniqueId waits for the first rank before "
                         "giving up (milliseconds)");
const IntKnob kMaxMessageBytes("THESEUS_BOOTSTRAP_MAX_MSG_BYTES", 64 << 20,
                               "Largest bootstrap control message (an allGather contribution or result), bytes; "
                               "larger ones are rejected");

}  // namespace

int64_t bootstrapTimeoutMs() { return std::max<int64_t>(kBootstrapTimeoutMs.get(), 1); }
int64_t connectTimeoutMs() { return std::max<int64_t>(kConnectTimeoutMs.get(), 1); }
int64_t rootTtlMs() { return std::max<int64_t>(kRootTtlMs.get(), 1); }
size_t maxMessageBytes() { return static_cast<size_t>(std::clamp<int64_t>(kMaxMessageBytes.get(), 4096, 1ll << 31)); }

}  // namespace theseus::bootstrap
