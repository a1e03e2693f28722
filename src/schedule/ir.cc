#include "schedule/ir.h"

namespace theseus::schedule {

const char* collectiveName(Collective c) {
  switch (c) {
    case Collective::kBroadcast: return "broadcast";
    case Collective::kReduce: return "reduce";
    case Collective::kAllGather: return "allgather";
    case Collective::kReduceScatter: return "reducescatter";
    case Collective::kAllReduce: return "allreduce";
    case Collective::kAlltoAll: return "alltoall";
    case Collective::kScatter: return "scatter";
    case Collective::kGather: return "gather";
  }
  return "unknown";
}

bool parseCollective(const std::string& name, Collective* out) {
  static const Collective all[] = {Collective::kBroadcast,     Collective::kReduce,    Collective::kAllGather,
                                   Collective::kReduceScatter, Collective::kAllReduce, Collective::kAlltoAll,
                                   Collective::kScatter,       Collective::kGather};
  std::string lower;
  for (char ch : name)
    if (ch != '_' && ch != '-') lower += static_cast<char>(tolower(static_cast<unsigned char>(ch)));
  for (Collective c : all) {
    if (lower == collectiveName(c)) {
      *out = c;
      return true;
    }
  }
  return false;
}

bool isReducing(Collective c) {
  return c == Collective::kReduce || c == Collective::kReduceScatter || c == Collective::kAllReduce;
}

bool isRooted(Collective c) {
  return c == Collective::kBroadcast || c == Collective::kReduce || c == Collective::kGather ||
         c == Collective::kScatter;
}

uint32_t inputBlocks(Collective c, int nranks) {
  switch (c) {
    case Collective::kReduceScatter:
    case Collective::kAlltoAll:
    case Collective::kScatter: return static_cast<uint32_t>(nranks);
    default: return 1;
  }
}

uint32_t outputBlocks(Collective c, int nranks) {
  switch (c) {
    case Collective::kAllGather:
    case Collective::kAlltoAll:
    case Collective::kGather: return static_cast<uint32_t>(nranks);
    default: return 1;
  }
}

const char* bufName(Buf b) {
  switch (b) {
    case Buf::kInput: return "input";
    case Buf::kOutput: return "output";
    case Buf::kScratch: return "scratch";
  }
  return "unknown";
}

const char* opName(Op op) {
  switch (op) {
    case Op::kSend: return "send";
    case Op::kRecv: return "recv";
    case Op::kRecvReduce: return "recv_reduce";
    case Op::kCopy: return "copy";
    case Op::kReduce: return "reduce";
    case Op::kRecvCopySend: return "recv_copy_send";
    case Op::kRecvReduceSend: return "recv_reduce_send";
    case Op::kRecvReduceCopySend: return "recv_reduce_copy_send";
  }
  return "unknown";
}

bool parseOp(const std::string& name, Op* out) {
  static const Op all[] = {Op::kSend,         Op::kRecv,           Op::kRecvReduce,        Op::kCopy,
                           Op::kReduce,       Op::kRecvCopySend,   Op::kRecvReduceSend,    Op::kRecvReduceCopySend};
  for (Op op : all) {
    if (name == opName(op)) {
      *out = op;
      return true;
    }
  }
  return false;
}

bool opReceives(Op op) { return op != Op::kSend && op != Op::kCopy && op != Op::kReduce; }
bool opSends(Op op) {
  return op == Op::kSend || op == Op::kRecvCopySend || op == Op::kRecvReduceSend || op == Op::kRecvReduceCopySend;
}
bool opReadsSrc(Op op) { return op != Op::kRecv && op != Op::kRecvCopySend; }
bool opWritesDst(Op op) { return op != Op::kSend && op != Op::kRecvReduceSend; }
bool opReduces(Op op) {
  return op == Op::kRecvReduce || op == Op::kReduce || op == Op::kRecvReduceSend || op == Op::kRecvReduceCopySend;
}

uint32_t Program::chunksIn(Buf b) const {
  switch (b) {
    case Buf::kInput: return inputBlocks(collective, nranks) * chunksPerBlock;
    case Buf::kOutput: return outputBlocks(collective, nranks) * chunksPerBlock;
    case Buf::kScratch: return scratchBlocks * chunksPerBlock;
  }
  return 0;
}

namespace {
// Start element of chunk j when blocks of U elements are split into k balanced parts.
size_t chunkStart(uint64_t j, uint32_t k, size_t unit) {
  uint64_t block = j / k, sub = j % k;
  size_t base = unit / k, extra = unit % k;
  return block * unit + sub * base + (sub < extra ? sub : extra);
}
}  // namespace

ElemRange chunkElems(const Program& p, const ChunkRange& r, size_t unitElems) {
  size_t b = chunkStart(r.first, p.chunksPerBlock, unitElems);
  size_t e = chunkStart(static_cast<uint64_t>(r.first) + r.count, p.chunksPerBlock, unitElems);
  return {b, e - b};
}

InPlaceAlias inPlaceAlias(Collective c, int rank) {
  switch (c) {
    case Collective::kAllGather:
    case Collective::kGather: return {Buf::kOutput, Buf::kInput, static_cast<uint32_t>(rank)};
    case Collective::kReduceScatter:
    case Collective::kScatter: return {Buf::kInput, Buf::kOutput, static_cast<uint32_t>(rank)};
    default: return {Buf::kOutput, Buf::kInput, 0};
  }
}

}  // namespace theseus::schedule
