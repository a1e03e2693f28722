#include "schedule/builtin_common.h"

#include <numeric>

#include "schedule/analysis.h"

namespace theseus::schedule::builtin {

Builder::Builder(const GenerateRequest& req, const std::string& name, uint32_t chunksPerBlock, uint32_t nchannels,
                 uint32_t scratchBlocks)
    : only_(req.onlyRank) {
  p_.name = name;
  p_.collective = req.collective;
  p_.nranks = req.nranks;
  p_.root = isRooted(req.collective) ? req.root : 0;
  p_.inPlace = req.inPlace;
  p_.chunksPerBlock = chunksPerBlock;
  p_.nchannels = nchannels;
  p_.scratchBlocks = scratchBlocks;
  p_.ranks.resize(req.nranks);
}

ChunkRange Builder::at(Buf b, uint32_t block, const Slice& s, uint32_t k0, uint32_t count) const {
  return ChunkRange{b, block * p_.chunksPerBlock + s.base + k0, count ? count : s.size};
}

std::vector<ChunkRange> Builder::blocks(Buf b, uint32_t first, uint32_t n, const Slice& s) const {
  if (s.size == p_.chunksPerBlock) return {ChunkRange{b, first * p_.chunksPerBlock, n * p_.chunksPerBlock}};
  std::vector<ChunkRange> out;
  for (uint32_t i = 0; i < n; ++i) out.push_back(at(b, first + i, s));
  return out;
}

void Builder::add(int rank, Step step) {
  if (wants(rank)) p_.ranks[rank].steps.push_back(std::move(step));
}

void Builder::send(int rank, const Slice& s, int to, const ChunkRange& src) {
  Step st;
  st.op = Op::kSend;
  st.channel = s.channel;
  st.sendPeer = to;
  st.src = src;
  add(rank, std::move(st));
}

void Builder::recv(int rank, const Slice& s, int from, const ChunkRange& dst) {
  Step st;
  st.op = Op::kRecv;
  st.channel = s.channel;
  st.recvPeer = from;
  st.dst = dst;
  add(rank, std::move(st));
}

void Builder::recvReduce(int rank, const Slice& s, int from, const ChunkRange& src, const ChunkRange& dst) {
  Step st;
  st.op = Op::kRecvReduce;
  st.channel = s.channel;
  st.recvPeer = from;
  st.src = src;
  st.dst = dst;
  add(rank, std::move(st));
}

void Builder::recvCopySend(int rank, const Slice& s, int from, int to, const ChunkRange& dst) {
  Step st;
  st.op = Op::kRecvCopySend;
  st.channel = s.channel;
  st.recvPeer = from;
  st.sendPeer = to;
  st.dst = dst;
  add(rank, std::move(st));
}

void Builder::recvReduceSend(int rank, const Slice& s, int from, int to, const ChunkRange& src) {
  Step st;
  st.op = Op::kRecvReduceSend;
  st.channel = s.channel;
  st.recvPeer = from;
  st.sendPeer = to;
  st.src = src;
  add(rank, std::move(st));
}

void Builder::recvReduceCopySend(int rank, const Slice& s, int from, int to, const ChunkRange& src,
                                 const ChunkRange& dst) {
  Step st;
  st.op = Op::kRecvReduceCopySend;
  st.channel = s.channel;
  st.recvPeer = from;
  st.sendPeer = to;
  st.src = src;
  st.dst = dst;
  add(rank, std::move(st));
}

void Builder::copy(int rank, const ChunkRange& src, const ChunkRange& dst, bool keepSelf) {
  PhysRange a = physicalRange(p_, rank, src), b = physicalRange(p_, rank, dst);
  if (a.buf == b.buf && a.first == b.first && !keepSelf) return;
  Step st;
  st.op = Op::kCopy;
  st.src = src;
  st.dst = dst;
  add(rank, std::move(st));
}

std::vector<Slice> channelSlices(int channels, uint32_t perChannel) {
  std::vector<Slice> out;
  for (int c = 0; c < channels; ++c)
    out.push_back(Slice{static_cast<uint32_t>(c) * perChannel, perChannel, static_cast<uint8_t>(c)});
  return out;
}

std::vector<int> rankOrder(const GenerateRequest& req) {
  if (!req.params.order.empty()) return req.params.order;
  std::vector<int> order(req.nranks);
  std::iota(order.begin(), order.end(), 0);
  return order;
}

uint32_t pipelineChunks(const GenerateRequest& req) {
  return static_cast<uint32_t>(req.params.pipelineChunks > 0 ? req.params.pipelineChunks
                                                             : ScheduleParams::kDefaultPipelineChunks);
}

Fold::Fold(int nranks) {
  while (p * 2 <= nranks) p *= 2;
  extra = nranks - p;
}

}  // namespace theseus::schedule::builtin
