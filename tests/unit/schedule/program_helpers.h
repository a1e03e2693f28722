// Short constructors for hand-written test programs.
#pragma once

#include <string>
#include <vector>

#include "schedule/ir.h"

namespace theseus::schedule::testing {

inline ChunkRange in(uint32_t first, uint32_t count = 1) { return {Buf::kInput, first, count}; }
inline ChunkRange out(uint32_t first, uint32_t count = 1) { return {Buf::kOutput, first, count}; }
inline ChunkRange scr(uint32_t first, uint32_t count = 1) { return {Buf::kScratch, first, count}; }

inline Step step(Op op, int recvPeer, int sendPeer, ChunkRange src, ChunkRange dst, uint8_t channel = 0,
                 std::vector<uint32_t> deps = {}) {
  Step s;
  s.op = op;
  s.recvPeer = recvPeer;
  s.sendPeer = sendPeer;
  s.src = src;
  s.dst = dst;
  s.channel = channel;
  s.deps = std::move(deps);
  return s;
}
inline Step send(int to, ChunkRange src, uint8_t ch = 0) { return step(Op::kSend, -1, to, src, {}, ch); }
inline Step recv(int from, ChunkRange dst, uint8_t ch = 0) { return step(Op::kRecv, from, -1, {}, dst, ch); }
inline Step recvReduce(int from, ChunkRange src, ChunkRange dst) {
  return step(Op::kRecvReduce, from, -1, src, dst);
}
inline Step copy(ChunkRange src, ChunkRange dst) { return step(Op::kCopy, -1, -1, src, dst); }
inline Step reduce(ChunkRange src, ChunkRange dst) { return step(Op::kReduce, -1, -1, src, dst); }

inline Program program(Collective c, std::vector<std::vector<Step>> ranks, uint32_t chunksPerBlock = 1,
                       uint32_t scratchBlocks = 0, bool inPlace = false, uint32_t nchannels = 1, int root = 0) {
  Program p;
  p.name = "test";
  p.collective = c;
  p.nranks = static_cast<int>(ranks.size());
  p.root = root;
  p.inPlace = inPlace;
  p.chunksPerBlock = chunksPerBlock;
  p.scratchBlocks = scratchBlocks;
  p.nchannels = nchannels;
  for (auto& steps : ranks) p.ranks.push_back(RankProgram{std::move(steps)});
  return p;
}

}  // namespace theseus::schedule::testing
