// Recursive doubling (allreduce, allgather).
//
// With p = 2^L ranks, round i pairs rank v with v XOR 2^i. Allreduce: the pair
// swaps everything it has and both add the other's data, so after L rounds
// every rank holds the full sum: L (alpha + beta S) - the fewest rounds
// possible, good for small messages; bandwidth-poor for large ones (each rank
// moves S per round, not S/p). Allgather: the pair swaps the 2^i blocks it
// gathered so far, (L alpha + (p-1)/p beta nS): logarithmic latency with
// optimal bandwidth, but power-of-two partners can land on distant links.
//
// Other rank counts fold (builtin_common.h Fold): the first 2(n - p) ranks pair
// up, the even one hands its data to the odd one first and gets the result
// last; two extra message latencies.
//
// Allreduce buffers. A rank must keep sending what it had while receiving the
// partner's data, so a round reads one buffer and writes the sum to another
// (recv_reduce src -> dst), alternating between the output and one scratch
// block with the last round landing in the output. In place the input is the
// output, so the first round must write scratch; if the rounds then end in
// scratch, a final copy moves the result. Receiving into the buffer being sent
// would make each rank's receive wait for its own send, and rendezvous
// partners would wait for each other forever.
#include "schedule/builtin_common.h"

namespace theseus::schedule::builtin {
namespace {

void allreduceRank(Builder& b, const Fold& f, const Slice& s, int r, bool inPlace) {
  auto whole = [&](Buf buf) { return b.at(buf, 0, s); };
  if (f.foldedOut(r)) {
    b.send(r, s, r + 1, whole(Buf::kInput));
    b.recv(r, s, r + 1, whole(Buf::kOutput));
    return;
  }
  int rounds = 0;
  while ((1 << rounds) < f.p) ++rounds;
  const int stages = rounds + (f.absorbs(r) ? 1 : 0);
  // Destination of stage t: alternate, ending in the output (out of place) or
  // starting in scratch (in place).
  auto dstOf = [&](int t) {
    bool toOutput = inPlace ? (t % 2 == 1) : ((stages - 1 - t) % 2 == 0);
    return toOutput ? Buf::kOutput : Buf::kScratch;
  };
  Buf cur = Buf::kInput;
  int t = 0;
  if (f.absorbs(r)) {
    b.recvReduce(r, s, r - 1, whole(cur), whole(dstOf(t)));
    cur = dstOf(t++);
  }
  const int v = f.virtualOf(r);
  for (int i = 0; i < rounds; ++i, ++t) {
    const int partner = f.realOf(v ^ (1 << i));
    b.send(r, s, partner, whole(cur));
    b.recvReduce(r, s, partner, whole(cur), whole(dstOf(t)));
    cur = dstOf(t);
  }
  if (cur != Buf::kOutput) b.copy(r, whole(cur), whole(Buf::kOutput));
  if (f.absorbs(r)) b.send(r, s, r - 1, whole(Buf::kOutput));
}

void allgatherRank(Builder& b, const Fold& f, const Slice& s, int r, int n) {
  auto sendBlocks = [&](int to, uint32_t first, uint32_t end) {
    for (const ChunkRange& c : b.blocks(Buf::kOutput, first, end - first, s)) b.send(r, s, to, c);
  };
  auto recvBlocks = [&](int from, uint32_t first, uint32_t end) {
    for (const ChunkRange& c : b.blocks(Buf::kOutput, first, end - first, s)) b.recv(r, s, from, c);
  };
  if (f.foldedOut(r)) {
    b.send(r, s, r + 1, b.at(Buf::kInput, 0, s));
    recvBlocks(r + 1, 0, static_cast<uint32_t>(n));
    return;
  }
  b.copy(r, b.at(Buf::kInput, 0, s), b.at(Buf::kOutput, r, s));
  if (f.absorbs(r)) b.recv(r, s, r - 1, b.at(Buf::kOutput, r - 1, s));
  const int v = f.virtualOf(r);
  for (int d = 1; d < f.p; d *= 2) {
    const int pv = v ^ d, mine = v & ~(d - 1), theirs = pv & ~(d - 1), partner = f.realOf(pv);
    sendBlocks(partner, f.firstBlock(mine), f.endBlock(mine + d - 1));
    recvBlocks(partner, f.firstBlock(theirs), f.endBlock(theirs + d - 1));
  }
  if (f.absorbs(r)) sendBlocks(r - 1, 0, static_cast<uint32_t>(n));
}

}  // namespace

Result<Program> generateRecursiveDoubling(const GenerateRequest& req, const std::string& name) {
  const int n = req.nranks, channels = req.params.channels;
  const Fold fold(n);
  const bool allreduce = req.collective == Collective::kAllReduce;
  Builder b(req, name, static_cast<uint32_t>(channels), static_cast<uint32_t>(channels), allreduce ? 1 : 0);
  for (const Slice& s : channelSlices(channels, 1)) {
    for (int r = 0; r < n; ++r) {
      if (!b.wants(r)) continue;
      if (allreduce)
        allreduceRank(b, fold, s, r, req.inPlace);
      else
        allgatherRank(b, fold, s, r, n);
    }
  }
  return b.finish();
}

}  // namespace theseus::schedule::builtin
