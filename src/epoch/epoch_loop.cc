// The epoch thread of one communicator on one rank (see epoch_service.h):
// prepare jobs, attribute shipping, and on the leader the lease/swap state
// machine and the policy loop. Sends happen here, never on the bootstrap's
// control thread, and never while a lock is held.
#include <algorithm>
#include <chrono>

#include "common/log.h"
#include "epoch/epoch_service_internal.h"
#include "epoch/test_tables.h"
#include "transport/transport_manager.h"

namespace theseus::epoch {
namespace {

using Shared = EpochService::Shared;

void sendAll(Shared& s, Outbox& out) {
  for (auto& [dest, msg] : out.messages) {
    std::string bytes = msg.encode();
    TH_TRACE(log::kEpoch, "epoch leader: %s -> %s", msg.describe().c_str(),
             dest == Outbox::kAll ? "all" : std::to_string(dest).c_str());
    for (int r = dest == Outbox::kAll ? 0 : dest; r < (dest == Outbox::kAll ? s.nranks : dest + 1); ++r) {
      Status st = s.boot->sendToRank(r, bootstrap::MsgType::kEpoch, bytes);
      if (!st.isOk())
        TH_INFO(log::kEpoch, "epoch leader: %s to rank %d not sent: %s", msgKindName(msg.kind), r,
                st.message().c_str());
    }
  }
  out.messages.clear();
}

void sendAck(Shared& s, uint64_t version, const Status& result) {
  EpochMsg ack;
  ack.kind = MsgKind::kAck;
  ack.version = version;
  ack.ok = result.isOk();
  ack.text = result.message();
  Status st = s.boot->sendToLeader(bootstrap::MsgType::kEpoch, ack.encode());
  if (!st.isOk())
    TH_INFO(log::kEpoch, "epoch rank %d: ACK of table v%llu not sent: %s", s.rank,
            static_cast<unsigned long long>(version), st.message().c_str());
}

// PREPARE: the engine builds what the new table needs; then ACK (or a negative ACK with the reason).
void runPrepare(Shared& s) {
  std::shared_ptr<Epoch> job = s.clock->takePrepareJob();
  if (job == nullptr) return;
  uint64_t start = nowNs();
  job->logBody = std::make_shared<const std::string>(DecisionLog::formatBody(job->version, job->reason, job->table));
  Status st = s.participant != nullptr ? s.participant->prepareEpoch(*job) : Status::ok();
  if (!st.isOk())
    TH_WARN("epoch rank %d: cannot prepare decision table v%llu: %s", s.rank,
            static_cast<unsigned long long>(job->version), st.message().c_str());
  TH_INFO(log::kEpoch, "epoch rank %d: table v%llu prepared in %.2f ms", s.rank,
          static_cast<unsigned long long>(job->version), double(nowNs() - start) / 1e6);
  if (s.clock->finishPrepare(job->version, st)) sendAck(s, job->version, st);
}

// THESEUS_TRACE: every value of the rank's attributes that changed since the last look, as a
// counter event at the time it was written.
void traceAttributes(Shared& s) {
  if (s.trace == nullptr || s.store->generation() == s.tracedGeneration) return;
  s.tracedGeneration = s.store->generation();
  for (const auto& [name, a] : s.store->list()) {
    auto [it, added] = s.tracedValues.try_emplace(name, a.value);
    if (!added && it->second == a.value) continue;
    it->second = a.value;
    s.trace->attribute(a.timestampNs, name, a.value);
  }
}

// Every rank: probes -> attribute store -> snapshot to the leader when something changed.
void shipAttributes(Shared& s) {
  if (s.transports != nullptr && !s.setUpAttributesPublished) {
    s.setUpAttributesPublished = true;
    for (const auto& [name, value] : s.transports->setUpAttributes()) {
      Status st = s.store->set(name, value, attrs::Source::kProbe);
      if (!st.isOk()) TH_INFO(log::kAttrs, "rank %d: attribute %s: %s", s.rank, name.c_str(), st.message().c_str());
    }
  }
  if (s.transports != nullptr) {
    for (const auto& [name, value] : s.transports->liveAttributes()) {
      auto old = s.store->get(name);
      if (old && old->value == value) continue;  // a set would ship a snapshot
      Status st = s.store->set(name, value, attrs::Source::kProbe);
      if (!st.isOk()) TH_INFO(log::kAttrs, "rank %d: attribute %s: %s", s.rank, name.c_str(), st.message().c_str());
    }
    for (int p = 0; p < s.nranks; ++p) {
      if (p == s.rank) continue;
      transport::PeerStats st = s.transports->stats(p);
      TH_TRACE(log::kAttrs, "rank %d -> %d: %llu B sent, busy %.1f ms; %llu B received, waited %.1f ms", s.rank, p,
               static_cast<unsigned long long>(st.bytesSent), st.sendBusyNs / 1e6,
               static_cast<unsigned long long>(st.bytesReceived), st.recvWaitNs / 1e6);
      s.probes->observePeerStats(p, st);
    }
  }
  s.probes->publish(*s.store);
  s.hostProbes->poll(*s.store);
  auto polled = s.external->poll(*s.store);
  (void)polled;  // a malformed file is logged by ExternalAttributes and keeps the old values
  traceAttributes(s);
  uint64_t gen = s.store->generation();
  if (gen == s.shippedGeneration) return;
  attrs::Snapshot snap = s.store->snapshot();
  snap.rank = s.rank;
  Status st = s.boot->sendToLeader(bootstrap::MsgType::kAttributes, snap.serialize());
  if (st.isOk()) s.shippedGeneration = gen;
  else TH_INFO(log::kAttrs, "rank %d: attribute snapshot not shipped: %s", s.rank, st.message().c_str());
}

// What changed between two tables, grouped: "allreduce, allgather [32769, inf]:
// ring -> ring(order=0,2,1,3) (rule 3 'x')", allreduce first, a few groups at most;
// then the NIC choices that changed.
std::string describeChange(const policy::DecisionTable& from, const policy::DecisionTable& to) {
  using schedule::Collective;
  static constexpr Collective kOrder[] = {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                                          Collective::kBroadcast, Collective::kReduce,    Collective::kAlltoAll,
                                          Collective::kGather,    Collective::kScatter};
  struct Group {
    std::string what, colls;
  };
  std::vector<Group> groups;
  for (Collective c : kOrder) {
    for (const auto& r : to.ranges(c)) {
      const policy::Decision* old = from.lookup(c, r.minBytes);
      if (old != nullptr && *old == r.decision) continue;
      std::string what = "[" + std::to_string(r.minBytes) + ", " +
                         (r.maxBytes == UINT64_MAX ? std::string("inf") : std::to_string(r.maxBytes)) + "]: " +
                         (old ? old->toString() : std::string("default")) + " -> " + r.decision.toString();
      if (!r.decision.why.empty()) what += " (" + r.decision.why + ")";
      auto g = std::find_if(groups.begin(), groups.end(), [&](const Group& x) { return x.what == what; });
      if (g == groups.end()) groups.push_back({what, schedule::collectiveName(c)});
      else g->colls += std::string(", ") + schedule::collectiveName(c);
    }
  }
  std::string out;
  for (size_t i = 0; i < groups.size() && i < 4; ++i) out += (i ? "; " : "") + groups[i].colls + " " + groups[i].what;
  if (groups.size() > 4) out += "; and " + std::to_string(groups.size() - 4) + " more";
  // NIC choices: "rank 1 NIC: stay -> other_nic (nic rule 0 'degraded port')".
  auto nicChange = [&](int rank, policy::NicChoice::Move was, policy::NicChoice::Move now, const std::string& why) {
    if (was == now) return;
    out += (out.empty() ? "" : "; ") + std::string("rank ") + std::to_string(rank) + " NIC: " +
           policy::NicChoice::moveName(was) + " -> " + policy::NicChoice::moveName(now);
    if (!why.empty()) out += " (" + why + ")";
  };
  for (const policy::NicChoice& n : to.nicChoices()) nicChange(n.rank, from.nicMove(n.rank), n.move, n.why);
  for (const policy::NicChoice& n : from.nicChoices())
    if (to.nicMove(n.rank) == policy::NicChoice::kStay) nicChange(n.rank, n.move, policy::NicChoice::kStay, "");
  return out.empty() ? "no decision changed" : out;
}

void propose(Shared& s, policy::DecisionTable t, const std::string& reason, Outbox* out) {
  auto v = s.leader->propose(std::move(t), reason, nowNs(), out);
  if (v.isOk()) {
    s.lastProposalSeq = s.leader->horizon();
    TH_INFO(log::kEpoch | log::kPolicy, "epoch leader: proposing table v%llu for collective %llu: %s",
            static_cast<unsigned long long>(v.value()), static_cast<unsigned long long>(s.leader->horizon()),
            reason.c_str());
  }
}

void evaluatePolicy(Shared& s, Outbox* out) {
  if (s.leader->state() != EpochLeader::State::kLeasing || s.policy == nullptr) return;
  policy::PolicyInput in;
  in.view = &s.view;
  in.nowNs = nowNs();
  in.nranks = s.nranks;
  in.hostOf = s.hostOf;
  in.hostNames = s.hostNames;
  if (s.participant != nullptr) in.sizes = s.participant->recentSizes();
  in.current = &s.leader->committedTable();
  in.currentAgeNs = in.nowNs - s.committedAtNs;
  if (log::enabled(log::Level::kTrace, log::kPolicy))
    TH_TRACE(log::kPolicy, "epoch leader: evaluating policy '%s' over\n%s", s.policy->name().c_str(),
             s.view.describe(in.nowNs).c_str());
  auto t = policy::evaluate(*s.policy, in);
  if (!t.isOk()) {
    if (t.status().message() != s.lastPolicyError) {
      s.lastPolicyError = t.status().message();
      TH_WARN("epoch leader: policy '%s' failed: %s (the current table stays)", s.policy->name().c_str(),
              s.lastPolicyError.c_str());
    }
    return;
  }
  s.lastPolicyError.clear();
  if (t.value().sameDecisions(s.leader->committedTable())) return;
  std::string reason = "policy '" + s.policy->name() + "': " + describeChange(s.leader->committedTable(), t.value());
  TH_INFO(log::kPolicy, "epoch leader: policy '%s' wants a new table; the attributes it saw:\n%s",
          s.policy->name().c_str(), s.view.describe(in.nowNs).c_str());
  propose(s, t.take(), reason, out);
}

// Leader: the doctor's live verdict over the view, published as doctor.* attributes of this rank
// (doctor/live_doctor.h); they reach the view, and the policy, with this rank's next snapshot.
void evaluateDoctor(Shared& s) {
  if (!s.doctor->evaluate(s.view, nowNs())) return;
  s.doctor->publish(*s.store);
  TH_INFO(log::kPolicy | log::kAttrs, "epoch leader: doctor: %s", s.doctor->describe().c_str());
}

void testSwap(Shared& s, Outbox* out) {
  if (s.leader->state() != EpochLeader::State::kLeasing) return;
  if (s.leader->maxReported() < s.lastProposalSeq + s.testSwapEvery / 2) return;
  RandomTableLimits lim;
  lim.maxChannels = std::min(2, s.maxChannels);
  lim.maxSliceBytes = s.maxSliceBytes;
  uint64_t version = s.leader->committedVersion() + 1;
  policy::DecisionTable t = randomTable(s.testSeed, s.leader->horizon(), s.nranks, lim);
  propose(s, std::move(t), "test swap (THESEUS_EPOCH_TEST_SWAP_EVERY) after v" + std::to_string(version - 1), out);
}

void handleLeaderEvent(Shared& s, LoopEvent& e, Outbox* out) {
  const uint64_t now = nowNs();
  switch (e.kind) {
    case LoopEvent::Kind::kProgress:
      s.leader->onProgress(e.rank, e.msg.seq, now, out);
      break;
    case LoopEvent::Kind::kAck: {
      uint64_t before = s.leader->committedVersion();
      s.leader->onAck(e.rank, e.msg.version, e.msg.ok, e.msg.text, now, out);
      if (s.leader->committedVersion() != before) s.committedAtNs = now;
      break;
    }
    case LoopEvent::Kind::kAttributes: {
      auto snap = attrs::Snapshot::deserialize(e.payload);
      if (!snap.isOk()) {
        s.warnMalformed(e.rank, "attribute snapshot: " + snap.status().message());
      } else if (snap.value().rank != e.rank) {
        s.warnMalformed(e.rank, "attribute snapshot claims to come from rank " + std::to_string(snap.value().rank));
      } else {
        Status st = s.view.merge(snap.value(), now);
        if (!st.isOk()) s.warnMalformed(e.rank, st.message());
      }
      break;
    }
    case LoopEvent::Kind::kRankFailed:
      s.leader->onRankFailed(e.rank, out);
      s.view.forgetRank(e.rank);
      break;
  }
}

}  // namespace

void runEpochLoop(Shared& s) {
  using std::chrono::milliseconds;
  auto nextAttrs = Clock::now();
  auto nextPolicy = Clock::now() + milliseconds(s.policyIntervalMs);
  auto nextDoctor = Clock::now() + milliseconds(s.doctorIntervalMs);
  Outbox out;
  for (;;) {
    std::deque<LoopEvent> events;
    bool prepare = false, evaluate = false;
    uint64_t nack = 0;
    std::string nackWhy;
    {
      std::unique_lock<std::mutex> lock(s.mu);
      auto until = s.rank == 0 ? std::min(nextAttrs, nextPolicy) : nextAttrs;
      if (s.doctor) until = std::min(until, nextDoctor);
      if (s.rank == 0) until = std::min(until, Clock::now() + milliseconds(100));  // prepare timeouts
      s.cv.wait_until(lock, until, [&] {
        return s.stop || s.prepareWanted || s.evaluateWanted || !s.events.empty() || s.nackVersion != 0;
      });
      if (s.stop) return;
      events.swap(s.events);
      std::swap(prepare, s.prepareWanted);
      std::swap(evaluate, s.evaluateWanted);
      std::swap(nack, s.nackVersion);
      nackWhy.swap(s.nackWhy);
    }
    if (s.log != nullptr) s.log->flush();  // lines the application's thread queued (THESEUS_DECISION_LOG)
    if (nack != 0) sendAck(s, nack, invalidArgument("%s", nackWhy.c_str()));
    if (prepare) runPrepare(s);
    if (s.rank == 0) {
      for (LoopEvent& e : events) handleLeaderEvent(s, e, &out);
      if (s.testSwapEvery > 0) testSwap(s, &out);
      s.leader->tick(nowNs(), &out);
    }
    auto now = Clock::now();
    if (s.doctor && now >= nextDoctor) {
      evaluateDoctor(s);  // before shipping: the verdict travels with this round's snapshot
      nextDoctor = now + milliseconds(s.doctorIntervalMs);
    }
    if (now >= nextAttrs) {
      shipAttributes(s);
      nextAttrs = now + milliseconds(s.attrsIntervalMs);
    }
    if (s.rank == 0 && s.testSwapEvery == 0 && (evaluate || now >= nextPolicy)) {
      evaluatePolicy(s, &out);
      nextPolicy = now + milliseconds(s.policyIntervalMs);
    }
    if (!out.messages.empty()) sendAll(s, out);
  }
}

}  // namespace theseus::epoch
