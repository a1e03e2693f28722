#include "epoch/epoch_service.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "common/knobs.h"
#include "common/log.h"
#include "epoch/epoch_service_internal.h"
#include "policy/tuned_policy.h"
#include "telemetry/trace_writer.h"
#include "transport/transport_config.h"

namespace theseus::epoch {
namespace {

const BoolKnob kEpoch("THESEUS_EPOCH", true,
                      "Adaptive schedules: leases, telemetry, attribute shipping, the leader's policy loop and "
                      "epoch-consistent hot-swap. 0: the initial decision table stays in effect forever (must be "
                      "equal on all ranks)");
const IntKnob kLeaseMs("THESEUS_EPOCH_LEASE_MS", 50,
                       "Epoch leases last about this long at the measured collective rate (longer: fewer control "
                       "messages; shorter: faster swaps)");
const IntKnob kLeaseMin("THESEUS_EPOCH_LEASE_MIN", 2, "Shortest epoch lease, in collectives");
const IntKnob kLongCollectiveMs("THESEUS_EPOCH_LONG_COLLECTIVE_MS", 200,
                                "When collectives start at least this far apart (long ones), the lease is one "
                                "collective, so a swap decided while one runs takes effect at the next (one control "
                                "round trip per collective; THESEUS_EPOCH_LEASE_MIN does not apply); 0: off");
const IntKnob kLeaseMax("THESEUS_EPOCH_LEASE_MAX", 65536,
                        "Longest epoch lease, in collectives: a swap takes effect at most 1.5x this many collectives "
                        "after the leader decides");
const IntKnob kWaitTimeoutMs("THESEUS_EPOCH_WAIT_TIMEOUT_MS", 600000,
                             "A collective waiting this long for the leader's lease or commit fails with an error");
const IntKnob kPrepareTimeoutMs("THESEUS_EPOCH_PREPARE_TIMEOUT_MS", 30000,
                                "The leader cancels a swap when some rank has not prepared it within this time");
const IntKnob kTestSwapEvery("THESEUS_EPOCH_TEST_SWAP_EVERY", 0,
                             "Testing: the leader swaps to a random decision table every N collectives (0: off; the "
                             "policy is then not consulted)");
const IntKnob kTestSeed("THESEUS_EPOCH_TEST_SEED", 1, "Testing: seed of the random tables of THESEUS_EPOCH_TEST_SWAP_EVERY");
const IntKnob kPolicyIntervalMs("THESEUS_POLICY_INTERVAL_MS", 100,
                                "How often the leader evaluates the policy over the merged attributes");
const IntKnob kAttrsIntervalMs("THESEUS_ATTRS_INTERVAL_MS", 100,
                               "How often every rank refreshes its probes and ships changed attributes to the leader");

constexpr int kMaxWarnings = 20;

// Host index per rank (first appearance order) and a label per host.
void hostsOf(const bootstrap::Bootstrap& b, std::vector<std::string>* names) {
  std::map<uint64_t, int> seen;
  for (const auto& p : b.peers())
    if (seen.emplace(p.hostHash, static_cast<int>(seen.size())).second) names->push_back(attrs::hostLabel(p.hostname));
}

// Settings every rank must share, because both ends of a connection or every rank of a
// collective derive the same sizes from them; checked at creation like THESEUS_EPOCH, so a
// difference is an error naming the variable instead of a "mismatched collective" later.
// THESEUS_DEVICE_EXECUTOR is checked before the transports exist, from the bootstrap's peer table
// (comm/lifecycle.cc), since it decides whether they set up device FIFOs.
const char* const kMustAgree[] = {"THESEUS_SLICE_BYTES",  "THESEUS_SHM_SLOTS",         "THESEUS_SHM_SLOT_BYTES",
                                  "THESEUS_SOCKET_SLOTS", "THESEUS_SOCKET_SLOT_BYTES", "NCCL_BUFFSIZE",
                                  "THESEUS_MAX_CHANNELS", "THESEUS_LINK_PROBE_MS"};

nlohmann::json sharedSettings() {
  nlohmann::json s = nlohmann::json::object();
  for (const char* name : kMustAgree)
    if (const KnobInfo* k = findKnob(name)) s[name] = knobEffectiveText(*k);
  // Set or not (the directory may differ per host): tracing adds collective clock rounds.
  s["THESEUS_TRACE (set)"] = telemetry::TraceWriter::enabled() ? "yes" : "no";
  return s;
}

Status checkSharedSettings(const nlohmann::json& mine, const nlohmann::json& theirs, int me, size_t r) {
  for (const auto& [name, value] : mine.items()) {
    auto it = theirs.find(name);
    if (it == theirs.end() || *it == value) continue;
    auto text = [](const nlohmann::json& v) {
      std::string s = v.get<std::string>();
      return s.empty() ? std::string("(unset)") : s;
    };
    return invalidUsage("%s differs between ranks (rank %d: %s, rank %zu: %s); it must be equal on all ranks",
                        name.c_str(), me, text(value).c_str(), r, text(*it).c_str());
  }
  return Status::ok();
}

struct Handshake {
  bool ok = false;
  std::string error;
  uint64_t horizon = 0, reportAt = 0;
  std::string table, reason;
  bool probes = false;  // the leader's policy uses link measurements: probe the links
};

// The leader's part of the creation handshake: the initial table and lease.
std::string leaderContribution(uint64_t commId, int nranks, const std::vector<int>& hostOf,
                               const std::vector<std::string>& hosts, std::unique_ptr<policy::Policy>* policyOut) {
  nlohmann::json j = {{"epoch", 1}, {"mode", kEpoch.get() ? "on" : "off"}, {"settings", sharedSettings()}};
  std::string spec = policy::configuredSpec();
  auto loaded = policy::load(spec);
  if (!loaded.isOk()) {
    j["ok"] = false;
    j["error"] = "THESEUS_POLICY=" + spec + ": " + loaded.status().message();
    return j.dump();
  }
  // An NCCL tuner plugin (NCCL_TUNER_PLUGIN) runs here, on the leader, as an input of the policy.
  policy::TunerContext tunerContext{commId, nranks, hostOf};
  std::unique_ptr<policy::Policy> chosen = policy::attachConfiguredTuner(loaded.take(), spec == "static", tunerContext);
  attrs::ClusterView empty;
  policy::PolicyInput in;
  in.view = &empty;
  in.nowNs = nowNs();
  in.nranks = nranks;
  in.hostOf = hostOf;
  in.hostNames = hosts;
  auto table = policy::evaluate(*chosen, in);
  if (!table.isOk()) {
    j["ok"] = false;
    j["error"] = "THESEUS_POLICY=" + spec + ": " + table.status().message();
    return j.dump();
  }
  policy::DecisionTable t = table.take();
  t.setVersion(1);
  // The first lease is short, so a policy that reacts in the first collectives
  // (a link slow from the first byte) is not held back by it.
  uint64_t lease = static_cast<uint64_t>(std::max<int64_t>(kLeaseMin.get(), 2)) * 2;
  if (kTestSwapEvery.get() > 0) lease = static_cast<uint64_t>(std::max<int64_t>(kTestSwapEvery.get() / 2, 2));
  j["ok"] = true;
  j["horizon"] = lease;
  j["reportAt"] = lease / 2;
  j["table"] = t.serialize();
  j["reason"] = "initial table of policy '" + chosen->name() + "'";
  j["probes"] = chosen->usesLinkMeasurements();
  *policyOut = std::move(chosen);
  return j.dump();
}

Result<Handshake> agree(bootstrap::Bootstrap& boot, const std::string& mine) {
  std::vector<std::string> all;
  TH_CHECK(boot.allGather(mine, &all).withContext("agreeing on the initial decision table"));
  Handshake h;
  try {
    const bool on = kEpoch.get();
    const nlohmann::json settings = sharedSettings();
    for (size_t r = 0; r < all.size(); ++r) {
      auto j = nlohmann::json::parse(all[r]);
      if (j.value("epoch", 0) != 1) return invalidUsage("rank %zu speaks another epoch handshake version", r);
      if ((j.value("mode", "") == "on") != on)
        return invalidUsage("THESEUS_EPOCH differs between ranks (rank %d: %s, rank %zu: %s); it must be equal on "
                            "all ranks", boot.rank(), on ? "on" : "off", r, on ? "off" : "on");
      if (j.contains("settings")) TH_CHECK(checkSharedSettings(settings, j["settings"], boot.rank(), r));
    }
    auto j = nlohmann::json::parse(all[0]);
    h.ok = j.at("ok").get<bool>();
    if (!h.ok) {
      h.error = j.at("error").get<std::string>();
      return h;
    }
    h.horizon = j.at("horizon").get<uint64_t>();
    h.reportAt = j.at("reportAt").get<uint64_t>();
    h.table = j.at("table").get<std::string>();
    h.reason = j.at("reason").get<std::string>();
    h.probes = j.value("probes", false);
  } catch (const std::exception& e) {
    return invalidUsage("malformed epoch handshake: %s", e.what());
  }
  return h;
}

}  // namespace

int64_t attrsIntervalMs() { return std::max<int64_t>(kAttrsIntervalMs.get(), 1); }
int64_t policyIntervalMs() { return std::max<int64_t>(kPolicyIntervalMs.get(), 1); }

// ---- Shared ---------------------------------------------------------------------------------

void EpochService::Shared::post(LoopEvent e) {
  {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back(std::move(e));
  }
  cv.notify_one();
}

void EpochService::Shared::wakeThread(bool prepare, bool evaluate) {
  {
    std::lock_guard<std::mutex> lock(mu);
    prepareWanted = prepareWanted || prepare;
    evaluateWanted = evaluateWanted || evaluate;
  }
  cv.notify_one();
}

void EpochService::Shared::warnMalformed(int from, const std::string& why) {
  if (warnings++ < kMaxWarnings)
    TH_WARN("epoch (rank %d): dropping a message from rank %d: %s", rank, from, why.c_str());
}

// ---- handlers (bootstrap control thread; never block) -------------------------------------------

void handleEpochMessage(const std::shared_ptr<EpochService::Shared>& s, int from, std::string_view payload) {
  std::lock_guard<std::mutex> gate(s->gateMu);
  if (s->closed) return;
  auto decoded = EpochMsg::decode(payload);
  if (!decoded.isOk()) return s->warnMalformed(from, decoded.status().message());
  EpochMsg& m = decoded.value();
  TH_TRACE(log::kEpoch, "epoch rank %d: %s from rank %d", s->rank, m.describe().c_str(), from);
  if (!isLeaderToRank(m.kind)) {
    if (s->rank != 0) return s->warnMalformed(from, std::string(msgKindName(m.kind)) + " is for the leader");
    LoopEvent e{m.kind == MsgKind::kAck ? LoopEvent::Kind::kAck : LoopEvent::Kind::kProgress, from, std::move(m), {}};
    return s->post(std::move(e));
  }
  if (from != 0) return s->warnMalformed(from, std::string(msgKindName(m.kind)) + " from a rank other than the leader");
  switch (m.kind) {
    case MsgKind::kGrant: s->clock->onGrant(m.horizon, m.reportAt); return;
    case MsgKind::kCommit: s->clock->onCommit(m.version, m.effectiveSeq, m.horizon, m.reportAt); return;
    case MsgKind::kCancel: s->clock->onCancel(m.version, m.text); return;
    case MsgKind::kPrepare: {
      auto table = policy::DecisionTable::deserialize(m.text);
      if (!table.isOk()) {
        s->warnMalformed(from, "PREPARE v" + std::to_string(m.version) + ": " + table.status().message());
        {
          std::lock_guard<std::mutex> lock(s->mu);
          s->nackVersion = m.version;
          s->nackWhy = table.status().message();
        }
        s->wakeThread(false, false);
        return;
      }
      auto e = std::make_shared<Epoch>();
      e->version = m.version;
      e->table = table.take();
      e->table.setVersion(m.version);
      e->reason = m.reason;
      s->clock->onPrepare(std::move(e), m.horizon);
      return;
    }
    default: return;
  }
}

// ---- creation ------------------------------------------------------------------------------------

Result<std::unique_ptr<EpochService>> EpochService::create(const ServiceOptions& o) {
  if (o.bootstrap == nullptr) return internalError("epoch service without a bootstrap");
  bootstrap::Bootstrap& boot = *o.bootstrap;
  std::vector<std::string> hosts;
  hostsOf(boot, &hosts);
  std::unique_ptr<policy::Policy> policy;
  std::string mine = boot.rank() == 0 ? leaderContribution(boot.commHash(), boot.nranks(), o.hostOf, hosts, &policy)
                                      : nlohmann::json({{"epoch", 1},
                                                        {"mode", kEpoch.get() ? "on" : "off"},
                                                        {"settings", sharedSettings()}})
                                            .dump();
  Handshake h;
  TH_ASSIGN(h, agree(boot, mine));
  if (!h.ok) return invalidArgument("%s", h.error.c_str());
  auto table = policy::DecisionTable::deserialize(h.table);
  if (!table.isOk()) return table.status().withContext("the leader's initial decision table");

  std::unique_ptr<EpochService> svc(new EpochService());
  svc->enabled_ = kEpoch.get();
  svc->log_ = std::make_unique<DecisionLog>(boot.commHash(), boot.rank());
  auto initial = std::make_shared<Epoch>();
  initial->version = 1;
  initial->fromSeq = 0;
  initial->table = table.take();
  initial->table.setVersion(1);
  initial->reason = h.reason;
  initial->logBody = std::make_shared<const std::string>(DecisionLog::formatBody(1, h.reason, initial->table));
  svc->log_->record(0, initial->logBody);

  auto shared = std::make_shared<Shared>();
  shared->hostNames = std::move(hosts);
  shared->policy = std::move(policy);
  svc->shared_ = shared;
  EpochClock::Hooks hooks;
  DecisionLog* log = svc->log_.get();
  hooks.installed = [log](const Epoch& e) { log->record(e.fromSeq, e.logBody); };
  if (!svc->enabled_) {
    svc->clock_ = std::make_unique<EpochClock>(initial, EpochClock::kForever, EpochClock::kForever, o.abort, 0, hooks);
    return svc;
  }
  hooks.report = [b = o.bootstrap](uint64_t seq) {
    EpochMsg m;
    m.kind = MsgKind::kProgress;
    m.seq = seq;
    return b->sendToLeader(bootstrap::MsgType::kEpoch, m.encode());
  };
  std::weak_ptr<Shared> weak = shared;
  hooks.health = o.health;
  hooks.prepareQueued = [weak] {
    if (auto s = weak.lock()) s->wakeThread(true, false);
  };
  svc->clock_ = std::make_unique<EpochClock>(initial, h.horizon, h.reportAt, o.abort, kWaitTimeoutMs.get(), hooks);
  svc->clock_->setCommTimeout(o.timeoutMs);
  TH_CHECK(svc->start(o, h.table, h.probes));
  return svc;
}

Status EpochService::start(const ServiceOptions& o, const std::string& initialTable, bool probeLinks) {
  bootstrap::Bootstrap& boot = *o.bootstrap;
  Shared& s = *shared_;
  s.rank = boot.rank();
  s.nranks = boot.nranks();
  s.commHash = boot.commHash();
  s.boot = o.bootstrap;
  s.transports = o.transports;
  s.abort = o.abort;
  s.participant = o.participant;
  s.hostOf = o.hostOf;
  s.maxChannels = std::max(1, o.maxChannels);
  s.clock = clock_.get();
  s.log = log_.get();
  s.trace = o.trace;
  if (o.attributes == nullptr) return internalError("epoch service without an attribute store");
  store_ = o.attributes;
  store_->setRank(s.rank);
  probes_ = std::make_unique<attrs::ProbeSet>(s.rank, s.nranks);
  telemetry_ = std::make_unique<telemetry::Recorder>(s.rank, s.nranks, o.transports, probes_.get());
  s.store = store_;
  s.probes = probes_.get();
  s.attrsIntervalMs = attrsIntervalMs();
  s.policyIntervalMs = policyIntervalMs();
  s.testSwapEvery = static_cast<uint64_t>(std::max<int64_t>(kTestSwapEvery.get(), 0));
  s.testSeed = static_cast<uint64_t>(kTestSeed.get());
  const auto& me = boot.peers()[s.rank];
  s.hostProbes = std::make_unique<attrs::HostProbes>(s.rank, o.cudaDev, me.hostname);
  s.external = std::make_unique<attrs::ExternalAttributes>(attrs::ExternalAttributes::configuredPath());
  auto tc = transport::readTransportConfig();
  size_t slot = tc.isOk() ? std::min(tc.value().shmSlotBytes, tc.value().socketSlotBytes) : (128u << 10);
  s.maxSliceBytes = slot;
  if (s.rank == 0) {
    LeaderConfig lc;
    lc.nranks = s.nranks;
    lc.leaseMin = static_cast<uint64_t>(std::max<int64_t>(kLeaseMin.get(), 2));
    lc.leaseMax = static_cast<uint64_t>(std::max<int64_t>(kLeaseMax.get(), 2));
    if (s.testSwapEvery > 0) lc.leaseMax = std::max<uint64_t>(s.testSwapEvery / 2, 2);
    lc.leaseTargetNs = static_cast<uint64_t>(std::max<int64_t>(kLeaseMs.get(), 1)) * 1'000'000;
    lc.longCollectiveNs = static_cast<uint64_t>(std::max<int64_t>(kLongCollectiveMs.get(), 0)) * 1'000'000;
    lc.prepareTimeoutNs = static_cast<uint64_t>(std::max<int64_t>(kPrepareTimeoutMs.get(), 1)) * 1'000'000;
    uint64_t h = clock_->horizon();
    s.leader = std::make_unique<EpochLeader>(lc, 1, h, h / 2, nowNs());
    auto t = policy::DecisionTable::deserialize(initialTable);
    if (t.isOk()) s.leader->setCommitted(t.value());
    s.committedAtNs = nowNs();
    s.doctorIntervalMs = doctor::LiveDoctor::configuredIntervalMs();
    if (s.doctorIntervalMs > 0) s.doctor = std::make_unique<doctor::LiveDoctor>(
        doctor::Placement{s.nranks, s.hostOf, s.hostNames});
  }
  std::weak_ptr<Shared> weak = shared_;
  boot.setHandler(bootstrap::MsgType::kEpoch, [weak](int from, std::string_view payload) {
    if (auto sp = weak.lock()) handleEpochMessage(sp, from, payload);
  });
  if (s.rank == 0) {
    boot.setHandler(bootstrap::MsgType::kAttributes, [weak](int from, std::string_view payload) {
      auto sp = weak.lock();
      if (!sp) return;
      std::lock_guard<std::mutex> gate(sp->gateMu);
      if (!sp->closed) sp->post(LoopEvent{LoopEvent::Kind::kAttributes, from, {}, std::string(payload)});
    });
  }
  boot.setPeerFailureCallback([weak](int rank, const Status&) {
    auto sp = weak.lock();
    if (!sp) return;
    std::lock_guard<std::mutex> gate(sp->gateMu);
    if (sp->closed) return;
    sp->clock->wake();
    sp->post(LoopEvent{LoopEvent::Kind::kRankFailed, rank, {}, {}});
  });
  try {
    thread_ = std::thread([sp = shared_] { runEpochLoop(*sp); });
  } catch (const std::system_error& e) {
    return systemError("cannot start the epoch thread: %s", e.what());
  }
  LinkProber::Options po;
  po.rank = s.rank;
  po.nranks = s.nranks;
  po.hostOf = s.hostOf;
  po.boot = o.bootstrap;
  po.abort = o.abort;
  po.probes = probes_.get();
  po.intervalNs = LinkProber::configuredIntervalNs();
  if (probeLinks && LinkProber::worthProbing(po)) {
    prober_ = std::make_unique<LinkProber>(po);
    TH_CHECK(prober_->start());
  }
  return Status::ok();
}

void EpochService::stop() {
  if (!shared_) return;
  {
    std::lock_guard<std::mutex> gate(shared_->gateMu);
    shared_->closed = true;
  }
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->stop = true;
  }
  shared_->cv.notify_all();
  if (thread_.joinable()) thread_.join();
  prober_.reset();  // joins its threads
  if (enabled_ && shared_->boot != nullptr) {
    shared_->boot->setHandler(bootstrap::MsgType::kEpoch, nullptr);
    if (shared_->rank == 0) shared_->boot->setHandler(bootstrap::MsgType::kAttributes, nullptr);
    shared_->boot->setPeerFailureCallback(nullptr);
  }
  if (clock_) clock_->wake();
}

EpochService::~EpochService() { stop(); }

void EpochService::requestEvaluation() {
  if (shared_ && enabled_) shared_->wakeThread(false, true);
}

}  // namespace theseus::epoch
