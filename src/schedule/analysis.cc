// Program analysis (see analysis.h for the execution model it serves).
//
// Hazards. Walking a rank's steps in program order, every physical chunk
// remembers its last writer and the readers since that write. A step that
// reads a chunk waits for its last writer (RAW); a step that writes it waits
// for the last writer (WAW) and for every reader since (WAR). Older accesses
// need no edge: the last writer itself waited for them.
//
// Message order. The previous receive from the same (peer, channel) and the
// previous send to it are recorded as recvAfter/sendAfter (phase-to-phase
// edges, not waitFor edges), with the message's index in its stream.
//
// Reduction. A candidate j is dropped when another candidate k already implies
// it: j is in full(k), the set of steps known complete once k is complete. That
// set is k, everything its waitFor lists imply, plus what its message order
// implies: k's send is done only after sendAfter(k) sent (and a sending step is
// complete once it sent); k received only after recvAfter(k) received (which
// completes it when it only receives). Candidates are visited from the newest:
// full(k) holds only steps before k, so a newer step can imply an older one but
// not the reverse, and one pass gives the exact reduction. It costs S^2/64 word
// operations for S steps, so programs beyond kMaxReducedSteps steps keep their
// (correct, merely redundant) unreduced lists.
#include <algorithm>

#include "schedule/analysis.h"

namespace theseus::schedule {
namespace {

constexpr size_t kMaxReducedSteps = 4096;

class HazardTracker {
 public:
  explicit HazardTracker(const Program& p) {
    for (int b = 0; b < 3; ++b) {
      uint32_t chunks = p.chunksIn(static_cast<Buf>(b));
      lastWriter_[b].assign(chunks, -1);
      readers_[b].resize(chunks);
    }
  }

  // Adds the steps an access to r must wait for.
  void collect(const PhysRange& r, bool write, std::vector<uint32_t>* out) const {
    int b = static_cast<int>(r.buf);
    for (uint32_t c = r.first; c < r.first + r.count; ++c) {
      if (lastWriter_[b][c] >= 0) out->push_back(static_cast<uint32_t>(lastWriter_[b][c]));
      if (write) out->insert(out->end(), readers_[b][c].begin(), readers_[b][c].end());
    }
  }

  void record(const PhysRange& r, bool write, uint32_t step) {
    int b = static_cast<int>(r.buf);
    for (uint32_t c = r.first; c < r.first + r.count; ++c) {
      if (write) {
        lastWriter_[b][c] = static_cast<int32_t>(step);
        readers_[b][c].clear();
      } else if (readers_[b][c].empty() || readers_[b][c].back() != step) {
        readers_[b][c].push_back(step);
      }
    }
  }

 private:
  std::vector<int32_t> lastWriter_[3];
  std::vector<std::vector<uint32_t>> readers_[3];
};

// Transitive reduction over the steps' waitFor candidate lists (see the file comment).
class Reducer {
 public:
  explicit Reducer(size_t steps) : words_((steps + 63) / 64), full_(steps * words_), acc_(words_) {}

  // `cand` sorted descending, duplicates removed. Returns the kept steps ascending.
  std::vector<uint32_t> reduce(uint32_t step, const std::vector<uint32_t>& cand, int32_t sendAfter,
                               int32_t recvOnlyAfter) {
    std::fill(acc_.begin(), acc_.begin() + wordsUpTo(step), 0);
    std::vector<uint32_t> kept;
    for (uint32_t j : cand) {
      if (acc_[j / 64] >> (j % 64) & 1) continue;
      kept.push_back(j);
      orInto(j);
    }
    if (sendAfter >= 0) orInto(static_cast<uint32_t>(sendAfter));
    if (recvOnlyAfter >= 0) orInto(static_cast<uint32_t>(recvOnlyAfter));
    uint64_t* mine = &full_[step * words_];
    std::copy(acc_.begin(), acc_.begin() + wordsUpTo(step), mine);
    mine[step / 64] |= 1ull << (step % 64);
    std::reverse(kept.begin(), kept.end());
    return kept;
  }

 private:
  size_t wordsUpTo(uint32_t step) const { return step / 64 + 1; }
  void orInto(uint32_t j) {
    const uint64_t* src = &full_[j * words_];
    for (size_t w = 0; w < wordsUpTo(j); ++w) acc_[w] |= src[w];
  }

  size_t words_;
  std::vector<uint64_t> full_;
  std::vector<uint64_t> acc_;
};

bool receivesOnly(Op op) { return opReceives(op) && !opSends(op); }

// Rank `rank` of a program that passed checkStructure.
RankPlan analyzeChecked(const Program& p, int rank) {
  const std::vector<Step>& steps = p.ranks[rank].steps;
  const size_t nsteps = steps.size();
  RankPlan plan;
  plan.steps.resize(nsteps);
  HazardTracker hazards(p);
  const size_t streams = static_cast<size_t>(p.nranks) * p.nchannels;
  std::vector<int32_t> lastRecv(streams, -1), lastSend(streams, -1);
  std::vector<uint32_t> recvCount(streams, 0), sendCount(streams, 0);
  std::vector<char> isPeer(p.nranks, 0);
  const bool reduce = nsteps <= kMaxReducedSteps;
  Reducer reducer(reduce ? nsteps : 0);
  std::vector<uint32_t> cand;

  for (uint32_t i = 0; i < nsteps; ++i) {
    const Step& s = steps[i];
    StepPlan& sp = plan.steps[i];
    cand.assign(s.deps.begin(), s.deps.end());
    PhysRange src = physicalRange(p, rank, s.src), dst = physicalRange(p, rank, s.dst);
    if (opReadsSrc(s.op)) hazards.collect(src, false, &cand);
    if (opWritesDst(s.op)) hazards.collect(dst, true, &cand);  // covers kReduce's read of dst
    if (opReadsSrc(s.op)) hazards.record(src, false, i);
    if (opReadsDst(s.op)) hazards.record(dst, false, i);
    if (opWritesDst(s.op)) hazards.record(dst, true, i);

    if (opReceives(s.op)) {
      size_t k = static_cast<size_t>(s.recvPeer) * p.nchannels + s.channel;
      sp.recvAfter = lastRecv[k];
      sp.recvSeq = recvCount[k]++;
      lastRecv[k] = static_cast<int32_t>(i);
      isPeer[s.recvPeer] = 1;
    }
    if (opSends(s.op)) {
      size_t k = static_cast<size_t>(s.sendPeer) * p.nchannels + s.channel;
      sp.sendAfter = lastSend[k];
      sp.sendSeq = sendCount[k]++;
      lastSend[k] = static_cast<int32_t>(i);
      isPeer[s.sendPeer] = 1;
    }

    std::sort(cand.begin(), cand.end(), std::greater<uint32_t>());
    cand.erase(std::unique(cand.begin(), cand.end()), cand.end());
    if (reduce) {
      int32_t recvOnly = sp.recvAfter >= 0 && receivesOnly(steps[sp.recvAfter].op) ? sp.recvAfter : -1;
      sp.waitFor = reducer.reduce(i, cand, sp.sendAfter, recvOnly);
    } else {
      sp.waitFor.assign(cand.rbegin(), cand.rend());
    }
    for (uint32_t j : sp.waitFor) plan.steps[j].unblocks.push_back(i);
  }
  for (int r = 0; r < p.nranks; ++r)
    if (isPeer[r]) plan.peers.push_back(r);
  return plan;
}

}  // namespace

Result<RankPlan> analyzeRank(const Program& p, int rank) {
  if (rank < 0) return invalidArgument("analyzeRank: rank %d is negative", rank);
  TH_CHECK(checkStructure(p, rank));
  return analyzeChecked(p, rank);
}

Result<std::vector<RankPlan>> analyzeProgram(const Program& p) {
  TH_CHECK(checkStructure(p));
  std::vector<RankPlan> plans;
  plans.reserve(p.nranks);
  for (int r = 0; r < p.nranks; ++r) plans.push_back(analyzeChecked(p, r));
  return plans;
}

}  // namespace theseus::schedule
