// Binary tree and double binary tree schedules (allreduce, broadcast, reduce).
//
// Shape. The in-order binary tree over the values 1..m: value v with lowest set
// bit b has children v - b/2 and v + b/2 (odd values are leaves) and its parent
// is v - b when bit 2b of v is set, else v + b; the root is the largest power
// of two <= m. Values above m are absent: a parent above m is replaced by its
// own parent, a right child above m by the largest present node of its
// subtree. Depth is floor(log2 m) + 1 and every node has at most two children.
//
// tree: one such tree over all n ranks with the collective's root (allreduce:
// order[0]) at the top, ranks placed along `order`. Allreduce reduces up the
// tree and broadcasts back down, pipelined through `pipeline` chunks per block
// so the lower levels already work on chunk i+1 while chunk i moves up: about
// 2 log2(n) (alpha + beta S/k) + 2(k - 1)(alpha + beta S/k) for k chunks -
// logarithmic latency, good for small and medium messages, but an interior node
// sends and receives the whole message ~3 times, so it uses a third of the link
// bandwidth a ring uses.
//
// double_binary_tree: the root on top, and below it two trees over the other
// m = n - 1 ranks, each carrying half of every block on its own channel. The
// second tree is the first mirrored (v -> m + 1 - v, m even) or shifted
// (v -> v mod m + 1, m odd): both flip the parity of every value (but one in
// the shift), and since interior nodes have even values, a rank interior in
// one tree is a leaf in the other. Every rank then sends and receives each
// byte about once per direction: tree latency with close to full bandwidth.
//
// Interior nodes with two children first add the left child's data into an
// accumulator (output for allreduce, one scratch block for reduce), then add
// the right child's on the fly while forwarding (recv_reduce_send). The
// allreduce root stores the last sum and starts the broadcast in the same step
// (recv_reduce_copy_send).
#include "schedule/builtin_common.h"

namespace theseus::schedule::builtin {
namespace {

struct Tree {
  std::vector<int> parent;                 // -1 at the root
  std::vector<std::vector<int>> children;  // at most two
};

int topOf(int m) {
  int top = 1;
  while (top * 2 <= m) top *= 2;
  return top;
}

int inorderParent(int v, int m) {
  if (v == topOf(m)) return 0;
  for (;;) {
    int b = v & -v;
    int up = (v & (b << 1)) ? v - b : v + b;
    if (up <= m) return up;
    v = up;
  }
}

std::vector<int> inorderChildren(int v, int m) {
  int b = v & -v;
  if (b == 1) return {};
  std::vector<int> kids{v - b / 2};
  int c = v + b / 2;
  while (c > m) {
    int cb = c & -c;
    if (cb == 1) return kids;
    c -= cb / 2;
  }
  kids.push_back(c);
  return kids;
}

// rankAt[v] for v = 1..m; superRoot (or -1) sits above the in-order root.
Tree inorderTree(int nranks, const std::vector<int>& rankAt, int m, int superRoot) {
  Tree t;
  t.parent.assign(nranks, -1);
  t.children.resize(nranks);
  for (int v = 1; v <= m; ++v) {
    int pv = inorderParent(v, m);
    t.parent[rankAt[v]] = pv ? rankAt[pv] : superRoot;
    for (int c : inorderChildren(v, m)) t.children[rankAt[v]].push_back(rankAt[c]);
  }
  if (superRoot >= 0) t.children[superRoot] = {rankAt[topOf(m)]};
  return t;
}

// `order` rotated so that `root` comes first.
std::vector<int> rootedOrder(const GenerateRequest& req, int root) {
  std::vector<int> order = rankOrder(req), out;
  size_t at = 0;
  while (order[at] != root) ++at;
  for (size_t i = 0; i < order.size(); ++i) out.push_back(order[(at + i) % order.size()]);
  return out;
}

// Chunk k of one rank on the way up; `acc` holds partial sums of non-root nodes.
void up(Builder& b, const Tree& t, const Slice& s, int r, uint32_t k, Buf acc, bool allreduce) {
  const std::vector<int>& kids = t.children[r];
  const int par = t.parent[r];
  ChunkRange in = b.at(Buf::kInput, 0, s, k, 1), out = b.at(Buf::kOutput, 0, s, k, 1);
  if (kids.empty()) {
    b.send(r, s, par, in);
    return;
  }
  ChunkRange cur = in, store = par < 0 ? out : b.at(acc, 0, s, k, 1);
  for (size_t i = 0; i + 1 < kids.size(); ++i) {
    b.recvReduce(r, s, kids[i], cur, store);
    cur = store;
  }
  if (par >= 0) {
    b.recvReduceSend(r, s, kids.back(), par, cur);
  } else if (!allreduce) {
    b.recvReduce(r, s, kids.back(), cur, out);
  } else {
    b.recvReduceCopySend(r, s, kids.back(), kids[0], cur, out);
    for (size_t i = 1; i < kids.size(); ++i) b.send(r, s, kids[i], out);
  }
}

// Chunk k of one non-root rank on the way down (the root sends from `rootSrc`).
void down(Builder& b, const Tree& t, const Slice& s, int r, uint32_t k) {
  const std::vector<int>& kids = t.children[r];
  const int par = t.parent[r];
  ChunkRange out = b.at(Buf::kOutput, 0, s, k, 1);
  if (par < 0) {
    for (int kid : kids) b.send(r, s, kid, b.at(Buf::kInput, 0, s, k, 1));
  } else if (kids.empty()) {
    b.recv(r, s, par, out);
  } else {
    b.recvCopySend(r, s, par, kids[0], out);
    for (size_t i = 1; i < kids.size(); ++i) b.send(r, s, kids[i], out);
  }
}

void emitRank(Builder& b, const Tree& t, const Slice& s, int r, Collective c) {
  const bool root = t.parent[r] < 0;
  switch (c) {
    case Collective::kAllReduce:
      for (uint32_t k = 0; k < s.size; ++k) up(b, t, s, r, k, Buf::kOutput, true);
      if (!root)
        for (uint32_t k = 0; k < s.size; ++k) down(b, t, s, r, k);
      break;
    case Collective::kReduce:
      for (uint32_t k = 0; k < s.size; ++k) up(b, t, s, r, k, Buf::kScratch, false);
      break;
    default:  // broadcast
      if (root) b.copy(r, b.at(Buf::kInput, 0, s), b.at(Buf::kOutput, 0, s));
      for (uint32_t k = 0; k < s.size; ++k) down(b, t, s, r, k);
      break;
  }
}

// Trees share nothing: tree i of channel c gets its own sub-chunks and channel.
Program emitTrees(const GenerateRequest& req, const std::string& name, const std::vector<Tree>& trees) {
  const uint32_t pieces = pipelineChunks(req), ntrees = static_cast<uint32_t>(trees.size());
  const uint32_t channels = static_cast<uint32_t>(req.params.channels), perChannel = pieces * ntrees;
  Builder b(req, name, perChannel * channels, channels * ntrees, req.collective == Collective::kReduce ? 1 : 0);
  for (uint32_t c = 0; c < channels; ++c) {
    for (uint32_t i = 0; i < ntrees; ++i) {
      Slice s{c * perChannel + i * pieces, pieces, static_cast<uint8_t>(c * ntrees + i)};
      for (int r = 0; r < req.nranks; ++r)
        if (b.wants(r)) emitRank(b, trees[i], s, r, req.collective);
    }
  }
  return b.finish();
}

int treeRoot(const GenerateRequest& req) { return isRooted(req.collective) ? req.root : rankOrder(req)[0]; }

}  // namespace

Result<Program> generateTree(const GenerateRequest& req, const std::string& name) {
  const int n = req.nranks, top = topOf(n);
  std::vector<int> order = rootedOrder(req, treeRoot(req)), rankAt(n + 1);
  for (int v = 1; v <= n; ++v) rankAt[v] = order[((v - top) % n + n) % n];
  return emitTrees(req, name, {inorderTree(n, rankAt, n, -1)});
}

Result<Program> generateDoubleBinaryTree(const GenerateRequest& req, const std::string& name) {
  const int n = req.nranks, m = n - 1;
  std::vector<int> order = rootedOrder(req, treeRoot(req)), first(m + 1), second(m + 1);
  for (int v = 1; v <= m; ++v) {
    first[v] = order[v];
    second[v] = order[m % 2 == 0 ? m + 1 - v : v % m + 1];
  }
  return emitTrees(req, name, {inorderTree(n, first, m, order[0]), inorderTree(n, second, m, order[0])});
}

}  // namespace theseus::schedule::builtin
