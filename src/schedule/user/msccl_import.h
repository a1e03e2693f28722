// MSCCL-style XML algorithms imported into the schedule IR.
//
// Input: <algo name nchunksperloop nchannels ngpus coll inplace [outofplace]
// [proto] [minBytes maxBytes] [redop]> holding one <gpu id i_chunks o_chunks
// s_chunks> per rank, each holding thread blocks <tb id send recv chan> of
// ordered <step s type srcbuf srcoff dstbuf dstoff cnt depid deps hasdep>.
//
// Semantics (what an MSCCL runtime does, restated for the IR):
//  * A thread block runs its steps in order; thread blocks run concurrently.
//    A step with depid=t deps=k waits until step k of thread block t is done.
//    "nop" steps only carry dependencies: MSCCL attaches the dependencies of
//    a run of nops to the next real step of the same thread block.
//  * A thread block has at most one send peer and one receive peer, and MSCCL
//    connects (peer, channel) pairs one to one, so messages between two GPUs
//    on a channel come from exactly one thread block on each side, in its
//    step order: that is the IR's in-order matching per (peer, channel).
//  * Step types map to IR ops: s send, r recv, rcs recv_copy_send, rrs
//    recv_reduce_send, rrc recv_reduce, rrcs recv_reduce_copy_send, cpy copy,
//    re reduce (dst = dst (+) src). Anything else (res, custom collectives,
//    send/recv/alltoallv algorithms) is rejected.
//  * Chunk geometry: nchunksperloop chunks cover the larger of the input and
//    output buffers, so an IR block has nchunksperloop / max(input blocks,
//    output blocks) chunks and MSCCL chunk j of a buffer is IR chunk j. The
//    scratch buffer gets ceil(max s_chunks / chunks_per_block) blocks.
//
// Lowering. The IR has one ordered step list per rank, with hazards (steps
// touching overlapping memory wait for earlier ones), in-order messages per
// (peer, channel) and explicit deps. The import merges a GPU's thread blocks
// into one list by a topological order of "thread-block order + deps"
// (ties: lower step index first, then lower thread block id), so every
// dependency points backwards, and gives each step explicit deps on the steps
// MSCCL makes it wait for across thread blocks (nop chains resolved). Program
// order *within* a thread block is deliberately not turned into deps: the IR
// already orders every pair of steps that touch the same memory or the same
// (peer, channel) stream, and waiting for unrelated earlier steps would add
// wait-for edges MSCCL's buffered connections do not have (a thread block
// that sends and then receives from the same peer would deadlock under the
// verifier's rendezvous model although it is fine as written). MSCCL programs
// that *rely* on buffering - a step overwriting a chunk that an earlier step of
// the same rank is still sending to a peer who waits for us - are reported by
// the verifier as deadlocks; stage such data through scratch instead.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "schedule/user/fixed_schedule.h"

namespace theseus::schedule::user {

Result<std::shared_ptr<FixedSchedule>> parseMscclXml(const std::string& text, const std::string& path);
Result<std::shared_ptr<FixedSchedule>> loadMscclXml(const std::string& path);

}  // namespace theseus::schedule::user
