// Internals of EpochService shared by epoch_service.cc (creation, handlers)
// and epoch_loop.cc (the epoch thread).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "attrs/cluster_view.h"
#include "attrs/external_attributes.h"
#include "attrs/host_probes.h"
#include "doctor/live_doctor.h"
#include "epoch/epoch_leader.h"
#include "epoch/epoch_service.h"
#include "policy/policy.h"

namespace theseus::epoch {

struct LoopEvent {
  enum class Kind { kProgress, kAck, kAttributes, kRankFailed } kind;
  int rank = -1;
  EpochMsg msg;          // kProgress, kAck
  std::string payload;   // kAttributes
};

struct EpochService::Shared {
  // Fixed at creation.
  int rank = 0;
  int nranks = 1;
  uint64_t commHash = 0;
  bootstrap::Bootstrap* boot = nullptr;
  transport::TransportManager* transports = nullptr;
  const AbortFlag* abort = nullptr;
  Participant* participant = nullptr;
  std::vector<int> hostOf;
  std::vector<std::string> hostNames;
  EpochClock* clock = nullptr;
  DecisionLog* log = nullptr;
  attrs::AttributeStore* store = nullptr;
  attrs::ProbeSet* probes = nullptr;
  int64_t attrsIntervalMs = 100;
  int64_t policyIntervalMs = 100;
  uint64_t testSwapEvery = 0;
  uint64_t testSeed = 1;
  int maxChannels = 1;
  uint64_t maxSliceBytes = 0;
  telemetry::TraceWriter* trace = nullptr;  // THESEUS_TRACE: attribute changes go there (null: off)
  int64_t doctorIntervalMs = 0;             // leader: live verdicts (0: off)

  // Handlers pass this gate; stop() closes it, after which no handler touches the service.
  std::mutex gateMu;
  bool closed = false;
  int warnings = 0;      // malformed messages logged so far (rate limit)

  // Wakes the epoch thread.
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  bool prepareWanted = false;
  bool evaluateWanted = false;
  std::deque<LoopEvent> events;
  uint64_t nackVersion = 0;  // a PREPARE whose table did not decode: answer with a negative ACK
  std::string nackWhy;

  // Epoch thread only.
  std::unique_ptr<attrs::HostProbes> hostProbes;
  std::unique_ptr<attrs::ExternalAttributes> external;
  uint64_t shippedGeneration = UINT64_MAX;
  uint64_t tracedGeneration = 0;               // the store's generation the trace has seen
  std::map<std::string, double> tracedValues;  // ... and the values it has
  bool setUpAttributesPublished = false;  // TransportManager::setUpAttributes, once
  // Leader only (epoch thread).
  std::unique_ptr<EpochLeader> leader;
  std::unique_ptr<policy::Policy> policy;
  attrs::ClusterView view;
  uint64_t committedAtNs = 0;
  uint64_t lastProposalSeq = 0;
  std::string lastPolicyError;
  std::unique_ptr<doctor::LiveDoctor> doctor;  // THESEUS_DOCTOR_INTERVAL_MS

  void post(LoopEvent e);
  void wakeThread(bool prepare, bool evaluate);
  void warnMalformed(int from, const std::string& why);
};

// Handlers (epoch_service.cc).
void handleEpochMessage(const std::shared_ptr<EpochService::Shared>& s, int from, std::string_view payload);

// The epoch thread's body (epoch_loop.cc).
void runEpochLoop(EpochService::Shared& s);

// Knob accessors (epoch_service.cc).
int64_t attrsIntervalMs();
int64_t policyIntervalMs();

}  // namespace theseus::epoch
