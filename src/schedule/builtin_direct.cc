// Direct (pairwise) schedules: every rank talks to every other rank itself.
//
// Step k (1 <= k < n) of rank r sends to r + k and receives from r - k, the
// pairwise-exchange order: at any moment every rank has one partner to send to
// and one to receive from, so no rank is flooded while others idle. All sends
// of a rank are independent of each other and of its receives, so the executor
// keeps all of them in flight.
//
//   alltoall       send input block q to q, receive block s into output block s
//   allgather      send the input to all, receive output block s from s
//   reducescatter  send input block q to q; add the n-1 copies of block r
//   allreduce      reduce-scatter of n segments, then allgather of the sums
//   gather/scatter the root receives/sends one block per rank
//   broadcast      the root sends to everyone;  reduce: the root adds all
//
// One round of n-1 concurrent messages: alpha + (n-1) beta S per rank (per
// block S) for alltoall/allgather - the only choice for alltoall, and the
// fastest for small messages or few ranks where per-hop latency dominates; the
// root of rooted collectives is the bottleneck at (n-1) beta S.
//
// In-place alltoall receives into scratch and copies out at the end: a block
// still being sent from the input would otherwise be overwritten by the
// receive from the same peer, and under rendezvous both peers would wait for
// each other.
#include "schedule/builtin_common.h"

namespace theseus::schedule::builtin {
namespace {

struct Direct {
  Builder& b;
  const Slice& s;
  int n;
  int root;
  bool inPlace;

  int plus(int r, int k) const { return (r + k) % n; }
  int minus(int r, int k) const { return ((r - k) % n + n) % n; }
  ChunkRange in(int block) const { return b.at(Buf::kInput, static_cast<uint32_t>(block), s); }
  ChunkRange out(int block) const { return b.at(Buf::kOutput, static_cast<uint32_t>(block), s); }

  void alltoall(int r) {
    b.copy(r, in(r), out(r));
    for (int k = 1; k < n; ++k) {
      b.send(r, s, plus(r, k), in(plus(r, k)));
      b.recv(r, s, minus(r, k), inPlace ? b.at(Buf::kScratch, minus(r, k), s) : out(minus(r, k)));
    }
    if (inPlace)
      for (int k = 1; k < n; ++k) b.copy(r, b.at(Buf::kScratch, minus(r, k), s), out(minus(r, k)));
  }
  void allgather(int r) {
    b.copy(r, in(0), out(r));
    for (int k = 1; k < n; ++k) {
      b.send(r, s, plus(r, k), in(0));
      b.recv(r, s, minus(r, k), out(minus(r, k)));
    }
  }
  void reduceScatter(int r) {
    for (int k = 1; k < n; ++k) b.send(r, s, plus(r, k), in(plus(r, k)));
    for (int k = 1; k < n; ++k) b.recvReduce(r, s, minus(r, k), k == 1 ? in(r) : out(0), out(0));
  }
  void gather(int r) {
    if (r != root) return b.send(r, s, root, in(0));
    b.copy(r, in(0), out(r));
    for (int k = 1; k < n; ++k) b.recv(r, s, plus(r, k), out(plus(r, k)));
  }
  void scatter(int r) {
    if (r != root) return b.recv(r, s, root, out(0));
    b.copy(r, in(r), out(0));
    for (int k = 1; k < n; ++k) b.send(r, s, plus(r, k), in(plus(r, k)));
  }
  void broadcast(int r) {
    if (r != root) return b.recv(r, s, root, out(0));
    b.copy(r, in(0), out(0));
    for (int k = 1; k < n; ++k) b.send(r, s, plus(r, k), in(0));
  }
  void reduce(int r) {
    if (r != root) return b.send(r, s, root, in(0));
    for (int k = 1; k < n; ++k) b.recvReduce(r, s, plus(r, k), k == 1 ? in(0) : out(0), out(0));
  }
  // Segment q of the block (slice of n sub-chunks) is reduced by rank q.
  void allreduce(int r) {
    auto seg = [&](Buf buf, int q) { return b.at(buf, 0, s, static_cast<uint32_t>(q), 1); };
    for (int k = 1; k < n; ++k) b.send(r, s, plus(r, k), seg(Buf::kInput, plus(r, k)));
    for (int k = 1; k < n; ++k)
      b.recvReduce(r, s, minus(r, k), seg(k == 1 ? Buf::kInput : Buf::kOutput, r), seg(Buf::kOutput, r));
    for (int k = 1; k < n; ++k) b.send(r, s, plus(r, k), seg(Buf::kOutput, r));
    for (int k = 1; k < n; ++k) b.recv(r, s, minus(r, k), seg(Buf::kOutput, minus(r, k)));
  }
};

}  // namespace

Result<Program> generateDirect(const GenerateRequest& req, const std::string& name) {
  const int n = req.nranks, channels = req.params.channels;
  const Collective c = req.collective;
  const uint32_t perChannel = c == Collective::kAllReduce ? static_cast<uint32_t>(n) : 1;
  const uint32_t scratch = c == Collective::kAlltoAll && req.inPlace ? static_cast<uint32_t>(n) : 0;
  Builder b(req, name, perChannel * channels, static_cast<uint32_t>(channels), scratch);
  for (const Slice& s : channelSlices(channels, perChannel)) {
    Direct d{b, s, n, isRooted(c) ? req.root : 0, req.inPlace};
    for (int r = 0; r < n; ++r) {
      if (!b.wants(r)) continue;
      switch (c) {
        case Collective::kAlltoAll: d.alltoall(r); break;
        case Collective::kAllGather: d.allgather(r); break;
        case Collective::kReduceScatter: d.reduceScatter(r); break;
        case Collective::kGather: d.gather(r); break;
        case Collective::kScatter: d.scatter(r); break;
        case Collective::kBroadcast: d.broadcast(r); break;
        case Collective::kReduce: d.reduce(r); break;
        case Collective::kAllReduce: d.allreduce(r); break;
      }
    }
  }
  return b.finish();
}

}  // namespace theseus::schedule::builtin
