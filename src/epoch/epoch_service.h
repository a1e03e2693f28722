// EpochService: the control plane of one communicator on one rank.
//
// It owns the rank's EpochClock, decision log, probes and telemetry (the
// attribute store is the communicator's: Communicator::attributes()), and
// one thread (the "epoch thread") that
//   * on every rank: prepares tables the leader announced (PREPARE -> the
//     engine builds programs and rank templates and opens the connections the
//     new schedules use -> ACK), and every THESEUS_ATTRS_INTERVAL_MS folds the
//     transport counters into the probes, polls host probes and the
//     THESEUS_ATTRS_FILE, and ships the attribute snapshot to the leader when
//     it changed;
//   * on the leader (rank 0): runs the EpochLeader state machine on the
//     PROGRESS/ACK messages, merges snapshots into the ClusterView, and every
//     THESEUS_POLICY_INTERVAL_MS evaluates the policy (THESEUS_POLICY) and
//     proposes a swap when its table differs from the one in effect — or, with
//     THESEUS_EPOCH_TEST_SWAP_EVERY=N, a random table every N collectives.
// Message handlers run on the bootstrap's control thread and never block: they
// decode, validate and hand over (clock updates, queued events). A message
// that does not decode is logged as a WARN and dropped; one that violates the
// protocol fails the clock, so collectives return an error instead of risking
// different schedules on different ranks.
//
// Creation is collective (every rank, in communicator creation order): an
// out-of-band allGather agrees on the mode (THESEUS_EPOCH must be equal on all
// ranks) and carries the leader's initial table (version 1, from collective 0)
// and first lease — or the leader's error (a policy that does not load), which
// then fails creation on every rank with the same message.
//
// With THESEUS_EPOCH=0 the initial table stays in effect forever: no thread,
// no handlers, no telemetry, no lease (the clock's horizon is infinite).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "attrs/attribute_store.h"
#include "attrs/probes.h"
#include "bootstrap/bootstrap.h"
#include "epoch/decision_log.h"
#include "epoch/epoch_clock.h"
#include "epoch/link_prober.h"
#include "telemetry/telemetry.h"
#include "telemetry/trace_writer.h"

namespace theseus::transport {
class TransportManager;
}

namespace theseus::epoch {

// What the collective engine does for the control plane.
class Participant {
 public:
  virtual ~Participant() = default;
  // Epoch thread: get ready to run `e` (programs, templates, connections).
  virtual Status prepareEpoch(Epoch& e) = 0;
  // Leader's epoch thread: message sizes recently used (policy input; may be empty).
  virtual std::vector<uint64_t> recentSizes() = 0;
};

struct ServiceOptions {
  bootstrap::Bootstrap* bootstrap = nullptr;
  transport::TransportManager* transports = nullptr;  // may be null (no probes of links)
  attrs::AttributeStore* attributes = nullptr;        // this rank's attributes (required when enabled)
  const AbortFlag* abort = nullptr;
  int cudaDev = -1;
  int maxChannels = 1;                 // THESEUS_MAX_CHANNELS (random test tables stay within it)
  std::vector<int> hostOf;             // host index per rank
  Participant* participant = nullptr;
  // Health of the communicator (async error, failed ranks), polled while waiting at the horizon.
  std::function<Status()> health;
  // The communicator's timeout (comm/timeouts.h), which also bounds waits at the horizon.
  const std::atomic<int64_t>* timeoutMs = nullptr;
  // THESEUS_TRACE: the rank's trace, which gets every change of its attributes (null: off).
  telemetry::TraceWriter* trace = nullptr;
};

class EpochService {
 public:
  // Collective: see above.
  static Result<std::unique_ptr<EpochService>> create(const ServiceOptions& options);
  ~EpochService();

  EpochClock& clock() { return *clock_; }
  DecisionLog& decisionLog() { return *log_; }
  attrs::AttributeStore* attributes() { return store_; }
  // Null when the machinery is off.
  telemetry::Recorder* telemetry() { return telemetry_.get(); }
  bool enabled() const { return enabled_; }

  // Stops the thread and detaches the handlers (idempotent). After it, the
  // clock still answers but nothing changes it any more.
  void stop();

  // Test hook: the leader evaluates the policy at once (no-op elsewhere).
  void requestEvaluation();

  struct Shared;  // state shared with message handlers (epoch_service.cc)

 private:
  EpochService() = default;
  Status start(const ServiceOptions& options, const std::string& initial, bool probeLinks);
  void run();

  bool enabled_ = false;
  std::unique_ptr<DecisionLog> log_;
  attrs::AttributeStore* store_ = nullptr;
  std::unique_ptr<attrs::ProbeSet> probes_;
  std::unique_ptr<telemetry::Recorder> telemetry_;
  std::unique_ptr<LinkProber> prober_;  // links between hosts, when there are any
  std::unique_ptr<EpochClock> clock_;
  std::shared_ptr<Shared> shared_;
  std::thread thread_;
};

}  // namespace theseus::epoch
