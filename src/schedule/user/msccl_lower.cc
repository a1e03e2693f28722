// Lowering an MSCCL document to the IR (msccl_import.h explains the mapping).
//
// Per GPU: a topological order of its steps under "previous step of the same
// thread block" and "depid/deps" edges (Kahn's algorithm; among ready steps
// the one with the lowest step index, then the lowest thread block id, runs
// first, which interleaves thread blocks the way they progress concurrently).
// A cycle is an error naming a step on it. Walking that order:
//   * a real step becomes the next IR step; its explicit deps are what its own
//     dependency resolves to plus whatever the nops right before it in its
//     thread block carried; then the thread block's pending nop deps reset;
//   * a nop adds its dependency's resolution to its thread block's pending
//     set and resolves, for steps depending on it, to that set plus the last
//     real step of its thread block;
//   * a dependency on a real step resolves to that step's IR index.
#include <algorithm>
#include <map>
#include <memory>
#include <queue>
#include <set>
#include <tuple>

#include "schedule/user/json_schedule.h"
#include "schedule/user/msccl_model.h"

namespace theseus::schedule::user::msccl {
namespace {

struct Node {
  int tb;  // index into XGpu::tbs
  int s;
};

struct Origin {
  int tbId;
  int s;
  int line;
};

Step toIr(const XStep& st, const XThreadBlock& tb) {
  Step s;
  s.op = irOp(st.type);
  s.channel = static_cast<uint8_t>(tb.channel);
  if (stepReceives(st.type)) s.recvPeer = tb.recv;
  if (stepSends(st.type)) s.sendPeer = tb.send;
  if (stepReadsSrc(st.type)) s.src = {st.srcBuf, static_cast<uint32_t>(st.srcOff), static_cast<uint32_t>(st.count)};
  if (stepWritesDst(st.type)) s.dst = {st.dstBuf, static_cast<uint32_t>(st.dstOff), static_cast<uint32_t>(st.count)};
  return s;
}

// A step that never ran always has a predecessor (previous step of its thread
// block, or its dependency) that never ran either; walking those backwards
// must revisit a step, and the walk from there is a cycle.
std::string describeCycle(const XGpu& g, const std::map<int, int>& indexOf, const std::vector<std::vector<char>>& done) {
  Node cur{-1, -1};
  for (size_t t = 0; t < g.tbs.size() && cur.tb < 0; ++t)
    for (size_t s = 0; s < g.tbs[t].steps.size(); ++s)
      if (!done[t][s]) {
        cur = {static_cast<int>(t), static_cast<int>(s)};
        break;
      }
  auto pred = [&](const Node& n) {
    const XStep& st = g.tbs[n.tb].steps[n.s];
    if (st.depTb >= 0) {
      Node d{indexOf.at(st.depTb), st.depStep};
      if (!done[d.tb][d.s]) return d;
    }
    return Node{n.tb, n.s - 1};
  };
  std::map<std::pair<int, int>, int> seenAt;
  std::vector<Node> walk;
  while (cur.tb >= 0 && cur.s >= 0 && !seenAt.count({cur.tb, cur.s})) {
    seenAt[{cur.tb, cur.s}] = static_cast<int>(walk.size());
    walk.push_back(cur);
    cur = pred(cur);
  }
  if (cur.tb < 0 || cur.s < 0) return "(not found)";
  std::string out;
  for (size_t i = seenAt[{cur.tb, cur.s}]; i < walk.size(); ++i) {
    const Node& n = walk[i];
    const XStep& st = g.tbs[n.tb].steps[n.s];
    out += "tb " + std::to_string(g.tbs[n.tb].id) + " step " + std::to_string(n.s) + " (line " +
           std::to_string(st.line) + ") waits for ";
  }
  return out + "tb " + std::to_string(g.tbs[cur.tb].id) + " step " + std::to_string(cur.s);
}

// Linear order of every step of `g`, or an error naming a step on a cycle.
Result<std::vector<Node>> linearize(const XGpu& g, const std::string& path) {
  std::map<int, int> indexOf;  // tb id -> index
  for (size_t t = 0; t < g.tbs.size(); ++t) indexOf[g.tbs[t].id] = static_cast<int>(t);
  // Waiters of each step (beyond its thread block successor) and in-degrees.
  std::vector<std::vector<std::vector<Node>>> waiters(g.tbs.size());
  std::vector<std::vector<int>> indegree(g.tbs.size());
  for (size_t t = 0; t < g.tbs.size(); ++t) {
    waiters[t].resize(g.tbs[t].steps.size());
    indegree[t].assign(g.tbs[t].steps.size(), 0);
  }
  for (size_t t = 0; t < g.tbs.size(); ++t) {
    for (const XStep& st : g.tbs[t].steps) {
      if (st.s > 0) ++indegree[t][st.s];
      if (st.depTb < 0) continue;
      int dt = indexOf.at(st.depTb);
      waiters[dt][st.depStep].push_back({static_cast<int>(t), st.s});
      ++indegree[t][st.s];
    }
  }
  using Key = std::tuple<int, int, int>;  // (s, tb id, tb index)
  std::priority_queue<Key, std::vector<Key>, std::greater<Key>> ready;
  for (size_t t = 0; t < g.tbs.size(); ++t)
    if (!g.tbs[t].steps.empty() && indegree[t][0] == 0) ready.push({0, g.tbs[t].id, static_cast<int>(t)});
  std::vector<Node> order;
  std::vector<std::vector<char>> done(g.tbs.size());
  for (size_t t = 0; t < g.tbs.size(); ++t) done[t].assign(g.tbs[t].steps.size(), 0);
  auto release = [&](int t, int s) {
    if (--indegree[t][s] == 0) ready.push({s, g.tbs[t].id, t});
  };
  while (!ready.empty()) {
    auto [s, id, t] = ready.top();
    ready.pop();
    order.push_back({t, s});
    done[t][s] = 1;
    if (s + 1 < static_cast<int>(g.tbs[t].steps.size())) release(t, s + 1);
    for (const Node& w : waiters[t][s]) release(w.tb, w.s);
  }
  size_t total = 0;
  for (const XThreadBlock& tb : g.tbs) total += tb.steps.size();
  if (order.size() == total) return order;
  return invalidArgument("%s: gpu %d: dependency cycle: %s", path.c_str(), g.id, describeCycle(g, indexOf, done).c_str());
}

// Lowers one GPU's steps into rank program `out`, recording origins.
Status lowerGpu(const XGpu& g, const std::string& path, RankProgram* out, std::vector<Origin>* origins) {
  TH_ASSIGN(std::vector<Node> order, linearize(g, path));
  std::map<int, int> indexOf;
  for (size_t t = 0; t < g.tbs.size(); ++t) indexOf[g.tbs[t].id] = static_cast<int>(t);
  // carried[t][s]: IR steps a dependency on (t, s) waits for.
  std::vector<std::vector<std::vector<uint32_t>>> carried(g.tbs.size());
  for (size_t t = 0; t < g.tbs.size(); ++t) carried[t].resize(g.tbs[t].steps.size());
  std::vector<std::set<uint32_t>> pending(g.tbs.size());
  std::vector<int64_t> lastReal(g.tbs.size(), -1);
  for (const Node& n : order) {
    const XThreadBlock& tb = g.tbs[n.tb];
    const XStep& st = tb.steps[n.s];
    std::set<uint32_t> deps = pending[n.tb];
    if (st.depTb >= 0) {
      const std::vector<uint32_t>& c = carried[indexOf.at(st.depTb)][st.depStep];
      deps.insert(c.begin(), c.end());
    }
    if (st.type == StepType::kNop) {
      pending[n.tb] = deps;
      if (lastReal[n.tb] >= 0) deps.insert(static_cast<uint32_t>(lastReal[n.tb]));
      carried[n.tb][n.s].assign(deps.begin(), deps.end());
      continue;
    }
    if (deps.size() > kMaxDepsPerStep)
      return invalidArgument("%s:%d: gpu %d tb %d step %d: more than %u dependencies", path.c_str(), st.line, g.id,
                             tb.id, st.s, kMaxDepsPerStep);
    const uint32_t index = static_cast<uint32_t>(out->steps.size());
    Step s = toIr(st, tb);
    s.deps.assign(deps.begin(), deps.end());
    out->steps.push_back(std::move(s));
    origins->push_back({tb.id, st.s, st.line});
    pending[n.tb].clear();
    lastReal[n.tb] = index;
    carried[n.tb][n.s] = {index};
  }
  return Status::ok();
}

}  // namespace

bool stepSends(StepType t) {
  return t == StepType::kSend || t == StepType::kRecvCopySend || t == StepType::kRecvReduceSend ||
         t == StepType::kRecvReduceCopySend;
}
bool stepReceives(StepType t) {
  return t == StepType::kRecv || t == StepType::kRecvCopySend || t == StepType::kRecvReduceSend ||
         t == StepType::kRecvReduce || t == StepType::kRecvReduceCopySend;
}
bool stepReadsSrc(StepType t) { return t != StepType::kNop && opReadsSrc(irOp(t)); }
bool stepWritesDst(StepType t) { return t != StepType::kNop && opWritesDst(irOp(t)); }

Op irOp(StepType t) {
  switch (t) {
    case StepType::kSend: return Op::kSend;
    case StepType::kRecv: return Op::kRecv;
    case StepType::kRecvCopySend: return Op::kRecvCopySend;
    case StepType::kRecvReduceSend: return Op::kRecvReduceSend;
    case StepType::kRecvReduce: return Op::kRecvReduce;
    case StepType::kRecvReduceCopySend: return Op::kRecvReduceCopySend;
    case StepType::kCopy: return Op::kCopy;
    case StepType::kReduce: return Op::kReduce;
    case StepType::kNop: break;
  }
  return Op::kCopy;
}

Result<FixedProgram> lower(const XAlgo& a, const std::string& path) {
  FixedProgram fp;
  fp.layout = a.layout;
  fp.origin = "MSCCL algo '" + a.name + "'";
  Program& p = fp.program;
  p.collective = a.collective;
  p.nranks = a.ngpus;
  p.root = isRooted(a.collective) ? a.root : 0;
  const uint32_t maxBlocks = std::max(inputBlocks(a.collective, a.ngpus), outputBlocks(a.collective, a.ngpus));
  p.chunksPerBlock = static_cast<uint32_t>(a.nchunksPerLoop / maxBlocks);
  p.nchannels = static_cast<uint32_t>(a.nchannels);
  int64_t scratch = 0;
  for (const XGpu& g : a.gpus) scratch = std::max(scratch, g.scratchChunks);
  p.scratchBlocks = static_cast<uint32_t>((scratch + p.chunksPerBlock - 1) / p.chunksPerBlock);
  if (p.scratchBlocks > kMaxScratchBlocks)
    return invalidArgument("%s: s_chunks=%lld needs %u scratch blocks, more than the limit of %u", path.c_str(),
                           static_cast<long long>(scratch), p.scratchBlocks, kMaxScratchBlocks);
  // Before anything allocates per chunk (the scratch re-layout, the verifier).
  const uint64_t slots = chunkSlots(p.collective, p.nranks, p.chunksPerBlock, p.scratchBlocks);
  if (slots > kMaxChunkSlots)
    return invalidArgument("%s: %d gpus with %llu chunks each (input, output and scratch, from nchunksperloop and "
                           "s_chunks) are %llu chunk slots, more than the %llu a schedule may have", path.c_str(),
                           p.nranks, static_cast<unsigned long long>(slots / p.nranks),
                           static_cast<unsigned long long>(slots), static_cast<unsigned long long>(kMaxChunkSlots));
  p.ranks.resize(a.ngpus);
  auto origins = std::make_shared<std::vector<std::vector<Origin>>>(a.ngpus);
  for (const XGpu& g : a.gpus) TH_CHECK(lowerGpu(g, path, &p.ranks[g.id], &(*origins)[g.id]));
  fp.locate = [origins](int rank, uint32_t step) {
    if (rank < 0 || static_cast<size_t>(rank) >= origins->size() || step >= (*origins)[rank].size())
      return std::string();
    const Origin& o = (*origins)[rank][step];
    return "gpu " + std::to_string(rank) + " tb " + std::to_string(o.tbId) + " step " + std::to_string(o.s) +
           ", line " + std::to_string(o.line);
  };
  TH_CHECK(alignScratch(p, fp.locate, path));
  return fp;
}

}  // namespace theseus::schedule::user::msccl
