// Two-level hierarchical schedules (allreduce, allgather, broadcast).
//
// Ranks are grouped by host (hostOf; empty = one host), hosts are ordered by
// their lowest rank, and each host has a leader: its lowest rank (for
// broadcast the root leads its own host). Inside a host the ranks form a chain
// leader, then the others ascending. Hosts may have different rank counts.
//
// allreduce: (1) every host reduces into its leader along the chain (pipelined
// through the chunks of the block); (2) the leaders run a ring allreduce with
// one segment per host; (3) every leader broadcasts the result down its chain.
// Only leaders cross hosts, and each moves 2(H-1)/H of the data over the
// network: H hosts cost 2(H-1)(alpha_net + beta_net S/H) plus two intra-host
// chains of L ranks, (L + k - 2)(alpha_loc + beta_loc S/k) each for k chunks.
// Good when the network is much slower than intra-host links.
//
// allgather: locals send their block to the leader; the leaders run a ring
// allgather of whole host block sets (a host's blocks need not be contiguous,
// so a set may travel as several messages); each leader streams the full
// output down its chain. broadcast: a pipelined chain from the root through
// the other hosts' leaders, each leader forwarding every chunk down its chain.
//
// One host: only the intra-host parts run. One rank per host: every rank is a
// leader and only the ring (or leader chain) runs.
#include <algorithm>
#include <map>

#include "schedule/builtin_common.h"

namespace theseus::schedule::builtin {
namespace {

struct Hosts {
  std::vector<std::vector<int>> chains;  // per host: leader first, then the others ascending
  std::vector<int> hostOfRank;
  int count() const { return static_cast<int>(chains.size()); }
};

Hosts groupHosts(const GenerateRequest& req, int leaderOverride) {
  std::map<int, std::vector<int>> byHost;
  for (int r = 0; r < req.nranks; ++r) byHost[req.hostOf.empty() ? 0 : req.hostOf[r]].push_back(r);
  Hosts h;
  for (auto& [id, ranks] : byHost) h.chains.push_back(ranks);  // ranks ascending
  std::sort(h.chains.begin(), h.chains.end(), [](const auto& a, const auto& b) { return a[0] < b[0]; });
  h.hostOfRank.resize(req.nranks);
  for (int i = 0; i < h.count(); ++i) {
    std::vector<int>& c = h.chains[i];
    auto it = std::find(c.begin(), c.end(), leaderOverride);
    if (it != c.end()) std::rotate(c.begin(), it, it + 1);  // the override leads, the others stay ascending
    for (int r : c) h.hostOfRank[r] = i;
  }
  return h;
}

Ring leaderRing(const Hosts& h) {
  Ring ring;
  for (const std::vector<int>& c : h.chains) ring.seq.push_back(c[0]);
  return ring;
}

// Chunk range `part` flows down the chain from the leader, which sends `leaderSrc`.
void chainDown(Builder& b, const Slice& s, const std::vector<int>& chain, const ChunkRange& leaderSrc,
               const ChunkRange& part) {
  const size_t len = chain.size();
  if (len < 2) return;
  b.send(chain[0], s, chain[1], leaderSrc);
  for (size_t i = 1; i + 1 < len; ++i) b.recvCopySend(chain[i], s, chain[i - 1], chain[i + 1], part);
  b.recv(chain[len - 1], s, chain[len - 2], part);
}

// Chunk range `part` of the inputs is summed up the chain into the leader's output.
void chainUp(Builder& b, const Slice& s, const std::vector<int>& chain, const ChunkRange& in, const ChunkRange& out) {
  const size_t len = chain.size();
  if (len < 2) return;
  b.send(chain[len - 1], s, chain[len - 2], in);
  for (size_t i = len - 2; i >= 1; --i) b.recvReduceSend(chain[i], s, chain[i + 1], chain[i - 1], in);
  b.recvReduce(chain[0], s, chain[1], in, out);
}

void allreduce(Builder& b, const Hosts& h, const Slice& s) {
  std::vector<Buf> srcOf(h.hostOfRank.size(), Buf::kInput);
  for (const std::vector<int>& c : h.chains) {
    if (c.size() > 1) srcOf[c[0]] = Buf::kOutput;
    for (uint32_t k = 0; k < s.size; ++k)
      chainUp(b, s, c, b.at(Buf::kInput, 0, s, k, 1), b.at(Buf::kOutput, 0, s, k, 1));
  }
  if (h.count() > 1) ringAllreduce(b, leaderRing(h), s, s.size / static_cast<uint32_t>(h.count()), srcOf);
  for (const std::vector<int>& c : h.chains)
    for (uint32_t k = 0; k < s.size; ++k) {
      ChunkRange piece = b.at(Buf::kOutput, 0, s, k, 1);
      chainDown(b, s, c, piece, piece);
    }
}

// Maximal runs of consecutive blocks owned by a host.
std::vector<std::pair<uint32_t, uint32_t>> blockRuns(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::vector<std::pair<uint32_t, uint32_t>> runs;  // [first, end)
  for (int r : ranks) {
    if (!runs.empty() && runs.back().second == static_cast<uint32_t>(r))
      ++runs.back().second;
    else
      runs.push_back({static_cast<uint32_t>(r), static_cast<uint32_t>(r) + 1});
  }
  return runs;
}

void allgather(Builder& b, const Hosts& h, const Slice& s, int n) {
  for (const std::vector<int>& c : h.chains) {
    b.copy(c[0], b.at(Buf::kInput, 0, s), b.at(Buf::kOutput, c[0], s));
    for (size_t i = 1; i < c.size(); ++i) {
      b.send(c[i], s, c[0], b.at(Buf::kInput, 0, s));
      b.recv(c[0], s, c[i], b.at(Buf::kOutput, c[i], s));
    }
  }
  const Ring ring = leaderRing(h);
  const int H = ring.size();
  auto ranges = [&](int host) {
    std::vector<ChunkRange> out;
    for (auto [first, end] : blockRuns(h.chains[((host % H) + H) % H]))
      for (const ChunkRange& c : b.blocks(Buf::kOutput, first, end - first, s)) out.push_back(c);
    return out;
  };
  for (int p = 0; p < H && H > 1; ++p) {
    const int r = ring.at(p), next = ring.at(p + 1), prev = ring.at(p - 1);
    for (const ChunkRange& c : ranges(p)) b.send(r, s, next, c);
    for (int t = 1; t < H - 1; ++t)
      for (const ChunkRange& c : ranges(p - t)) b.recvCopySend(r, s, prev, next, c);
    for (const ChunkRange& c : ranges(p - H + 1)) b.recv(r, s, prev, c);
  }
  for (const std::vector<int>& c : h.chains)
    for (const ChunkRange& all : b.blocks(Buf::kOutput, 0, static_cast<uint32_t>(n), s)) chainDown(b, s, c, all, all);
}

void broadcast(Builder& b, const Hosts& h, const Slice& s, int root) {
  const Ring ring = leaderRing(h);
  const int H = ring.size(), first = h.hostOfRank[root];
  b.copy(root, b.at(Buf::kInput, 0, s), b.at(Buf::kOutput, 0, s));
  for (uint32_t k = 0; k < s.size; ++k) {
    ChunkRange in = b.at(Buf::kInput, 0, s, k, 1), out = b.at(Buf::kOutput, 0, s, k, 1);
    for (int j = 0; j < H; ++j) {
      const int r = ring.at(first + j), next = ring.at(first + j + 1), prev = ring.at(first + j - 1);
      if (H > 1) {
        if (j == 0)
          b.send(r, s, next, in);
        else if (j < H - 1)
          b.recvCopySend(r, s, prev, next, out);
        else
          b.recv(r, s, prev, out);
      }
      chainDown(b, s, h.chains[(first + j) % H], j == 0 ? in : out, out);
    }
  }
}

}  // namespace

Result<Program> generateHierarchical(const GenerateRequest& req, const std::string& name) {
  const int channels = req.params.channels;
  const Collective c = req.collective;
  const Hosts hosts = groupHosts(req, c == Collective::kBroadcast ? req.root : -1);
  const uint32_t H = static_cast<uint32_t>(hosts.count());
  uint32_t perChannel = 1;
  if (c == Collective::kBroadcast) perChannel = pipelineChunks(req);
  if (c == Collective::kAllReduce) perChannel = H * ((pipelineChunks(req) + H - 1) / H);  // H segments, >= k chunks
  Builder b(req, name, perChannel * channels, static_cast<uint32_t>(channels), 0);
  for (const Slice& s : channelSlices(channels, perChannel)) {
    switch (c) {
      case Collective::kAllReduce: allreduce(b, hosts, s); break;
      case Collective::kAllGather: allgather(b, hosts, s, req.nranks); break;
      case Collective::kBroadcast: broadcast(b, hosts, s, req.root); break;
      default: return invalidArgument("hierarchical does not implement %s", collectiveName(c));
    }
  }
  return b.finish();
}

}  // namespace theseus::schedule::builtin
