// Scratch layout for imported MSCCL programs.
//
// MSCCL cuts a buffer into equal chunks, so any chunk may move to any other
// chunk slot. The IR cuts every block of U elements into chunks_per_block
// (k) balanced sub-chunks that differ by one element when k does not divide
// U, so data may only move between chunks at the same position within their
// blocks (verifier: "same start sub-chunk"). Input and output chunks have
// fixed positions (chunk j sits at position j % k), and a correct collective
// never moves data between different positions of those. Scratch is ours to
// lay out: MSCCL programs routinely gather data of one position into
// consecutive scratch slots (all-pairs: the peers' copies of "my" chunk).
//
// So the import re-lays out each rank's scratch:
//  1. Union-find over chunk slots (rank, buffer, chunk): the two operands of
//     a copy/reduce and the two ends of every message are the same data, so
//     their chunks must share a position. Input/output slots fix it; a set
//     with two fixed positions is an error in the program (it moves data
//     across positions), reported with the step that does it.
//  2. Scratch slots used together in one range form runs that must stay
//     contiguous; a run's positions must be consecutive modulo k.
//  3. Runs are placed one after another, each at the next index whose
//     position matches its first chunk (free runs start anywhere), and every
//     scratch range is rewritten. scratch_blocks grows to fit.
// With k = 1 every position is 0 and nothing changes.
#include <algorithm>
#include <map>
#include <numeric>
#include <tuple>

#include "schedule/analysis.h"
#include "schedule/user/msccl_model.h"

namespace theseus::schedule::user::msccl {
namespace {

class Slots {
 public:
  explicit Slots(const Program& p) {
    base_.resize(p.nranks * 3 + 1, 0);
    for (int r = 0; r < p.nranks; ++r)
      for (int b = 0; b < 3; ++b)
        base_[r * 3 + b + 1] = base_[r * 3 + b] + p.chunksIn(static_cast<Buf>(b));
    parent_.resize(base_.back());
    std::iota(parent_.begin(), parent_.end(), 0);
    fixed_.assign(base_.back(), -1);
    for (int r = 0; r < p.nranks; ++r)
      for (Buf b : {Buf::kInput, Buf::kOutput})
        for (uint32_t j = 0; j < p.chunksIn(b); ++j) fixed_[id(r, b, j)] = static_cast<int>(j % p.chunksPerBlock);
  }
  size_t id(int r, Buf b, uint32_t j) const { return base_[r * 3 + static_cast<int>(b)] + j; }
  size_t find(size_t x) {
    while (parent_[x] != x) x = parent_[x] = parent_[parent_[x]];
    return x;
  }
  // false when both sets have different fixed positions.
  bool unite(size_t a, size_t b) {
    a = find(a);
    b = find(b);
    if (a == b) return true;
    if (fixed_[a] >= 0 && fixed_[b] >= 0 && fixed_[a] != fixed_[b]) return false;
    if (fixed_[a] < 0) fixed_[a] = fixed_[b];
    parent_[b] = a;
    return true;
  }
  int position(size_t x) { return fixed_[find(x)]; }

 private:
  std::vector<size_t> base_, parent_;
  std::vector<int> fixed_;
};

struct Link {
  int ra, rb;
  ChunkRange a, b;
  int stepRank;
  uint32_t step;
};

// Operand pairs that hold the same data: two-operand ops and matched messages.
std::vector<Link> sameData(const Program& p) {
  std::vector<Link> out;
  std::map<std::tuple<int, int, int>, std::vector<std::pair<uint32_t, ChunkRange>>> sends, recvs;
  for (int r = 0; r < p.nranks; ++r) {
    for (uint32_t i = 0; i < p.ranks[r].steps.size(); ++i) {
      const Step& s = p.ranks[r].steps[i];
      if (opHasTwoOperands(s.op)) out.push_back({r, r, s.src, s.dst, r, i});
      if (opSends(s.op)) sends[{r, s.sendPeer, s.channel}].push_back({i, messageRange(s)});
      if (opReceives(s.op)) recvs[{s.recvPeer, r, s.channel}].push_back({i, messageRange(s)});
    }
  }
  for (const auto& [key, list] : sends) {
    auto it = recvs.find(key);
    if (it == recvs.end()) continue;  // unmatched messages are the verifier's to report
    for (size_t k = 0; k < std::min(list.size(), it->second.size()); ++k)
      out.push_back({std::get<0>(key), std::get<1>(key), list[k].second, it->second[k].second, std::get<1>(key),
                     it->second[k].first});
  }
  return out;
}

}  // namespace

Status alignScratch(Program& p, const std::function<std::string(int, uint32_t)>& locate, const std::string& path) {
  const uint32_t k = p.chunksPerBlock;
  if (k == 1 || p.scratchBlocks == 0) return Status::ok();
  Slots slots(p);
  for (const Link& l : sameData(p)) {
    for (uint32_t i = 0; i < std::min(l.a.count, l.b.count); ++i) {
      if (l.a.first + i >= p.chunksIn(l.a.buf) || l.b.first + i >= p.chunksIn(l.b.buf)) break;
      size_t x = slots.id(l.ra, l.a.buf, l.a.first + i), y = slots.id(l.rb, l.b.buf, l.b.first + i);
      if (slots.unite(x, y)) continue;
      return invalidArgument("%s: %s: moves data between chunks at different positions of their blocks (%s chunk %u "
                             "holds position %d, %s chunk %u position %d); data must keep its position in the block",
                             path.c_str(), locate(l.stepRank, l.step).c_str(), bufName(l.a.buf), l.a.first + i,
                             slots.position(x), bufName(l.b.buf), l.b.first + i, slots.position(y));
    }
  }
  const uint32_t scratch = p.chunksIn(Buf::kScratch);
  uint64_t needed = 0;
  std::vector<std::vector<uint32_t>> mapping(p.nranks);
  for (int r = 0; r < p.nranks; ++r) {
    // joined[j]: scratch chunks j and j+1 appear in one range.
    std::vector<char> joined(scratch, 0), used(scratch, 0);
    for (const Step& s : p.ranks[r].steps)
      for (const ChunkRange* c : {&s.src, &s.dst}) {
        bool operand = c == &s.src ? opReadsSrc(s.op) : opWritesDst(s.op);
        if (!operand || c->buf != Buf::kScratch) continue;
        for (uint32_t j = c->first; j < c->first + c->count && j < scratch; ++j) used[j] = 1;
        for (uint32_t j = c->first; j + 1 < c->first + c->count && j + 1 < scratch; ++j) joined[j] = 1;
      }
    mapping[r].assign(scratch, 0);
    uint64_t cursor = 0;
    for (uint32_t j = 0; j < scratch;) {
      uint32_t end = j + 1;
      while (end < scratch && joined[end - 1]) ++end;
      // Position of the run's first chunk, from any fixed chunk in it.
      int start = -1;
      for (uint32_t x = j; x < end; ++x) {
        int pos = slots.position(slots.id(r, Buf::kScratch, x));
        if (pos < 0) continue;
        int want = static_cast<int>((pos + k - (x - j) % k) % k);
        if (start >= 0 && want != start)
          return invalidArgument("%s: gpu %d: scratch chunks %u..%u are used as one range but hold data of "
                                 "non-consecutive block positions", path.c_str(), r, j, end - 1);
        start = want;
      }
      if (used[j] || end > j + 1) {
        uint64_t base = cursor;
        if (start >= 0) base += (static_cast<uint64_t>(start) + k - cursor % k) % k;
        for (uint32_t x = j; x < end; ++x) mapping[r][x] = static_cast<uint32_t>(base + (x - j));
        cursor = base + (end - j);
      }
      j = end;
    }
    needed = std::max(needed, cursor);
  }
  const uint64_t blocks = (needed + k - 1) / k;
  if (blocks > UINT32_MAX / k) return invalidArgument("%s: scratch layout too large", path.c_str());
  p.scratchBlocks = static_cast<uint32_t>(std::max<uint64_t>(blocks, 1));
  for (int r = 0; r < p.nranks; ++r)
    for (Step& s : p.ranks[r].steps)
      for (ChunkRange* c : {&s.src, &s.dst}) {
        bool operand = c == &s.src ? opReadsSrc(s.op) : opWritesDst(s.op);
        if (operand && c->buf == Buf::kScratch && c->first < scratch) c->first = mapping[r][c->first];
      }
  return Status::ok();
}

}  // namespace theseus::schedule::user::msccl
