// The progress engine every executor shares: a single-threaded loop that runs
// lowered plans to completion with a given set of Primitives.
//
// Work is organised in lanes (executor.h): a lane is a sequence of plans
// executed one after the other; lanes progress concurrently.
//
// Within a plan (see plan.h for rounds and pieces), a step works on its rounds
// in order. It may start round r when every predecessor finished round r; it
// may receive when its receive connection's cursor is at (r, its position) and
// send when its send connection's cursor is; after its last piece of the round
// it moves those cursors on. A round of a step is *finished* when its pieces
// moved and, if it sent direct (zero-copy) messages, the receiver released
// them — only then may a dependent step overwrite that memory. The engine
// visits every unfinished step round-robin and moves what it can, never
// blocking on one peer:
//
//   receive-side ops peek the next message and consume it (copy, or reduce
//   with the local operand) straight from the transport slot or, for direct
//   messages, from the sender's memory; send-side ops acquire a slot and write
//   into it (a fused recv-reduce-send reduces *into* the slot), or publish a
//   direct descriptor when the peer can map the data in place.
//
// When a full pass moves nothing, the engine spins briefly, then sleeps on the
// transports' activity doorbell. Every idle period checks the abort flag, the
// lane's health callback (failed peers, revoked communicator) and the stall
// timeout; errors name the step, op and peer that were waiting.
#pragma once

#include <vector>

#include "common/status.h"
#include "exec/executor.h"
#include "exec/primitives.h"

namespace theseus::exec {

// Runs every lane to completion or to the first error (then returns it; the
// other lanes stop too). Plans' buffers and connections must be accessible to
// `prims` (checked: buffers by the caller, connections when a plan starts).
Status progressLanes(std::vector<Lane>& lanes, const Primitives& prims, const ExecOptions& options);

// THESEUS_STALL_TIMEOUT_MS (read once): every executor's stall timeout unless ExecOptions says otherwise.
int64_t configuredStallTimeoutMs();

}  // namespace theseus::exec
