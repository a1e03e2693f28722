#include "exec/rank_template.h"

#include <algorithm>
#include <atomic>
#include <map>

#include "schedule/raw_input.h"

namespace theseus::exec {
namespace {

using schedule::Buf;

// Index of the connection (peer, channel, direction), created on first use.
int32_t connIndex(RankTemplate& t, std::map<std::tuple<int, int, bool>, int32_t>& index, int peer, int channel,
                  bool isSend, uint32_t* pos) {
  auto key = std::make_tuple(peer, channel, isSend);
  auto it = index.find(key);
  if (it == index.end()) {
    PlanConn c;
    c.peer = peer;
    c.channel = static_cast<uint8_t>(channel);
    c.isSend = isSend;
    t.conns.push_back(c);
    it = index.emplace(key, static_cast<int32_t>(t.conns.size() - 1)).first;
  }
  *pos = t.conns[it->second].nsteps++;
  return it->second;
}

}  // namespace

Result<std::unique_ptr<RankTemplate>> buildRankTemplate(const schedule::Program& program, int rank,
                                                        const schedule::RankPlan& analysis) {
  if (rank < 0 || rank >= static_cast<int>(program.ranks.size()))
    return internalError("program '%s' has no rank %d", program.name.c_str(), rank);
  const auto& steps = program.ranks[rank].steps;
  if (analysis.steps.size() != steps.size())
    return internalError("analysis of '%s' rank %d has %zu entries for %zu steps", program.name.c_str(), rank,
                         analysis.steps.size(), steps.size());
  auto t = std::make_unique<RankTemplate>();
  static std::atomic<uint64_t> nextId{0};
  t->id = nextId.fetch_add(1, std::memory_order_relaxed) + 1;
  t->program = &program;
  t->rank = rank;
  t->steps.resize(steps.size());

  // Which reads are still raw input (a pre-multiplying reduction scales them exactly once).
  TH_ASSIGN(std::vector<schedule::RawInputUse> raw, schedule::rawInputUses(program, rank));

  std::map<std::tuple<int, int, bool>, int32_t> connIdx;
  for (uint32_t s = 0; s < steps.size(); ++s) {
    const schedule::Step& st = steps[s];
    TemplateStep& ts = t->steps[s];
    ts.op = st.op;
    ts.channel = st.channel;
    ts.recvPeer = st.recvPeer;
    ts.sendPeer = st.sendPeer;
    ts.src = st.src;
    ts.dst = st.dst;
    ts.predBegin = static_cast<uint32_t>(t->preds.size());
    for (uint32_t p : analysis.steps[s].waitFor) {
      if (p >= s)
        return internalError("analysis of '%s' rank %d: step %u waits for later step %u", program.name.c_str(), rank,
                             s, p);
      t->preds.push_back(p);
    }
    ts.predEnd = static_cast<uint32_t>(t->preds.size());
    if (schedule::opReceives(st.op)) ts.inConn = connIndex(*t, connIdx, st.recvPeer, st.channel, false, &ts.inPos);
    if (schedule::opSends(st.op)) ts.outConn = connIndex(*t, connIdx, st.sendPeer, st.channel, true, &ts.outPos);

    auto noteUse = [&](Buf b) {
      if (b == Buf::kInput) t->usesInput = true;
      else if (b == Buf::kOutput) t->usesOutput = true;
      else t->usesScratch = true;
    };
    if (schedule::opReadsSrc(st.op)) noteUse(st.src.buf);
    if (schedule::opWritesDst(st.op)) noteUse(st.dst.buf);
    ts.srcIsRawInput = raw[s].srcIsRawInput;
    ts.dstIsRawInput = raw[s].dstIsRawInput;
  }
  return t;
}

void lowerTemplate(const RankTemplate& t, const CallBuffers& b, const Reduction& red, Plan& plan) {
  const schedule::Program& prog = *t.program;
  plan.chunked = true;
  plan.unitElems = b.unitElems;
  plan.chunksPerBlock = prog.chunksPerBlock;
  plan.elemBytes = b.elemBytes;
  plan.rounds = roundsFor(b.unitElems, prog.chunksPerBlock, b.elemBytes, plan.sliceBytes);
  plan.preds.assign(t.preds.begin(), t.preds.end());
  plan.conns.assign(t.conns.begin(), t.conns.end());
  plan.steps.resize(t.steps.size());
  plan.shapeId = t.id;
  auto base = [&](Buf buf) -> char* {
    return buf == Buf::kInput ? const_cast<char*>(b.input) : buf == Buf::kOutput ? b.output : b.scratch;
  };
  for (size_t s = 0; s < t.steps.size(); ++s) {
    const TemplateStep& ts = t.steps[s];
    PlanStep& ps = plan.steps[s];
    ps.op = ts.op;
    ps.channel = ts.channel;
    ps.recvPeer = ts.recvPeer;
    ps.sendPeer = ts.sendPeer;
    ps.inConn = ts.inConn;
    ps.outConn = ts.outConn;
    ps.inPos = ts.inPos;
    ps.outPos = ts.outPos;
    ps.predBegin = ts.predBegin;
    ps.predEnd = ts.predEnd;
    ps.index = static_cast<uint32_t>(s);
    ps.hasSrc = schedule::opReadsSrc(ts.op);
    ps.hasDst = schedule::opWritesDst(ts.op);
    ps.src = ps.hasSrc ? base(ts.src.buf) : nullptr;
    ps.dst = ps.hasDst ? base(ts.dst.buf) : nullptr;
    ps.srcFirst = ts.src.first;
    ps.dstFirst = ts.dst.first;
    ps.nchunks = schedule::opReadsSrc(ts.op) ? ts.src.count : ts.dst.count;
    ps.bytes = 0;
    ps.scaleSrc = red.preMul && ts.srcIsRawInput;
    ps.scaleDst = red.preMul && ts.dstIsRawInput;
  }
}

}  // namespace theseus::exec
