// Ring schedules (any rank order, several channels).
//
// The ranks form a ring in `order`; each channel runs the same ring on its own
// sub-chunks of every block, odd channels in the reverse direction when
// `bidirectional` (so both directions of every link carry data).
//
// Allreduce = reduce-scatter + allgather, n segments per channel. At ring
// position p, step s of the reduce-scatter half handles segment (p - s): the
// first step sends the rank's own segment p, the next n-2 steps receive the
// partial sum of segment p - s, add the local input and forward it
// (recv_reduce_send, nothing stored), and step n-1 completes segment p + 1,
// stores it and starts its allgather lap (recv_reduce_copy_send). The
// allgather half forwards the n-2 finished segments it receives
// (recv_copy_send) and stores the last one (recv). Each rank moves
// 2(n-1)/n of the data: cost 2(n-1)(alpha + beta S/n), bandwidth-optimal,
// latency linear in n - good for large messages on a flat network; the order
// lets a ring avoid a slow link.
//
// Allgather (n-1 steps: send own block, forward n-2 blocks, store the last)
// and reduce-scatter (the first half of allreduce, with each block landing on
// its owner) cost (n-1)(alpha + beta S). Broadcast is a chain from the root and
// reduce a chain into the root, pipelined through `pipeline` chunks per block:
// (n - 1 + k - 1)(alpha + beta S/k) for k chunks; every fused step streams, so
// even k = 1 overlaps stages when the executor slices.
#include <algorithm>

#include "schedule/builtin_common.h"

namespace theseus::schedule::builtin {
namespace {

Ring makeRing(const std::vector<int>& order, bool reversed) {
  Ring ring;
  ring.seq = order;
  if (reversed) std::reverse(ring.seq.begin(), ring.seq.end());
  return ring;
}

int positionOf(const Ring& ring, int rank) {
  for (int p = 0; p < ring.size(); ++p)
    if (ring.seq[p] == rank) return p;
  return -1;
}

void ringAllgather(Builder& b, const Ring& ring, const Slice& s) {
  const int n = ring.size();
  for (int p = 0; p < n; ++p) {
    const int r = ring.at(p), next = ring.at(p + 1), prev = ring.at(p - 1);
    b.copy(r, b.at(Buf::kInput, 0, s), b.at(Buf::kOutput, r, s));
    b.send(r, s, next, b.at(Buf::kInput, 0, s));
    for (int t = 1; t < n - 1; ++t) b.recvCopySend(r, s, prev, next, b.at(Buf::kOutput, ring.at(p - t), s));
    b.recv(r, s, prev, b.at(Buf::kOutput, ring.at(p - n + 1), s));
  }
}

// Block seq[q] travels from position q + 1 around to position q, summed on the way.
void ringReduceScatter(Builder& b, const Ring& ring, const Slice& s) {
  const int n = ring.size();
  for (int p = 0; p < n; ++p) {
    const int r = ring.at(p), next = ring.at(p + 1), prev = ring.at(p - 1);
    b.send(r, s, next, b.at(Buf::kInput, ring.at(p - 1), s));
    for (int t = 1; t < n - 1; ++t) b.recvReduceSend(r, s, prev, next, b.at(Buf::kInput, ring.at(p - 1 - t), s));
    b.recvReduce(r, s, prev, b.at(Buf::kInput, r, s), b.at(Buf::kOutput, 0, s));
  }
}

// Chain root -> ... following the ring, one step per pipeline chunk.
void ringBroadcast(Builder& b, const Ring& ring, const Slice& s, int root) {
  const int n = ring.size(), rootPos = positionOf(ring, root);
  for (int i = 0; i < n; ++i) {
    const int r = ring.at(rootPos + i), next = ring.at(rootPos + i + 1), prev = ring.at(rootPos + i - 1);
    if (i == 0) b.copy(r, b.at(Buf::kInput, 0, s), b.at(Buf::kOutput, 0, s));
    for (uint32_t k = 0; k < s.size; ++k) {
      if (i == 0)
        b.send(r, s, next, b.at(Buf::kInput, 0, s, k, 1));
      else if (i < n - 1)
        b.recvCopySend(r, s, prev, next, b.at(Buf::kOutput, 0, s, k, 1));
      else
        b.recv(r, s, prev, b.at(Buf::kOutput, 0, s, k, 1));
    }
  }
}

// Chain following the ring from the root's successor into the root.
void ringReduce(Builder& b, const Ring& ring, const Slice& s, int root) {
  const int n = ring.size(), rootPos = positionOf(ring, root);
  for (int i = 0; i < n; ++i) {
    const int pos = rootPos + 1 + i;
    const int r = ring.at(pos), next = ring.at(pos + 1), prev = ring.at(pos - 1);
    for (uint32_t k = 0; k < s.size; ++k) {
      ChunkRange in = b.at(Buf::kInput, 0, s, k, 1);
      if (i == 0)
        b.send(r, s, next, in);
      else if (i < n - 1)
        b.recvReduceSend(r, s, prev, next, in);
      else
        b.recvReduce(r, s, prev, in, b.at(Buf::kOutput, 0, s, k, 1));
    }
  }
}

}  // namespace

void ringAllreduce(Builder& b, const Ring& ring, const Slice& s, uint32_t segLen, const std::vector<Buf>& srcOf) {
  const int n = ring.size();
  for (int p = 0; p < n; ++p) {
    const int r = ring.at(p), next = ring.at(p + 1), prev = ring.at(p - 1);
    if (!b.wants(r)) continue;
    auto seg = [&](Buf buf, int j) {
      return b.at(buf, 0, s, static_cast<uint32_t>(((j % n) + n) % n) * segLen, segLen);
    };
    const Buf src = srcOf[r];
    b.send(r, s, next, seg(src, p));
    for (int t = 1; t < n - 1; ++t) b.recvReduceSend(r, s, prev, next, seg(src, p - t));
    b.recvReduceCopySend(r, s, prev, next, seg(src, p + 1), seg(Buf::kOutput, p + 1));
    for (int t = 1; t < n - 1; ++t) b.recvCopySend(r, s, prev, next, seg(Buf::kOutput, p + 1 - t));
    b.recv(r, s, prev, seg(Buf::kOutput, p + 2));
  }
}

Result<Program> generateRing(const GenerateRequest& req, const std::string& name) {
  const int n = req.nranks, channels = req.params.channels;
  uint32_t perChannel = 1;
  if (req.collective == Collective::kAllReduce) perChannel = static_cast<uint32_t>(n);
  if (req.collective == Collective::kBroadcast || req.collective == Collective::kReduce)
    perChannel = pipelineChunks(req);
  Builder b(req, name, perChannel * channels, static_cast<uint32_t>(channels), 0);
  const std::vector<int> order = rankOrder(req);
  const std::vector<Buf> fromInput(n, Buf::kInput);
  for (const Slice& s : channelSlices(channels, perChannel)) {
    Ring ring = makeRing(order, req.params.bidirectional && s.channel % 2 == 1);
    switch (req.collective) {
      case Collective::kAllReduce: ringAllreduce(b, ring, s, 1, fromInput); break;
      case Collective::kAllGather: ringAllgather(b, ring, s); break;
      case Collective::kReduceScatter: ringReduceScatter(b, ring, s); break;
      case Collective::kBroadcast: ringBroadcast(b, ring, s, req.root); break;
      case Collective::kReduce: ringReduce(b, ring, s, req.root); break;
      default: return invalidArgument("ring does not implement %s", collectiveName(req.collective));
    }
  }
  return b.finish();
}

}  // namespace theseus::schedule::builtin
