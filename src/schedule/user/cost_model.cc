// The alpha-beta estimate (cost_model.h) as a discrete-event simulation.
//
// Each step has four event times: START, RECV (its receive finished), SEND
// (its send finished) and COMPLETE, each with the event that determined it.
// A message becomes schedulable once both ends are ready (sender: started,
// own receive done for fused ops, previous send of its stream done;
// receiver: started, previous receive of its stream done). Schedulable
// messages wait in a queue ordered by ready time; a message whose link is
// still busy goes back with the time the link frees up, so every link
// carries messages one at a time in ready order and event times never go
// backwards. Ports (NICs) are links of their own that every message between
// two ports also holds for its transfer time.
#include "schedule/user/cost_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <map>
#include <queue>
#include <tuple>

#include "schedule/analysis.h"
#include "schedule/describe.h"

namespace theseus::schedule::user {
namespace {

enum Ev : uint8_t { kStart = 0, kRecv = 1, kSend = 2, kComplete = 3 };

struct EvRef {
  int64_t gid = -1;
  Ev ev = kStart;
};

struct Pending {
  double key;
  int64_t recvGid;
  EvRef cause;
  bool operator>(const Pending& o) const { return std::tie(key, recvGid) > std::tie(o.key, o.recvGid); }
};

struct LinkState {
  double freeAt = 0;
  EvRef last;
  uint64_t bytes = 0;
  uint32_t messages = 0;
};

class Simulation {
 public:
  Simulation(const Program& p, const std::vector<RankPlan>& plans, size_t bytes, const LinkParams& link);
  Status run();
  CostEstimate result() const;

 private:
  Status match();
  double sizeOf(int64_t g) const;
  const Step& step(int64_t g) const { return p_.ranks[rank_[g]].steps[index_[g]]; }
  const StepPlan& plan(int64_t g) const { return plans_[rank_[g]].steps[index_[g]]; }
  bool known(int64_t g, Ev e) const { return t_[g][e] >= 0; }
  void set(int64_t g, Ev e, double time, EvRef cause) {
    t_[g][e] = time;
    cause_[g][e] = cause;
  }
  // max(time, t[g][e]) into (*time, *cause); false when that time is unknown yet.
  bool atLeast(int64_t g, Ev e, double* time, EvRef* cause) const;
  bool recvReady(int64_t r, double* time, EvRef* cause) const;
  bool sendReady(int64_t s, double* time, EvRef* cause) const;
  void tryQueue(int64_t recvGid);
  void started(int64_t g);
  void completed(int64_t g);
  void deliver(const Pending& m);

  const Program& p_;
  const std::vector<RankPlan>& plans_;
  size_t bytes_;
  LinkParams link_;
  std::vector<int> rank_;
  std::vector<uint32_t> index_;
  std::vector<size_t> offset_;
  std::vector<std::array<double, 4>> t_;
  std::vector<std::array<EvRef, 4>> cause_;
  std::vector<int64_t> sender_;                // receiving step -> the step sending its message
  std::vector<int64_t> receiver_;              // sending step -> the step receiving its message
  std::vector<int64_t> nextRecv_, nextSend_;   // the step whose recvAfter / sendAfter is this one
  std::vector<uint32_t> waitLeft_;
  std::vector<char> queued_;
  std::map<std::pair<int, int>, LinkState> links_;
  std::map<int, LinkState> sendPorts_, recvPorts_;  // by port id (LinkParams::portOf)
  std::priority_queue<Pending, std::vector<Pending>, std::greater<Pending>> ready_;
  std::deque<int64_t> work_;
  size_t completedCount_ = 0;
};

Simulation::Simulation(const Program& p, const std::vector<RankPlan>& plans, size_t bytes, const LinkParams& link)
    : p_(p), plans_(plans), bytes_(bytes), link_(link) {
  offset_.assign(p.nranks + 1, 0);
  for (int r = 0; r < p.nranks; ++r) offset_[r + 1] = offset_[r] + p.ranks[r].steps.size();
  const size_t total = offset_.back();
  for (int r = 0; r < p.nranks; ++r)
    for (uint32_t i = 0; i < p.ranks[r].steps.size(); ++i) {
      rank_.push_back(r);
      index_.push_back(i);
    }
  std::array<double, 4> unknown = {-1, -1, -1, -1};
  t_.assign(total, unknown);
  cause_.assign(total, {});
  sender_.assign(total, -1);
  receiver_.assign(total, -1);
  nextRecv_.assign(total, -1);
  nextSend_.assign(total, -1);
  waitLeft_.assign(total, 0);
  queued_.assign(total, 0);
}

Status Simulation::match() {
  std::map<std::tuple<int, int, int, uint32_t>, int64_t> sends;
  for (int64_t g = 0; g < static_cast<int64_t>(rank_.size()); ++g) {
    const Step& s = step(g);
    const StepPlan& sp = plan(g);
    if (opSends(s.op)) sends[{rank_[g], s.sendPeer, s.channel, sp.sendSeq}] = g;
    if (sp.recvAfter >= 0) nextRecv_[offset_[rank_[g]] + sp.recvAfter] = g;
    if (sp.sendAfter >= 0) nextSend_[offset_[rank_[g]] + sp.sendAfter] = g;
    waitLeft_[g] = static_cast<uint32_t>(sp.waitFor.size());
  }
  size_t matched = 0;
  for (int64_t g = 0; g < static_cast<int64_t>(rank_.size()); ++g) {
    const Step& s = step(g);
    if (!opReceives(s.op)) continue;
    auto it = sends.find({s.recvPeer, rank_[g], s.channel, plan(g).recvSeq});
    if (it == sends.end())
      return invalidArgument("%s: %s: receive without a matching send", programLabel(p_).c_str(),
                             stepLabel(p_, rank_[g], index_[g]).c_str());
    sender_[g] = it->second;
    receiver_[it->second] = g;
    ++matched;
  }
  if (matched != sends.size()) {
    for (const auto& [key, g] : sends)
      if (receiver_[g] < 0)
        return invalidArgument("%s: %s: send without a matching receive", programLabel(p_).c_str(),
                               stepLabel(p_, rank_[g], index_[g]).c_str());
  }
  return Status::ok();
}

double Simulation::sizeOf(int64_t g) const {
  const Step& s = step(g);
  const ChunkRange& r = opWritesDst(s.op) && !opSends(s.op) ? s.dst : messageRange(s);
  return static_cast<double>(chunkElems(p_, r, bytes_).size);
}

bool Simulation::atLeast(int64_t g, Ev e, double* time, EvRef* cause) const {
  if (!known(g, e)) return false;
  if (t_[g][e] > *time || cause->gid < 0) {
    *time = std::max(*time, t_[g][e]);
    *cause = {g, e};
  }
  return true;
}

bool Simulation::recvReady(int64_t r, double* time, EvRef* cause) const {
  *time = 0;
  *cause = {};
  if (!atLeast(r, kStart, time, cause)) return false;
  int32_t after = plan(r).recvAfter;
  return after < 0 || atLeast(static_cast<int64_t>(offset_[rank_[r]]) + after, kRecv, time, cause);
}

bool Simulation::sendReady(int64_t s, double* time, EvRef* cause) const {
  *time = 0;
  *cause = {};
  if (!atLeast(s, kStart, time, cause)) return false;
  if (opReceives(step(s).op) && !atLeast(s, kRecv, time, cause)) return false;
  int32_t after = plan(s).sendAfter;
  return after < 0 || atLeast(static_cast<int64_t>(offset_[rank_[s]]) + after, kSend, time, cause);
}

void Simulation::tryQueue(int64_t r) {
  if (r < 0 || queued_[r]) return;
  const int64_t s = sender_[r];
  double rt, st;
  EvRef rc, sc;
  if (!recvReady(r, &rt, &rc) || !sendReady(s, &st, &sc)) return;
  queued_[r] = 1;
  // On a tie the sender's side is the cause: the data dependency reads better
  // on a critical path than "the receiver was ready at the same time".
  ready_.push(rt > st ? Pending{rt, r, rc} : Pending{st, r, sc});
}

void Simulation::started(int64_t g) {
  const Step& s = step(g);
  if (!opReceives(s.op) && !opSends(s.op)) {
    double local = link_.localGBps > 0 ? sizeOf(g) / (link_.localGBps * 1e3) : 0.0;
    set(g, kComplete, t_[g][kStart] + local, {g, kStart});
    completed(g);
    return;
  }
  if (opReceives(s.op)) tryQueue(g);
  if (opSends(s.op)) tryQueue(receiver_[g]);
}

void Simulation::completed(int64_t g) {
  ++completedCount_;
  for (uint32_t u : plan(g).unblocks) {
    int64_t ug = static_cast<int64_t>(offset_[rank_[g]]) + u;
    if (--waitLeft_[ug] == 0) work_.push_back(ug);
  }
}

void Simulation::deliver(const Pending& m) {
  const int64_t r = m.recvGid, s = sender_[r];
  LinkState& ls = links_[{rank_[s], rank_[r]}];
  // The link, and with ports the sender's and the receiver's NIC: when one is
  // busy, try again when it frees up.
  LinkState* busiest = &ls;
  LinkState *sendPort = nullptr, *recvPort = nullptr;
  if (!link_.portOf.empty() && link_.portOf[rank_[s]] != link_.portOf[rank_[r]]) {
    sendPort = &sendPorts_[link_.portOf[rank_[s]]];
    recvPort = &recvPorts_[link_.portOf[rank_[r]]];
    for (LinkState* p : {sendPort, recvPort})
      if (p->freeAt > busiest->freeAt) busiest = p;
  }
  if (busiest->freeAt > m.key) {
    ready_.push({busiest->freeAt, r, busiest->last});
    return;
  }
  const size_t at = static_cast<size_t>(rank_[s]) * static_cast<size_t>(p_.nranks) + static_cast<size_t>(rank_[r]);
  const double beta = at < link_.linkGBps.size() && link_.linkGBps[at] > 0 ? link_.linkGBps[at] : link_.betaGBps;
  const double alpha = at < link_.linkAlphaUs.size() && link_.linkAlphaUs[at] > 0 ? link_.linkAlphaUs[at] : link_.alphaUs;
  const double size = sizeOf(r), busy = size / (beta * 1e3);
  const double end = m.key + alpha + busy;
  ls.freeAt = m.key + busy;
  ls.last = {s, kSend};
  for (LinkState* p : {sendPort, recvPort}) {
    if (p == nullptr) continue;
    p->freeAt = ls.freeAt;
    p->last = ls.last;
  }
  ls.bytes += static_cast<uint64_t>(size);
  ls.messages += 1;
  set(r, kRecv, end, m.cause);
  set(s, kSend, end, m.cause);
  set(s, kComplete, end, {s, kSend});
  completed(s);
  if (nextSend_[s] >= 0) tryQueue(receiver_[nextSend_[s]]);
  if (nextRecv_[r] >= 0) tryQueue(nextRecv_[r]);
  if (opSends(step(r).op)) {
    tryQueue(receiver_[r]);
  } else {
    set(r, kComplete, end, {r, kRecv});
    completed(r);
  }
}

Status Simulation::run() {
  TH_CHECK(match());
  for (int64_t g = 0; g < static_cast<int64_t>(rank_.size()); ++g)
    if (waitLeft_[g] == 0) work_.push_back(g);
  while (true) {
    while (!work_.empty()) {
      int64_t g = work_.front();
      work_.pop_front();
      double start = 0;
      EvRef cause;
      for (uint32_t w : plan(g).waitFor) atLeast(static_cast<int64_t>(offset_[rank_[g]]) + w, kComplete, &start, &cause);
      set(g, kStart, start, cause);
      started(g);
    }
    if (ready_.empty()) break;
    Pending m = ready_.top();
    ready_.pop();
    deliver(m);
  }
  if (completedCount_ == rank_.size()) return Status::ok();
  for (int64_t g = 0; g < static_cast<int64_t>(rank_.size()); ++g)
    if (!known(g, kComplete))
      return invalidArgument("%s: the program cannot finish: %s never completes (%zu of %zu steps do)",
                             programLabel(p_).c_str(), stepLabel(p_, rank_[g], index_[g]).c_str(), completedCount_,
                             rank_.size());
  return internalError("cost model: inconsistent completion count");
}

CostEstimate Simulation::result() const {
  CostEstimate out;
  out.rankTimeUs.assign(p_.nranks, 0.0);
  int64_t last = -1;
  for (int64_t g = 0; g < static_cast<int64_t>(rank_.size()); ++g) {
    double c = t_[g][kComplete];
    out.rankTimeUs[rank_[g]] = std::max(out.rankTimeUs[rank_[g]], c);
    if (last < 0 || c > t_[last][kComplete]) last = g;
  }
  for (const auto& [key, ls] : links_) {
    out.links.push_back({key.first, key.second, ls.bytes, ls.messages});
    out.totalBytes += ls.bytes;
    out.messages += ls.messages;
    out.maxLinkBytes = std::max(out.maxLinkBytes, ls.bytes);
  }
  if (last < 0) return out;
  out.timeUs = t_[last][kComplete];
  // Walk the causes back from the last completion; list each step once.
  EvRef cur{last, kComplete};
  while (cur.gid >= 0) {
    if (out.criticalPath.empty() || out.criticalPath.back().rank != rank_[cur.gid] ||
        out.criticalPath.back().step != index_[cur.gid])
      out.criticalPath.push_back({rank_[cur.gid], index_[cur.gid], t_[cur.gid][kStart], t_[cur.gid][kComplete]});
    cur = cause_[cur.gid][cur.ev];
  }
  std::reverse(out.criticalPath.begin(), out.criticalPath.end());
  return out;
}

}  // namespace

Result<CostEstimate> estimateCost(const Program& program, size_t bytes, const LinkParams& link) {
  if (!(link.betaGBps > 0) || !(link.alphaUs >= 0) || !(link.localGBps >= 0))
    return invalidArgument("cost model: need alpha >= 0 us, beta > 0 GB/s and local bandwidth >= 0 GB/s "
                           "(got %g, %g, %g)", link.alphaUs, link.betaGBps, link.localGBps);
  const size_t links = static_cast<size_t>(program.nranks) * static_cast<size_t>(program.nranks);
  for (const auto* v : {&link.linkGBps, &link.linkAlphaUs}) {
    if (!v->empty() && v->size() != links)
      return invalidArgument("cost model: per-link values need nranks * nranks = %zu entries (got %zu)", links,
                             v->size());
    for (double x : *v)
      if (!std::isfinite(x)) return invalidArgument("cost model: per-link values must be finite (got %g)", x);
  }
  if (!link.portOf.empty() && link.portOf.size() != static_cast<size_t>(program.nranks))
    return invalidArgument("cost model: ports need one id per rank (%d, got %zu)", program.nranks, link.portOf.size());
  TH_CHECK(checkStructure(program));
  TH_ASSIGN(std::vector<RankPlan> plans, analyzeProgram(program));
  Simulation sim(program, plans, bytes, link);
  TH_CHECK(sim.run());
  return sim.result();
}

}  // namespace theseus::schedule::user
