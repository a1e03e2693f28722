// One timeout a user can rely on (issue 14): THESEUS_TIMEOUT_MS, or theseusCommSetTimeout for one
// communicator, bounds every wait of a communicator: its initialisation and later control-plane
// exchanges (bootstrap), an operation that makes no progress (the executor's stall timeout), and
// a rank waiting at its lease's horizon for the leader (epochs). Each wait keeps its own knob
// too (THESEUS_BOOTSTRAP_TIMEOUT_MS, THESEUS_STALL_TIMEOUT_MS, THESEUS_EPOCH_WAIT_TIMEOUT_MS);
// the shorter of the two applies.
#pragma once

#include <cstdint>

#include "common/deadline.h"

namespace theseus::comm {

// THESEUS_TIMEOUT_MS (0 or negative: none): new communicators start with it.
int64_t configuredTimeoutMs();

// Each wait applies boundedWaitMs(communicator timeout, its own limit) (common/deadline.h).

}  // namespace theseus::comm
