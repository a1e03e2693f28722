// The schedule IR: the one representation every schedule takes, whether a
// built-in generator, a JSON file, an MSCCL XML import or a C++ plugin made it.
//
// Geometry. A collective has a unit of U elements (the per-rank block: `count`
// for allreduce/broadcast/reduce, `sendcount` for allgather, `recvcount` for
// reduce-scatter, the per-peer count for alltoall, ...). Every buffer is a
// whole number of blocks of U elements:
//
//   collective      input blocks   output blocks
//   AllReduce            1              1
//   Broadcast            1              1
//   Reduce               1              1
//   AllGather            1              n
//   ReduceScatter        n              1
//   AlltoAll             n              n
//   Gather               1              n      (output meaningful on root)
//   Scatter              n              1      (input meaningful on root)
//
// plus `scratchBlocks` blocks of scratch that the program asks for. A program
// splits every block into `chunksPerBlock` chunks, so chunk j of any buffer is
// sub-chunk (j % chunksPerBlock) of block (j / chunksPerBlock). Sub-chunk s of
// a block of U elements covers a balanced share of U (the first U % k
// sub-chunks get one extra element). Two chunk ranges therefore have equal
// sizes for every U exactly when they have the same length and start at the same
// sub-chunk index; the verifier checks that for every transfer.
//
// Steps. A rank's program is an ordered list of steps. The executor runs them
// with program-order semantics but overlaps steps that are independent: a step
// waits for earlier steps that touch overlapping memory (read/write hazards),
// for earlier sends/receives on the same (peer, channel) (messages match in
// order), and for its explicit `deps`. Large steps stream in slices, and the
// fused ops let a ring or a tree pipeline slices through a rank without waiting
// for whole chunks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nccl.h"

namespace theseus::schedule {

// Values equal ncclFunc_t of the NCCL plugin headers.
enum class Collective : uint8_t {
  kBroadcast = 0,
  kReduce = 1,
  kAllGather = 2,
  kReduceScatter = 3,
  kAllReduce = 4,
  kAlltoAll = 8,
  kScatter = 9,
  kGather = 10,
};
// Every collective, in enum order (for tests and tools that ask about each).
inline constexpr Collective kEveryCollective[] = {Collective::kBroadcast,     Collective::kReduce,
                                                  Collective::kAllGather,     Collective::kReduceScatter,
                                                  Collective::kAllReduce,     Collective::kAlltoAll,
                                                  Collective::kScatter,       Collective::kGather};
const char* collectiveName(Collective c);          // "allreduce", "allgather", ...
bool parseCollective(const std::string& name, Collective* out);
bool isReducing(Collective c);                      // reduce, reducescatter, allreduce
bool isRooted(Collective c);                        // broadcast, reduce, gather, scatter
// Blocks of U elements in the input/output buffer of a collective with n ranks.
uint32_t inputBlocks(Collective c, int nranks);
uint32_t outputBlocks(Collective c, int nranks);

enum class Buf : uint8_t { kInput = 0, kOutput = 1, kScratch = 2 };
const char* bufName(Buf b);  // "input", "output", "scratch"

// Chunks [first, first + count) of one buffer: contiguous memory.
struct ChunkRange {
  Buf buf = Buf::kInput;
  uint32_t first = 0;
  uint32_t count = 0;
  bool operator==(const ChunkRange&) const = default;
};

enum class Op : uint8_t {
  kSend,                // send src to sendPeer
  kRecv,                // dst = recv(recvPeer)
  kRecvReduce,          // dst = src (+) recv(recvPeer)          (src may equal dst)
  kCopy,                // dst = src
  kReduce,              // dst = dst (+) src
  kRecvCopySend,        // dst = recv(recvPeer); send dst to sendPeer
  kRecvReduceSend,      // send src (+) recv(recvPeer) to sendPeer; nothing stored
  kRecvReduceCopySend,  // dst = src (+) recv(recvPeer); send dst to sendPeer
};
const char* opName(Op op);  // "send", "recv", "recv_reduce", ...
bool parseOp(const std::string& name, Op* out);
// Which operands an op uses.
bool opReceives(Op op);
bool opSends(Op op);
bool opReadsSrc(Op op);
bool opWritesDst(Op op);
bool opReduces(Op op);

struct Step {
  Op op = Op::kSend;
  uint8_t channel = 0;
  int32_t recvPeer = -1;  // rank in the communicator, or -1
  int32_t sendPeer = -1;
  ChunkRange src;         // read locally (unused by kRecv, kRecvCopySend)
  ChunkRange dst;         // written locally (unused by kSend, kRecvReduceSend)
  std::vector<uint32_t> deps;  // extra ordering: indices of earlier steps of this rank
};

struct RankProgram {
  std::vector<Step> steps;
};

// A complete schedule instance: programs for every rank of an n-rank communicator.
struct Program {
  std::string name;            // e.g. "ring(order=0,2,1,3)"; shown in logs and decision logs
  Collective collective = Collective::kAllReduce;
  int nranks = 1;
  int root = 0;                // for rooted collectives
  bool inPlace = false;        // generated for the in-place buffer layout
  uint32_t chunksPerBlock = 1;
  uint32_t scratchBlocks = 0;
  uint32_t nchannels = 1;
  std::vector<RankProgram> ranks;  // size nranks

  // Chunks in a buffer of this program.
  uint32_t chunksIn(Buf b) const;
};

// Element range [begin, begin + size) of chunk range r for unit U (elements per block).
struct ElemRange {
  size_t begin = 0;
  size_t size = 0;
};
ElemRange chunkElems(const Program& p, const ChunkRange& r, size_t unitElems);

// How buffers alias when a collective runs in place (NCCL's definitions):
// `contained` starts at block `block` of `container`.
//   allgather, gather:     input  == output block `rank`
//   reducescatter, scatter: output == input block `rank`
//   others:                 input  == output (block 0)
struct InPlaceAlias {
  Buf container;
  Buf contained;
  uint32_t block;
};
InPlaceAlias inPlaceAlias(Collective c, int rank);

}  // namespace theseus::schedule
