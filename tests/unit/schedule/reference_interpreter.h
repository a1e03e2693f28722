// A reference interpreter for schedule programs, independent of the verifier:
// it runs a program on small integer arrays (sum as the reduction) in-process
// and compares every output element with the collective's definition.
//
// Memory is laid out like a real call: in place, the input really is a view
// into the output (or the reverse), so aliasing mistakes show up as wrong
// numbers. Messages are buffered queues per (sender, receiver, channel); among
// the steps that may run (waitFor complete, message available, previous
// send/receive of the same stream done) it always runs the *last* one of a
// rank first, the order most likely to expose a missing hazard edge.
#pragma once

#include <cstddef>
#include <string>

#include "schedule/ir.h"

namespace theseus::schedule::testing {

// Runs `p` with `unit` elements per block. Returns "" when every defined
// output element is right and out-of-place inputs are untouched, else a
// description of the first problem.
std::string runAndCheck(const Program& p, size_t unit, unsigned seed = 1);

}  // namespace theseus::schedule::testing
