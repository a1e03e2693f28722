// The verifier driver (verifier.h): structure, message matching, symbolic run
// (verifier_sim.cc), then the final check of every output chunk against the
// collective's definition.
//
// Matching. Every send is keyed (sender, receiver, channel, index in that
// stream) and every receive (sender, receiver, channel, index); sorting both
// lists pairs them. A key present on one side only is a send without a receive
// or the reverse; a pair whose message ranges differ in length or start
// sub-chunk would transfer different byte counts for some unit size.
#include <algorithm>
#include <cstdio>
#include <iterator>
#include <tuple>

#include "schedule/analysis.h"
#include "schedule/describe.h"
#include "schedule/verifier.h"
#include "schedule/verifier_sim.h"

namespace theseus::schedule {
namespace {

using verify::Matching;
using verify::Simulator;
using verify::ValueSpace;

struct Endpoint {
  int from, to;
  uint32_t channel, seq;
  size_t gid;
  int rank;
  uint32_t step;
  auto key() const { return std::make_tuple(from, to, channel, seq); }
};

size_t streamCount(const std::vector<Endpoint>& v, const Endpoint& e) {
  return std::count_if(v.begin(), v.end(),
                       [&](const Endpoint& x) { return x.from == e.from && x.to == e.to && x.channel == e.channel; });
}

Status unmatched(const Program& p, const Endpoint& e, bool isSend, const std::vector<Endpoint>& mine,
                 const std::vector<Endpoint>& theirs) {
  size_t nsend = streamCount(isSend ? mine : theirs, e), nrecv = streamCount(isSend ? theirs : mine, e);
  char text[320];
  snprintf(text, sizeof(text),
           "%s: rank %d sends %zu message(s) to rank %d on channel %u but rank %d receives %zu from rank %d on "
           "channel %u (message %u has no partner)",
           isSend ? "send without a matching receive" : "receive without a matching send", e.from, nsend, e.to,
           e.channel, e.to, nrecv, e.from, e.channel, e.seq);
  return invalidArgument("%s: %s", stepLabel(p, e.rank, e.step).c_str(), text);
}

Status checkSizes(const Program& p, const Endpoint& snd, const Endpoint& rcv) {
  const ChunkRange& a = messageRange(p.ranks[snd.rank].steps[snd.step]);
  const ChunkRange& b = messageRange(p.ranks[rcv.rank].steps[rcv.step]);
  uint32_t k = p.chunksPerBlock;
  if (a.count == b.count && a.first % k == b.first % k) return Status::ok();
  return invalidArgument(
      "%s: size mismatch: sends %u chunk(s) from sub-chunk %u (%s) but its matching receive, %s, takes %u chunk(s) "
      "from sub-chunk %u (%s)",
      stepLabel(p, snd.rank, snd.step).c_str(), a.count, a.first % k, rangeText(a).c_str(),
      stepLabel(p, rcv.rank, rcv.step).c_str(), b.count, b.first % k, rangeText(b).c_str());
}

Result<Matching> matchMessages(const Program& p, const std::vector<RankPlan>& plans) {
  Matching m;
  m.offset.resize(p.nranks + 1, 0);
  for (int r = 0; r < p.nranks; ++r) m.offset[r + 1] = m.offset[r] + p.ranks[r].steps.size();
  m.receiverOf.assign(m.offset.back(), -1);
  m.senderOf.assign(m.offset.back(), -1);
  std::vector<Endpoint> sends, recvs;
  for (int r = 0; r < p.nranks; ++r) {
    for (uint32_t k = 0; k < p.ranks[r].steps.size(); ++k) {
      const Step& s = p.ranks[r].steps[k];
      const StepPlan& sp = plans[r].steps[k];
      if (opSends(s.op)) sends.push_back({r, s.sendPeer, s.channel, sp.sendSeq, m.gid(r, k), r, k});
      if (opReceives(s.op)) recvs.push_back({s.recvPeer, r, s.channel, sp.recvSeq, m.gid(r, k), r, k});
    }
  }
  auto less = [](const Endpoint& a, const Endpoint& b) { return a.key() < b.key(); };
  std::sort(sends.begin(), sends.end(), less);
  std::sort(recvs.begin(), recvs.end(), less);
  size_t i = 0, j = 0;
  while (i < sends.size() || j < recvs.size()) {
    if (j == recvs.size() || (i < sends.size() && less(sends[i], recvs[j])))
      return unmatched(p, sends[i], true, sends, recvs);
    if (i == sends.size() || less(recvs[j], sends[i])) return unmatched(p, recvs[j], false, recvs, sends);
    TH_CHECK(checkSizes(p, sends[i], recvs[j]));
    m.receiverOf[sends[i].gid] = static_cast<int64_t>(recvs[j].gid);
    m.senderOf[recvs[j].gid] = static_cast<int64_t>(sends[i].gid);
    ++i;
    ++j;
  }
  return m;
}

// The contributions output chunk `j` of `rank` must hold.
verify::Value expected(const Program& p, const ValueSpace& space, int rank, uint32_t j) {
  const uint32_t k = p.chunksPerBlock, block = j / k, sub = j % k;
  switch (p.collective) {
    case Collective::kAllReduce:
    case Collective::kReduce: return space.allRanks(p.nranks, j);
    case Collective::kReduceScatter: return space.allRanks(p.nranks, rank * k + j);
    case Collective::kBroadcast: return space.single(p.root, j);
    case Collective::kAllGather:
    case Collective::kGather: return space.single(static_cast<int>(block), sub);
    case Collective::kAlltoAll: return space.single(static_cast<int>(block), rank * k + sub);
    case Collective::kScatter: return space.single(p.root, rank * k + j);
  }
  return {};
}

Status checkOutputChunk(const Program& p, const Simulator& sim, int rank, uint32_t j) {
  using verify::Contribution;
  const ValueSpace& space = sim.space();
  const verify::Value& have = sim.valueAt(rank, Buf::kOutput, j);
  const verify::Value wantValue = expected(p, space, rank, j);
  if (have == wantValue) return Status::ok();
  std::vector<Contribution> want = space.list(wantValue);
  const char* coll = collectiveName(p.collective);
  if (have.empty())
    return invalidArgument("rank %d output chunk %u is never written; %s needs {%s}", rank, j, coll,
                           ValueSpace::format(want).c_str());
  std::vector<Contribution> got = space.list(have), missing, extra;
  std::sort(want.begin(), want.end());
  std::set_difference(want.begin(), want.end(), got.begin(), got.end(), std::back_inserter(missing));
  std::set_difference(got.begin(), got.end(), want.begin(), want.end(), std::back_inserter(extra));
  std::string need = want.size() > 1 ? "contributions of all " + std::to_string(p.nranks) + " ranks"
                                     : "{" + ValueSpace::format(want) + "}";
  std::string detail;
  if (!missing.empty()) detail += "missing " + ValueSpace::format(missing);
  if (!extra.empty()) detail += std::string(detail.empty() ? "" : "; ") + "unexpected " + ValueSpace::format(extra);
  return invalidArgument("rank %d output chunk %u holds %s but %s needs %s (%s)", rank, j, space.format(have).c_str(),
                         coll, need.c_str(), detail.c_str());
}

}  // namespace

Status verifyProgram(const Program& p, const VerifyOptions& options) {
  TH_ASSIGN(std::vector<RankPlan> plans, analyzeProgram(p));  // checks the structure first
  Result<Matching> match = matchMessages(p, plans);
  if (!match.isOk()) return match.status().withContext(programLabel(p));
  Simulator sim(p, plans, match.value());
  Status st = sim.run();
  if (!st.isOk()) return st.withContext(programLabel(p));
  if (!options.checkResult) return Status::ok();
  for (int r = 0; r < p.nranks; ++r) {
    if (!bufferPresent(p.collective, r, p.root, Buf::kOutput)) continue;
    for (uint32_t j = 0; j < p.chunksIn(Buf::kOutput); ++j) {
      st = checkOutputChunk(p, sim, r, j);
      if (!st.isOk()) return st.withContext(programLabel(p));
    }
  }
  return Status::ok();
}

}  // namespace theseus::schedule
