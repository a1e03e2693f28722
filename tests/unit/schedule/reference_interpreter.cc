#include "reference_interpreter.h"

#include <deque>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include "schedule/analysis.h"

namespace theseus::schedule::testing {
namespace {

constexpr int64_t kPoison = -777777777777;

struct Machine {
  const Program& p;
  const std::vector<RankPlan>& plans;
  size_t unit;
  std::vector<std::vector<int64_t>> storage[3];  // per buffer, per rank
  std::vector<int64_t*> base[3];                  // logical buffer bases (aliasing applied)
  std::map<std::tuple<int, int, int>, std::deque<std::vector<int64_t>>> queues;
  std::vector<std::vector<char>> recvDone, done;
  std::vector<std::vector<std::vector<int64_t>>> outgoing;
  std::string error;

  int64_t* ptr(int r, const ChunkRange& c, size_t* len) const {
    ElemRange e = chunkElems(p, c, unit);
    *len = e.size;
    return base[static_cast<int>(c.buf)][r] + e.begin;
  }
  std::vector<int64_t> read(int r, const ChunkRange& c) const {
    size_t len;
    const int64_t* at = ptr(r, c, &len);
    return std::vector<int64_t>(at, at + len);
  }
  void write(int r, const ChunkRange& c, const std::vector<int64_t>& v) {
    size_t len;
    int64_t* at = ptr(r, c, &len);
    if (len != v.size()) error = "size mismatch writing rank " + std::to_string(r);
    for (size_t i = 0; i < len && i < v.size(); ++i) at[i] = v[i];
  }
  std::vector<int64_t> add(std::vector<int64_t> a, const std::vector<int64_t>& b) {
    if (a.size() != b.size()) error = "size mismatch in a reduction";
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) a[i] += b[i];
    return a;
  }
  std::deque<std::vector<int64_t>>& queue(int from, int to, int ch) { return queues[{from, to, ch}]; }

  // One phase of step k on rank r if it can run now.
  bool tryStep(int r, uint32_t k);
};

bool Machine::tryStep(int r, uint32_t k) {
  const Step& s = p.ranks[r].steps[k];
  const StepPlan& sp = plans[r].steps[k];
  if (done[r][k]) return false;
  for (uint32_t j : sp.waitFor)
    if (!done[r][j]) return false;
  if (!opReceives(s.op) && !opSends(s.op)) {
    std::vector<int64_t> v = read(r, s.src);
    write(r, s.dst, s.op == Op::kReduce ? add(read(r, s.dst), v) : v);
    done[r][k] = 1;
    return true;
  }
  if (opReceives(s.op) && !recvDone[r][k]) {
    if (sp.recvAfter >= 0 && !recvDone[r][sp.recvAfter]) return false;
    auto& q = queue(s.recvPeer, r, s.channel);
    if (q.empty()) return false;
    std::vector<int64_t> msg = std::move(q.front());
    q.pop_front();
    std::vector<int64_t> v = opReduces(s.op) ? add(read(r, s.src), msg) : msg;
    if (opWritesDst(s.op)) write(r, s.dst, v);
    outgoing[r][k] = std::move(v);
    recvDone[r][k] = 1;
    if (!opSends(s.op)) done[r][k] = 1;
    return true;
  }
  if (sp.sendAfter >= 0 && !done[r][sp.sendAfter]) return false;
  queue(r, s.sendPeer, s.channel).push_back(s.op == Op::kSend ? read(r, s.src) : outgoing[r][k]);
  done[r][k] = 1;
  return true;
}

int64_t expectedAt(const Program& p, const std::vector<std::vector<int64_t>>& in, size_t unit, int r, size_t e) {
  const size_t block = e / unit, off = e % unit;
  auto sum = [&](size_t at) {
    int64_t total = 0;
    for (int s = 0; s < p.nranks; ++s) total += in[s][at];
    return total;
  };
  switch (p.collective) {
    case Collective::kAllReduce:
    case Collective::kReduce: return sum(e);
    case Collective::kReduceScatter: return sum(r * unit + e);
    case Collective::kBroadcast: return in[p.root][e];
    case Collective::kAllGather:
    case Collective::kGather: return in[block][off];
    case Collective::kAlltoAll: return in[block][r * unit + off];
    case Collective::kScatter: return in[p.root][r * unit + e];
  }
  return 0;
}

}  // namespace

std::string runAndCheck(const Program& p, size_t unit, unsigned seed) {
  Result<std::vector<RankPlan>> plans = analyzeProgram(p);
  if (!plans.isOk()) return "analysis failed: " + plans.status().message();
  Machine m{p, plans.value(), unit};
  const int n = p.nranks;
  const uint32_t blocks[3] = {inputBlocks(p.collective, n), outputBlocks(p.collective, n), p.scratchBlocks};
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int64_t>> original(n);
  for (int b = 0; b < 3; ++b) {
    m.storage[b].resize(n);
    m.base[b].resize(n);
  }
  for (int r = 0; r < n; ++r) {
    for (int b = 0; b < 3; ++b) {
      m.storage[b][r].assign(blocks[b] * unit, kPoison);
      m.base[b][r] = m.storage[b][r].data();
    }
    if (p.inPlace) {
      InPlaceAlias a = inPlaceAlias(p.collective, r);
      m.base[static_cast<int>(a.contained)][r] = m.base[static_cast<int>(a.container)][r] + a.block * unit;
    }
    original[r].resize(blocks[0] * unit);
    for (int64_t& v : original[r]) v = static_cast<int64_t>(rng() % 2000001) - 1000000;
    if (bufferPresent(p.collective, r, p.root, Buf::kInput))
      std::copy(original[r].begin(), original[r].end(), m.base[0][r]);
    m.recvDone.emplace_back(p.ranks[r].steps.size(), 0);
    m.done.emplace_back(p.ranks[r].steps.size(), 0);
    m.outgoing.emplace_back(p.ranks[r].steps.size());
  }
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < n; ++r)
      for (size_t k = p.ranks[r].steps.size(); k-- > 0;)
        if (m.tryStep(r, static_cast<uint32_t>(k))) {
          progress = true;
          break;
        }
    if (!m.error.empty()) return m.error;
  }
  for (int r = 0; r < n; ++r)
    for (size_t k = 0; k < p.ranks[r].steps.size(); ++k)
      if (!m.done[r][k]) return "stalled: rank " + std::to_string(r) + " step " + std::to_string(k) + " never ran";
  for (int r = 0; r < n; ++r) {
    if (bufferPresent(p.collective, r, p.root, Buf::kOutput)) {
      for (size_t e = 0; e < blocks[1] * unit; ++e) {
        int64_t got = m.base[1][r][e], want = expectedAt(p, original, unit, r, e);
        if (got != want)
          return "rank " + std::to_string(r) + " output element " + std::to_string(e) + ": got " +
                 std::to_string(got) + ", want " + std::to_string(want);
      }
    }
    if (!p.inPlace && bufferPresent(p.collective, r, p.root, Buf::kInput) &&
        !std::equal(original[r].begin(), original[r].end(), m.base[0][r]))
      return "rank " + std::to_string(r) + " input was modified by an out-of-place program";
  }
  return "";
}

}  // namespace theseus::schedule::testing
