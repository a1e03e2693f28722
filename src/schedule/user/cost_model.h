// An alpha-beta cost estimate of a schedule program, for the theseus-schedule
// tool and for policies that want to rank candidate schedules.
//
// Model. Every message costs alpha + size / beta on its directed link
// (from, to) - the defaults, or that link's own values when LinkParams has
// per-link ones; a link carries one message at a time (channels share it), in
// the order messages become ready; with ports (LinkParams::portOf) a rank's
// messages to and from other hosts also take turns on its host's NIC. Copies and local reductions cost
// size / local_bandwidth (free when local_bandwidth is 0). Steps follow the
// executor's rules (analysis.h): a step starts when the steps it waits for
// are complete; its receive needs the previous receive of its stream done;
// its send needs its own receive (fused ops), the previous send of its
// stream, and a receiver that is ready for the message (rendezvous). Steps
// are whole (no slicing), so pipelining shows only through chunking: a ring
// with chunks_per_block = n streams, one with a single chunk does not.
//
// Sizes. `bytes` is the size of one block in bytes, i.e. NCCL's count times
// the element size (count for allreduce/broadcast/reduce, sendcount for
// allgather, recvcount for reducescatter, the per-peer count for alltoall,
// gather and scatter).
//
// The critical path is the chain of events that determined the finishing
// time: each event (a step starting, receiving, sending, completing)
// remembers which earlier event it waited for last.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "schedule/ir.h"

namespace theseus::schedule::user {

struct LinkParams {
  double alphaUs = 5.0;     // per-message latency, microseconds
  double betaGBps = 10.0;   // link bandwidth, GB/s (1e9 bytes per second)
  double localGBps = 0.0;   // copy/reduce bandwidth, GB/s; 0 = free
  // Optional per-link values for links that differ from the defaults above
  // (measured attributes, a throttled link): nranks * nranks entries, row
  // `from`, column `to`; an entry <= 0 keeps the default. Empty: none.
  std::vector<double> linkGBps;
  std::vector<double> linkAlphaUs;
  // Optional ports (NICs), one id per rank (e.g. its host): a message between
  // ranks of different ports also occupies the sender's port and the
  // receiver's port for its transfer time, so a port sends one message at a
  // time and receives one at a time (full duplex) - a tree's interior rank
  // sending to two children pays for both. Messages within a port use only
  // their link. Empty: no ports, every link is independent.
  std::vector<int> portOf;
};

struct LinkLoad {
  int from = 0;
  int to = 0;
  uint64_t bytes = 0;
  uint32_t messages = 0;
};

struct CriticalStep {
  int rank = 0;
  uint32_t step = 0;
  double startUs = 0;  // when the step started
  double endUs = 0;    // when it completed
};

struct CostEstimate {
  double timeUs = 0;                   // when the last rank completes its last step
  std::vector<double> rankTimeUs;      // per rank
  std::vector<LinkLoad> links;         // every directed link used, sorted by (from, to)
  uint64_t totalBytes = 0;             // over all messages
  uint32_t messages = 0;
  uint64_t maxLinkBytes = 0;
  std::vector<CriticalStep> criticalPath;  // first to last
};

// Needs every rank's program (not an onlyRank program). Fails when the
// program is malformed or cannot finish (a verified program always can).
Result<CostEstimate> estimateCost(const Program& program, size_t bytes, const LinkParams& link);

}  // namespace theseus::schedule::user
