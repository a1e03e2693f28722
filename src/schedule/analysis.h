// Program analysis: which earlier steps each step of a rank's program must wait
// for. Computed once per program (the program cache stores it) and shared by
// the executor and the verifier, so both run programs under the same rules.
//
// Execution model (what the executor implements and the verifier simulates).
// A step has up to two communication phases: a receive (ops that receive) and
// a send (ops that send); a fused recv*send step sends what it received, so its
// send never overtakes its receive. A step
//   * STARTS when every step in `waitFor` is COMPLETE (explicit deps and memory
//     hazards: RAW, WAR, WAW on the chunks it reads and writes; after in-place
//     aliasing both buffers are one address space at chunk granularity);
//   * RECEIVES once started and once `recvAfter` (the previous step receiving
//     from the same (peer, channel)) has received: messages match in order;
//   * SENDS once started, once it has received (fused ops), and once
//     `sendAfter` (the previous step sending to the same (peer, channel)) has
//     sent;
//   * is COMPLETE when its last phase is done (local ops: when they ran).
// Message ordering is phase-to-phase on purpose: if it were start-after-
// complete, a ring step forwarding to its neighbour could not receive before
// its previous send was consumed, and every fused ring would deadlock.
//
// The verifier proves deadlock freedom under rendezvous (a send completes only
// when the receiver is ready for that message, zero buffering) for whole
// steps. An executor that streams a step in slices through finite buffers keeps
// that guarantee if it runs the program slice-major (every step on slice i
// before any step on slice i+1, as NCCL's primitives do): each slice round is
// the same program with a smaller unit.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "schedule/ir.h"

namespace theseus::schedule {

// A chunk range in a rank's physical address space: for in-place programs the
// contained buffer (ir.h inPlaceAlias) is mapped into its container, so
// ranges that alias compare equal.
struct PhysRange {
  Buf buf = Buf::kInput;
  uint32_t first = 0;
  uint32_t count = 0;
};
PhysRange physicalRange(const Program& p, int rank, const ChunkRange& r);
inline bool overlaps(const PhysRange& a, const PhysRange& b) {
  return a.buf == b.buf && a.first < b.first + b.count && b.first < a.first + a.count;
}

// Whether a buffer exists on a rank, as NCCL defines the call: broadcast and
// scatter read the input only on the root, reduce and gather write the output
// only on the root; scratch exists when the program asks for it.
bool bufferPresent(Collective c, int rank, int root, Buf b);
// Out-of-place inputs are read-only (NCCL never writes sendbuff); in place the
// input is part of the output and may be written where the output exists.
bool inputWritable(const Program& p, int rank);

// The message ops read: src when opReadsSrc, plus dst for kReduce.
inline bool opReadsDst(Op op) { return op == Op::kReduce; }
// Ops whose src and dst must have the same geometry.
inline bool opHasTwoOperands(Op op) {
  return op == Op::kCopy || op == Op::kReduce || op == Op::kRecvReduce || op == Op::kRecvReduceCopySend;
}
// The range a step's message covers (received and/or sent).
const ChunkRange& messageRange(const Step& s);

struct StepPlan {
  std::vector<uint32_t> waitFor;  // complete-before-start; ascending, transitively reduced
  std::vector<uint32_t> unblocks; // the reverse edges: steps whose waitFor lists this one
  int32_t recvAfter = -1;         // previous step receiving from the same (recvPeer, channel)
  int32_t sendAfter = -1;         // previous step sending to the same (sendPeer, channel)
  uint32_t recvSeq = 0;           // index of the received message in its (peer -> me, channel) stream
  uint32_t sendSeq = 0;           // index of the sent message in its (me -> peer, channel) stream
};

struct RankPlan {
  std::vector<StepPlan> steps;
  std::vector<int> peers;  // ranks this rank sends to or receives from, ascending
};

// Analyses one rank. Fails (without touching memory out of bounds) when the
// program is structurally malformed; verifyProgram says precisely why.
Result<RankPlan> analyzeRank(const Program& p, int rank);
// Every rank (ranks with empty programs get empty plans).
Result<std::vector<RankPlan>> analyzeProgram(const Program& p);

// Per-step checks that need no other rank: peers, channels, ranges, buffers,
// geometry of two-operand ops, deps, reductions in non-reducing collectives.
// Messages name the rank, step index and op. rank = -1 checks every rank.
Status checkStructure(const Program& p, int rank = -1);

}  // namespace theseus::schedule
