// The verifier's symbolic executor.
//
// Steps run under the execution model of analysis.h with rendezvous messages:
// the k-th send on (sender, receiver, channel) transfers to the k-th receive
// only when both sides are ready at once (the sender started, its previous send
// on that stream done and, for fused ops, its own receive done; the receiver
// started and its previous receive on that stream done). Nothing is buffered,
// so a program that finishes here finishes with any amount of buffering.
//
// The run is event driven: finishing a step decrements its dependants' pending
// counts, and each event "pokes" the few steps that may now move (the step
// itself, the next step of the same stream, the matched partner), so the whole
// run is linear in steps plus edges. Values move with the events: a send reads
// its source when the transfer happens, which the hazard edges make equal to
// the value at its place in program order.
//
// When no event is left and some step is incomplete, every blocked step waits
// on another blocked step (its incomplete waitFor, the previous step of its
// stream, or its matched partner), so following those links from any blocked
// step must close a cycle; that cycle is the deadlock report.
#include <algorithm>
#include <cstdio>

#include "schedule/describe.h"
#include "schedule/verifier_sim.h"

namespace theseus::schedule::verify {

Value ValueSpace::single(int rank, uint32_t chunk) const {
  Value v(1 + rankWords_, 0);
  v[0] = chunk;
  v[1 + rank / 64] = 1ull << (rank % 64);
  return v;
}

Value ValueSpace::allRanks(int nranks, uint32_t chunk) const {
  Value v(1 + rankWords_, 0);
  v[0] = chunk;
  for (size_t w = 0; w * 64 < static_cast<size_t>(nranks); ++w) {
    size_t bits = std::min<size_t>(64, static_cast<size_t>(nranks) - w * 64);
    v[1 + w] = bits == 64 ? ~0ull : (1ull << bits) - 1;
  }
  return v;
}

std::vector<Contribution> ValueSpace::list(const Value& v) const {
  std::vector<Contribution> out;
  for (size_t e = 0; e < v.size(); e += 1 + rankWords_)
    for (size_t w = 0; w < rankWords_; ++w)
      for (uint64_t bits = v[e + 1 + w]; bits; bits &= bits - 1)
        out.push_back({static_cast<int>(w * 64 + __builtin_ctzll(bits)), static_cast<uint32_t>(v[e])});
  return out;
}

bool ValueSpace::combine(Value* into, const Value& add, Contribution* dup) const {
  const size_t stride = 1 + rankWords_;
  Value out;
  out.reserve(into->size() + add.size());
  size_t i = 0, j = 0;
  const Value& a = *into;
  while (i < a.size() || j < add.size()) {
    if (j == add.size() || (i < a.size() && a[i] < add[j])) {
      out.insert(out.end(), a.begin() + i, a.begin() + i + stride);
      i += stride;
    } else if (i == a.size() || add[j] < a[i]) {
      out.insert(out.end(), add.begin() + j, add.begin() + j + stride);
      j += stride;
    } else {
      out.push_back(a[i]);
      for (size_t w = 1; w < stride; ++w) {
        if (uint64_t both = a[i + w] & add[j + w]) {
          *dup = {static_cast<int>((w - 1) * 64 + __builtin_ctzll(both)), static_cast<uint32_t>(a[i])};
          return false;
        }
        out.push_back(a[i + w] | add[j + w]);
      }
      i += stride;
      j += stride;
    }
  }
  *into = std::move(out);
  return true;
}

std::string ValueSpace::format(const Contribution& c) {
  return "r" + std::to_string(c.rank) + ":c" + std::to_string(c.chunk);
}

std::string ValueSpace::format(const std::vector<Contribution>& list) {
  constexpr size_t kShown = 8;
  std::string out;
  for (size_t i = 0; i < list.size() && i < kShown; ++i) out += (i ? ", " : "") + format(list[i]);
  if (list.size() > kShown) out += ", ... (" + std::to_string(list.size()) + " in all)";
  return out;
}

std::string ValueSpace::format(const Value& v) const {
  std::vector<Contribution> all = list(v);
  std::sort(all.begin(), all.end(), [](const Contribution& a, const Contribution& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.chunk < b.chunk;
  });
  return "{" + format(all) + "}";
}

Simulator::Simulator(const Program& p, const std::vector<RankPlan>& plans, const Matching& match)
    : p_(p), plans_(plans), match_(match), space_(p.nranks) {
  const size_t total = match.offset.back();
  rankOf_.resize(total);
  state_.assign(total, 0);
  pending_.resize(total);
  nextRecv_.assign(total, -1);
  nextSend_.assign(total, -1);
  outgoing_.resize(total);
  mem_.resize(p.nranks);
  for (int r = 0; r < p.nranks; ++r) {
    for (uint32_t k = 0; k < plans[r].steps.size(); ++k) {
      size_t g = match.gid(r, k);
      const StepPlan& sp = plans[r].steps[k];
      rankOf_[g] = r;
      pending_[g] = static_cast<uint32_t>(sp.waitFor.size());
      if (sp.recvAfter >= 0) nextRecv_[match.gid(r, sp.recvAfter)] = static_cast<int64_t>(g);
      if (sp.sendAfter >= 0) nextSend_[match.gid(r, sp.sendAfter)] = static_cast<int64_t>(g);
    }
    for (int b = 0; b < 3; ++b) mem_[r].buf[b].resize(p.chunksIn(static_cast<Buf>(b)));
    if (!bufferPresent(p.collective, r, p.root, Buf::kInput)) continue;
    for (uint32_t j = 0; j < p.chunksIn(Buf::kInput); ++j) {
      PhysRange at = physicalRange(p, r, ChunkRange{Buf::kInput, j, 1});
      mem_[r].buf[static_cast<int>(at.buf)][at.first] = space_.single(r, j);
    }
  }
}

const Value& Simulator::valueAt(int rank, Buf b, uint32_t chunk) const {
  PhysRange at = physicalRange(p_, rank, ChunkRange{b, chunk, 1});
  return mem_[rank].buf[static_cast<int>(at.buf)][at.first];
}

Status Simulator::stepError(size_t g, const std::string& text) const {
  int r = rankOf_[g];
  return invalidArgument("%s: %s", stepLabel(p_, r, static_cast<uint32_t>(g - match_.offset[r])).c_str(),
                         text.c_str());
}

Status Simulator::read(size_t g, const ChunkRange& r, std::vector<Value>* out) const {
  int rank = rankOf_[g];
  PhysRange at = physicalRange(p_, rank, r);
  const std::vector<Value>& mem = mem_[rank].buf[static_cast<int>(at.buf)];
  out->assign(mem.begin() + at.first, mem.begin() + at.first + r.count);
  for (uint32_t i = 0; i < r.count; ++i)
    if ((*out)[i].empty())
      return stepError(g, "reads " + rangeText(ChunkRange{r.buf, r.first + i, 1}) +
                              ", which holds nothing yet (uninitialised: never written before this read)");
  return Status::ok();
}

void Simulator::write(size_t g, const ChunkRange& r, const std::vector<Value>& v) {
  int rank = rankOf_[g];
  PhysRange at = physicalRange(p_, rank, r);
  std::copy(v.begin(), v.end(), mem_[rank].buf[static_cast<int>(at.buf)].begin() + at.first);
}

Status Simulator::combine(size_t g, const ChunkRange& where, std::vector<Value>* out,
                          const std::vector<Value>& add) const {
  for (size_t i = 0; i < out->size(); ++i) {
    Contribution dup{};
    if (!space_.combine(&(*out)[i], add[i], &dup)) {
      ChunkRange chunk{where.buf, where.first + static_cast<uint32_t>(i), 1};
      return stepError(g, "double-counted contribution: " + ValueSpace::format(dup) + " is already in " +
                              rangeText(chunk) + " " + space_.format((*out)[i]) + " and would be reduced into it again");
    }
  }
  return Status::ok();
}

Status Simulator::runLocal(size_t g) {
  const Step& s = p_.ranks[rankOf_[g]].steps[g - match_.offset[rankOf_[g]]];
  std::vector<Value> a, b;
  TH_CHECK(read(g, s.src, &a));
  if (s.op == Op::kReduce) {
    TH_CHECK(read(g, s.dst, &b));
    TH_CHECK(combine(g, s.dst, &b, a));
    write(g, s.dst, b);
  } else {
    write(g, s.dst, a);
  }
  return Status::ok();
}

Status Simulator::receive(size_t k, const std::vector<Value>& message) {
  const Step& s = p_.ranks[rankOf_[k]].steps[k - match_.offset[rankOf_[k]]];
  std::vector<Value> v;
  if (opReduces(s.op)) {
    TH_CHECK(read(k, s.src, &v));
    TH_CHECK(combine(k, s.src, &v, message));
  } else {
    v = message;
  }
  if (opWritesDst(s.op)) write(k, s.dst, v);
  if (opSends(s.op)) outgoing_[k] = std::move(v);
  state_[k] |= kRecvDone;
  return Status::ok();
}

bool Simulator::sendReady(size_t s) const {
  int r = rankOf_[s];
  uint32_t idx = static_cast<uint32_t>(s - match_.offset[r]);
  const StepPlan& sp = plans_[r].steps[idx];
  if (!(state_[s] & kStarted) || (state_[s] & kSendDone)) return false;
  if (sp.sendAfter >= 0 && !(state_[match_.gid(r, sp.sendAfter)] & kSendDone)) return false;
  return !opReceives(p_.ranks[r].steps[idx].op) || (state_[s] & kRecvDone);
}

bool Simulator::recvReady(size_t k) const {
  int r = rankOf_[k];
  const StepPlan& sp = plans_[r].steps[k - match_.offset[r]];
  if (!(state_[k] & kStarted) || (state_[k] & kRecvDone)) return false;
  return sp.recvAfter < 0 || (state_[match_.gid(r, sp.recvAfter)] & kRecvDone);
}

Status Simulator::complete(size_t g) {
  state_[g] |= kComplete;
  int r = rankOf_[g];
  for (uint32_t u : plans_[r].steps[g - match_.offset[r]].unblocks) {
    size_t gu = match_.gid(r, u);
    if (--pending_[gu] == 0) poke(gu);
  }
  return Status::ok();
}

Status Simulator::tryTransfer(size_t s) {
  size_t k = static_cast<size_t>(match_.receiverOf[s]);
  if (!sendReady(s) || !recvReady(k)) return Status::ok();
  const Step& st = p_.ranks[rankOf_[s]].steps[s - match_.offset[rankOf_[s]]];
  std::vector<Value> message;
  if (st.op == Op::kSend)
    TH_CHECK(read(s, st.src, &message));
  else
    message = std::move(outgoing_[s]);
  state_[s] |= kSendDone;
  TH_CHECK(receive(k, message));
  TH_CHECK(complete(s));
  if (nextSend_[s] >= 0) poke(static_cast<size_t>(nextSend_[s]));
  const Step& rt = p_.ranks[rankOf_[k]].steps[k - match_.offset[rankOf_[k]]];
  if (opSends(rt.op))
    poke(k);
  else
    TH_CHECK(complete(k));
  if (nextRecv_[k] >= 0) poke(static_cast<size_t>(nextRecv_[k]));
  return Status::ok();
}

Status Simulator::startStep(size_t g) {
  state_[g] |= kStarted;
  const Step& s = p_.ranks[rankOf_[g]].steps[g - match_.offset[rankOf_[g]]];
  if (opReceives(s.op) || opSends(s.op)) return Status::ok();
  TH_CHECK(runLocal(g));
  return complete(g);
}

Status Simulator::advance(size_t g) {
  if (state_[g] & kComplete) return Status::ok();
  if (!(state_[g] & kStarted)) {
    if (pending_[g] != 0) return Status::ok();
    TH_CHECK(startStep(g));
    if (state_[g] & kComplete) return Status::ok();
  }
  const Step& s = p_.ranks[rankOf_[g]].steps[g - match_.offset[rankOf_[g]]];
  if (opReceives(s.op) && !(state_[g] & kRecvDone)) TH_CHECK(tryTransfer(static_cast<size_t>(match_.senderOf[g])));
  if (opSends(s.op) && !(state_[g] & kSendDone)) TH_CHECK(tryTransfer(g));
  return Status::ok();
}

Status Simulator::run() {
  const size_t total = state_.size();
  for (size_t g = total; g-- > 0;)
    if (pending_[g] == 0) poke(g);
  while (!work_.empty()) {
    size_t g = work_.back();
    work_.pop_back();
    TH_CHECK(advance(g));
  }
  for (size_t g = 0; g < total; ++g)
    if (!(state_[g] & kComplete)) return deadlockReport();
  return Status::ok();
}

size_t Simulator::blocker(size_t g, std::string* why) const {
  int r = rankOf_[g];
  uint32_t idx = static_cast<uint32_t>(g - match_.offset[r]);
  const StepPlan& sp = plans_[r].steps[idx];
  const Step& s = p_.ranks[r].steps[idx];
  if (!(state_[g] & kStarted)) {
    for (uint32_t j : sp.waitFor) {
      if (!(state_[match_.gid(r, j)] & kComplete)) {
        *why = "waits for step " + std::to_string(j) + " to complete";
        return match_.gid(r, j);
      }
    }
  }
  if (opReceives(s.op) && !(state_[g] & kRecvDone)) {
    if (sp.recvAfter >= 0 && !(state_[match_.gid(r, sp.recvAfter)] & kRecvDone)) {
      *why = "receives after step " + std::to_string(sp.recvAfter) + " (same peer and channel)";
      return match_.gid(r, sp.recvAfter);
    }
    *why = "waits for its matching send";
    return static_cast<size_t>(match_.senderOf[g]);
  }
  if (sp.sendAfter >= 0 && !(state_[match_.gid(r, sp.sendAfter)] & kSendDone)) {
    *why = "sends after step " + std::to_string(sp.sendAfter) + " (same peer and channel)";
    return match_.gid(r, sp.sendAfter);
  }
  *why = "waits for its receiver to be ready";
  return static_cast<size_t>(match_.receiverOf[g]);
}

Status Simulator::deadlockReport() const {
  const size_t total = state_.size();
  size_t start = 0;
  while (state_[start] & kComplete) ++start;
  std::vector<int64_t> pos(total, -1);
  std::vector<std::pair<size_t, std::string>> path;
  size_t g = start;
  while (pos[g] < 0) {
    pos[g] = static_cast<int64_t>(path.size());
    std::string why;
    size_t next = blocker(g, &why);
    path.emplace_back(g, why);
    g = next;
  }
  auto label = [&](size_t x) {
    int r = rankOf_[x];
    return stepLabel(p_, r, static_cast<uint32_t>(x - match_.offset[r]));
  };
  constexpr size_t kShownHops = 12;
  std::string text = "deadlock under rendezvous: wait-for cycle ";
  size_t first = static_cast<size_t>(pos[g]), hops = path.size() - first;
  for (size_t i = first; i < path.size() && i < first + kShownHops; ++i)
    text += label(path[i].first) + " [" + path[i].second + "] -> ";
  if (hops > kShownHops) text += "... (" + std::to_string(hops) + " steps in the cycle) -> ";
  text += "back to " + label(g) + "; blocked:";
  constexpr int kShownRanks = 8;
  int ranksShown = 0;
  for (int r = 0; r < p_.nranks && ranksShown < kShownRanks; ++r) {
    std::vector<uint32_t> blocked;
    for (uint32_t k = 0; k < plans_[r].steps.size(); ++k)
      if (!(state_[match_.gid(r, k)] & kComplete)) blocked.push_back(k);
    if (blocked.empty()) continue;
    text += (ranksShown++ ? "; rank " : " rank ") + std::to_string(r) + " steps ";
    for (size_t i = 0; i < blocked.size() && i < 4; ++i) text += (i ? "," : "") + std::to_string(blocked[i]);
    if (blocked.size() > 4) text += ",... (" + std::to_string(blocked.size()) + " blocked)";
  }
  return invalidArgument("%s", text.c_str());
}

}  // namespace theseus::schedule::verify
