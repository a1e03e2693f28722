// Halving-doubling, Rabenseifner's algorithm (allreduce, reducescatter).
//
// Reduce-scatter by recursive halving on p = 2^L ranks: in round i (distance
// d = p/2, p/4, ..., 1) rank v and v XOR d split the data they are still
// responsible for: v keeps the lower half when its bit d is clear, sends the
// other half to the partner and adds the partner's copy of its own half. After
// L rounds v holds the full sum of segment v: (L alpha + (p-1)/p beta S).
// Allreduce follows with the mirror image, an allgather by recursive doubling
// (d = 1, 2, ..., p/2: swap the segments held so far), for a total of
// 2 L alpha + 2 (p-1)/p beta S: ring bandwidth with logarithmic latency - the
// classic choice for medium and large messages when latency still matters.
//
// Other rank counts fold (builtin_common.h Fold): ranks 2i < 2(n - p) send all
// their data to 2i + 1 first, which adds it in; virtual rank v then stands for
// the blocks of its real rank(s) and gets the result back to its partner
// last. Costs one extra full-size message before and after.
//
// Allreduce splits each block into p segments and accumulates in the output
// (a round's reads and writes touch disjoint halves, so no scratch is needed).
// Reduce-scatter works on whole blocks and keeps partial sums in scratch
// (indexed by block) until the last round, which adds straight into the output.
#include "schedule/builtin_common.h"

namespace theseus::schedule::builtin {
namespace {

void allreduceRank(Builder& b, const Fold& f, const Slice& s, int r) {
  auto seg = [&](Buf buf, int lo, int hi) {
    return b.at(buf, 0, s, static_cast<uint32_t>(lo), static_cast<uint32_t>(hi - lo));
  };
  if (f.foldedOut(r)) {
    b.send(r, s, r + 1, seg(Buf::kInput, 0, f.p));
    b.recv(r, s, r + 1, seg(Buf::kOutput, 0, f.p));
    return;
  }
  Buf cur = Buf::kInput;
  if (f.absorbs(r)) {
    b.recvReduce(r, s, r - 1, seg(Buf::kInput, 0, f.p), seg(Buf::kOutput, 0, f.p));
    cur = Buf::kOutput;
  }
  const int v = f.virtualOf(r);
  int lo = 0, hi = f.p;
  for (int d = f.p / 2; d >= 1; d /= 2) {
    const int partner = f.realOf(v ^ d), mid = lo + (hi - lo) / 2;
    const bool upper = (v & d) != 0;
    const int keepLo = upper ? mid : lo, keepHi = upper ? hi : mid;
    b.send(r, s, partner, upper ? seg(cur, lo, mid) : seg(cur, mid, hi));
    b.recvReduce(r, s, partner, seg(cur, keepLo, keepHi), seg(Buf::kOutput, keepLo, keepHi));
    cur = Buf::kOutput;
    lo = keepLo;
    hi = keepHi;
  }
  for (int d = 1; d < f.p; d *= 2) {
    const int pv = v ^ d, mine = v & ~(d - 1), theirs = pv & ~(d - 1), partner = f.realOf(pv);
    b.send(r, s, partner, seg(Buf::kOutput, mine, mine + d));
    b.recv(r, s, partner, seg(Buf::kOutput, theirs, theirs + d));
  }
  if (f.absorbs(r)) b.send(r, s, r - 1, seg(Buf::kOutput, 0, f.p));
}

void reduceScatterRank(Builder& b, const Fold& f, const Slice& s, int r, int n) {
  const uint32_t nb = static_cast<uint32_t>(n);
  auto each = [&](Buf buf, uint32_t first, uint32_t end) { return b.blocks(buf, first, end - first, s); };
  const ChunkRange out = b.at(Buf::kOutput, 0, s);
  if (f.foldedOut(r)) {
    for (const ChunkRange& c : each(Buf::kInput, 0, nb)) b.send(r, s, r + 1, c);
    b.recv(r, s, r + 1, out);
    return;
  }
  Buf cur = Buf::kInput;
  if (f.absorbs(r)) {
    std::vector<ChunkRange> in = each(Buf::kInput, 0, nb), acc = each(Buf::kScratch, 0, nb);
    for (size_t i = 0; i < in.size(); ++i) b.recvReduce(r, s, r - 1, in[i], acc[i]);
    cur = Buf::kScratch;
  }
  const int v = f.virtualOf(r);
  int lo = 0, hi = f.p;
  for (int d = f.p / 2; d >= 1; d /= 2) {
    const int partner = f.realOf(v ^ d), mid = lo + (hi - lo) / 2;
    const bool upper = (v & d) != 0;
    const int keepLo = upper ? mid : lo, keepHi = upper ? hi : mid;
    const int giveLo = upper ? lo : mid, giveHi = upper ? mid : hi;
    for (const ChunkRange& c : each(cur, f.firstBlock(giveLo), f.endBlock(giveHi - 1))) b.send(r, s, partner, c);
    std::vector<ChunkRange> src = each(cur, f.firstBlock(keepLo), f.endBlock(keepHi - 1));
    if (d == 1 && src.size() == 1 && src[0].count == out.count) {
      b.recvReduce(r, s, partner, src[0], out);  // the last round adds straight into the output
    } else {
      std::vector<ChunkRange> dst = each(Buf::kScratch, f.firstBlock(keepLo), f.endBlock(keepHi - 1));
      for (size_t i = 0; i < src.size(); ++i) b.recvReduce(r, s, partner, src[i], dst[i]);
      cur = Buf::kScratch;
    }
    lo = keepLo;
    hi = keepHi;
  }
  if (f.absorbs(r)) {
    b.copy(r, b.at(Buf::kScratch, static_cast<uint32_t>(r), s), out);
    b.send(r, s, r - 1, b.at(Buf::kScratch, static_cast<uint32_t>(r - 1), s));
  }
}

}  // namespace

Result<Program> generateHalvingDoubling(const GenerateRequest& req, const std::string& name) {
  const int n = req.nranks, channels = req.params.channels;
  const Fold fold(n);
  const bool allreduce = req.collective == Collective::kAllReduce;
  const uint32_t perChannel = allreduce ? static_cast<uint32_t>(fold.p) : 1;
  Builder b(req, name, perChannel * channels, static_cast<uint32_t>(channels), allreduce ? 0 : static_cast<uint32_t>(n));
  for (const Slice& s : channelSlices(channels, perChannel)) {
    for (int r = 0; r < n; ++r) {
      if (!b.wants(r)) continue;
      if (allreduce)
        allreduceRank(b, fold, s, r);
      else
        reduceScatterRank(b, fold, s, r, n);
    }
  }
  return b.finish();
}

}  // namespace theseus::schedule::builtin
