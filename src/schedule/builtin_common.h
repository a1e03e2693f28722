// Internal to the built-in generators: the program builder, channel slices,
// the rank fold of non-power-of-two recursive algorithms, and the generator
// entry points builtins.cc dispatches to.
#pragma once

#include <string>
#include <vector>

#include "schedule/builtins.h"
#include "schedule/ir.h"

namespace theseus::schedule::builtin {

// One channel's share of every block: sub-chunks [base, base + size) of the
// program's chunksPerBlock, carried on `channel`. Channels never share chunks,
// so their steps are independent.
struct Slice {
  uint32_t base = 0;
  uint32_t size = 1;
  uint8_t channel = 0;
};

// Appends steps to a Program under construction. With req.onlyRank >= 0,
// steps of other ranks are dropped (generators still walk every rank, so a
// rank's program is identical whether generated alone or with the others).
class Builder {
 public:
  Builder(const GenerateRequest& req, const std::string& name, uint32_t chunksPerBlock, uint32_t nchannels,
          uint32_t scratchBlocks);

  bool wants(int rank) const { return only_ < 0 || only_ == rank; }
  const Program& program() const { return p_; }
  Program finish() { return std::move(p_); }

  // Sub-chunks [k0, k0 + count) of `slice` in block `block` (count 0: the whole slice).
  ChunkRange at(Buf b, uint32_t block, const Slice& s, uint32_t k0 = 0, uint32_t count = 0) const;
  // Blocks [first, first + n) of `slice`: one range when the slice is the whole
  // block (then consecutive blocks are contiguous), else one range per block.
  std::vector<ChunkRange> blocks(Buf b, uint32_t first, uint32_t n, const Slice& s) const;

  void send(int rank, const Slice& s, int to, const ChunkRange& src);
  void recv(int rank, const Slice& s, int from, const ChunkRange& dst);
  void recvReduce(int rank, const Slice& s, int from, const ChunkRange& src, const ChunkRange& dst);
  void recvCopySend(int rank, const Slice& s, int from, int to, const ChunkRange& dst);
  void recvReduceSend(int rank, const Slice& s, int from, int to, const ChunkRange& src);
  void recvReduceCopySend(int rank, const Slice& s, int from, int to, const ChunkRange& src, const ChunkRange& dst);
  // Local copy; omitted when src and dst are the same memory (in-place layouts)
  // unless `keepSelf` (a single rank's reduction: the copy is where a PreMulSum
  // scales its input, see raw_input.h).
  void copy(int rank, const ChunkRange& src, const ChunkRange& dst, bool keepSelf = false);

 private:
  void add(int rank, Step step);

  Program p_;
  int only_;
};

// Channel slices: channel c gets sub-chunks [c * perChannel, (c + 1) * perChannel).
std::vector<Slice> channelSlices(int channels, uint32_t perChannel);
// params.order, or the identity.
std::vector<int> rankOrder(const GenerateRequest& req);
// params.pipelineChunks, or the default.
uint32_t pipelineChunks(const GenerateRequest& req);

// Recursive algorithms on p = 2^floor(log2 n) "virtual" ranks. The 2*(n - p)
// lowest ranks pair up (2i, 2i+1): the even one hands its data to the odd one
// before and gets the result back after, so virtual rank v is real rank
// 2v + 1 for v < extra and v + extra above. Virtual rank v stands for the real
// blocks [firstBlock(v), lastBlock(v)], and a range of virtual ranks maps to a
// contiguous range of real blocks.
struct Fold {
  explicit Fold(int nranks);
  int p = 1;
  int extra = 0;
  bool foldedOut(int r) const { return r < 2 * extra && r % 2 == 0; }
  bool absorbs(int r) const { return r < 2 * extra && r % 2 == 1; }
  int virtualOf(int r) const { return r < 2 * extra ? r / 2 : r - extra; }
  int realOf(int v) const { return v < extra ? 2 * v + 1 : v + extra; }
  uint32_t firstBlock(int v) const { return static_cast<uint32_t>(v < extra ? 2 * v : v + extra); }
  uint32_t endBlock(int v) const { return static_cast<uint32_t>(v < extra ? 2 * v + 2 : v + extra + 1); }
};

// Generators (one per file). Called with nranks >= 2 and validated parameters.
Result<Program> generateRing(const GenerateRequest& req, const std::string& name);
Result<Program> generateTree(const GenerateRequest& req, const std::string& name);
Result<Program> generateDoubleBinaryTree(const GenerateRequest& req, const std::string& name);
Result<Program> generateRecursiveDoubling(const GenerateRequest& req, const std::string& name);
Result<Program> generateHalvingDoubling(const GenerateRequest& req, const std::string& name);
Result<Program> generateDirect(const GenerateRequest& req, const std::string& name);
Result<Program> generateHierarchical(const GenerateRequest& req, const std::string& name);

// Ring pieces shared with the hierarchical schedule.
// A ring through `members` (ranks) in order; next/prev wrap around.
struct Ring {
  std::vector<int> seq;
  int size() const { return static_cast<int>(seq.size()); }
  int at(int pos) const { return seq[((pos % size()) + size()) % size()]; }
};
// Ring allreduce of one slice: the slice is split into ring.size() segments of
// segLen sub-chunks; member seq[p] reads its data from srcOf(seq[p]) and leaves
// the result in the output.
void ringAllreduce(Builder& b, const Ring& ring, const Slice& s, uint32_t segLen, const std::vector<Buf>& srcOf);

}  // namespace theseus::schedule::builtin
