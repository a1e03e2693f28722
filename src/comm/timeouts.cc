#include "comm/timeouts.h"

#include "common/knobs.h"

namespace theseus::comm {
namespace {

const IntKnob kTimeoutMs("THESEUS_TIMEOUT_MS", 0,
                         "One bound on every wait of a communicator, in ms: initialisation and control-plane "
                         "exchanges, an operation that makes no progress, a wait for the epoch leader (the shorter "
                         "of this and each wait's own timeout applies; 0: each wait's own; theseusCommSetTimeout "
                         "changes it for one communicator)");

}  // namespace

int64_t configuredTimeoutMs() { return kTimeoutMs.get() > 0 ? kTimeoutMs.get() : 0; }

}  // namespace theseus::comm
