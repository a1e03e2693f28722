// The executor: a single-threaded progress engine that runs lowered plans.
//
// Work is organised in lanes: a lane is a sequence of plans executed one after
// the other (the operations of one communicator in a group, in issue order);
// lanes progress concurrently, so one thread can drive several ranks or
// communicators at once.
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

#include <functional>
#include <vector>

#include "common/status.h"
#include "exec/plan.h"

namespace theseus::exec {

struct Lane {
  std::vector<Plan*> plans;
  // Polled while idle; a non-OK status fails the lane (e.g. a peer died).
  std::function<Status()> health;
  // Called when a plan of the lane completes (telemetry), with its duration
  // and the steady-clock time it ended (one clock read serves every consumer).
  std::function<void(const Plan&, uint64_t ns, uint64_t endNs)> onPlanDone;
};

struct ExecOptions {
  int64_t stallTimeoutMs = 0;   // no progress for this long => error (THESEUS_STALL_TIMEOUT_MS when 0)
};

// Runs every lane to completion or to the first error (then returns it; the
// other lanes stop too: a group fails as a whole).
Status execute(std::vector<Lane>& lanes, const ExecOptions& options = {});

}  // namespace theseus::exec
