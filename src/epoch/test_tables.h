// Random decision tables for stress-testing the epoch protocol
// (THESEUS_EPOCH_TEST_SWAP_EVERY=N makes the leader swap to a new one every N
// collectives). Each table is a pure function of (seed, version, nranks): per
// collective one to three size ranges covering [0, inf), each with a built-in
// schedule that serves the collective and random parameters it accepts (ring
// order, channels, direction, pipeline depth) and a random slice size — so
// consecutive collectives keep changing programs, connections and slicing.
#pragma once

#include <cstdint>

#include "policy/decision_table.h"

namespace theseus::epoch {

struct RandomTableLimits {
  int maxChannels = 2;           // <= THESEUS_MAX_CHANNELS
  uint64_t maxSliceBytes = 128 << 10;  // slices never exceed the transports' slots
};

policy::DecisionTable randomTable(uint64_t seed, uint64_t version, int nranks, const RandomTableLimits& limits);

}  // namespace theseus::epoch
