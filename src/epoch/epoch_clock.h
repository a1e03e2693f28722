// EpochClock: the rank side of the horizon-lease protocol (docs/epochs.md).
//
// Every communicator numbers its collectives 0, 1, 2, ... (the same numbers on
// every rank). An *epoch* is a decision table together with the first
// collective it applies to; epochs take effect in order, and for every seq
// each rank uses the newest epoch whose fromSeq <= seq. The leader grants a
// *horizon* H: this rank may start collective seq only while seq < H. A new
// epoch is committed with fromSeq = E >= H (the leader stops extending H
// before it prepares a swap), so no rank can have started a collective >= E
// with an older table: every rank switches exactly at E.
//
// Hot path. engine code does
//     if (clock.mustAdvance(seq)) TH_CHECK(clock.advance(seq));
//     const Epoch& e = clock.current();
// mustAdvance is one relaxed load and one comparison against `trigger`, the
// smallest seq at which this rank has something to do:
//     trigger = min(H, fromSeq of the next committed epoch, report point)
// Everything else runs in advance() (the slow path): installing a committed
// epoch, sending a PROGRESS report (once per lease, when seq crosses the
// report point the leader chose, so the leader extends H before anyone
// reaches it), and waiting at H (bounded by a timeout, abortable, failing
// early when a rank failed or the leader left) until the leader extends the
// lease or commits the next epoch.
//
// Message handlers (the bootstrap control thread) and the service thread
// (PREPARE work) change the state under a mutex and recompute trigger; they
// only ever lower it to values <= H, so a stale load on the hot path is
// harmless: it makes the rank enter the slow path later only when nothing is
// due before the horizon it already holds.
//
// Protocol violations (a COMMIT for a table this rank did not prepare, an
// effective seq this rank already passed, epochs out of order) make the
// clock fail for good: invariant 1 cannot be guaranteed any more, so every
// later collective returns the error instead of risking a wrong result.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "common/deadline.h"
#include "common/status.h"
#include "policy/decision_table.h"

namespace theseus::epoch {

// What the engine prepares for an epoch off the critical path (programs,
// rank templates); opaque to the epoch module, adopted by the engine when the
// epoch takes effect.
struct Prepared {
  virtual ~Prepared() = default;
};

struct Epoch {
  uint64_t version = 0;
  uint64_t fromSeq = 0;          // first collective it applies to (set by COMMIT)
  policy::DecisionTable table;
  std::string reason;            // why the leader chose it (decision log)
  std::shared_ptr<const std::string> logBody;  // its decision-log line without "seq" (formatted off the critical path)
  std::unique_ptr<Prepared> prepared;
};

class EpochClock {
 public:
  static constexpr uint64_t kForever = UINT64_MAX;

  struct Hooks {
    // App thread, without locks held: tell the leader this rank reached seq.
    std::function<Status(uint64_t seq)> report;
    // Polled while waiting at the horizon: a failed rank, the leader gone, an async error.
    std::function<Status()> health;
    // Called (under no lock) when a PREPARE is queued: wake whoever runs prepare jobs.
    std::function<void()> prepareQueued;
    // App thread: an epoch took effect at its fromSeq (decision log).
    std::function<void(const Epoch&)> installed;
  };

  // Starts with `initial` in effect from its fromSeq, lease `horizon`, first report at `reportAt`.
  EpochClock(std::shared_ptr<Epoch> initial, uint64_t horizon, uint64_t reportAt, const AbortFlag* abort,
             int64_t waitTimeoutMs, Hooks hooks);

  // ---- app thread ----
  bool mustAdvance(uint64_t seq) const { return seq >= trigger_.load(std::memory_order_relaxed); }
  // The slow path for collective `seq` (see above). On success current() is the epoch for seq.
  Status advance(uint64_t seq);
  // The communicator's timeout (0: none), read at each wait: the shorter of it and the clock's
  // own wait timeout applies (comm/timeouts.h).
  void setCommTimeout(const std::atomic<int64_t>* timeoutMs) { commTimeoutMs_ = timeoutMs; }
  const Epoch& current() const { return *current_; }
  Epoch& current() { return *current_; }

  // ---- control thread (messages from the leader); errors are protocol violations ----
  void onGrant(uint64_t horizon, uint64_t reportAt);
  void onPrepare(std::shared_ptr<Epoch> e, uint64_t atSeq);
  void onCommit(uint64_t version, uint64_t effectiveSeq, uint64_t horizon, uint64_t reportAt);
  void onCancel(uint64_t version, const std::string& why);
  // Something waiters should re-check (a peer failed, the communicator is closing).
  void wake();
  // Fails the clock for good (protocol violation, fatal control-plane error).
  void fail(const Status& why);

  // ---- service thread ----
  // The epoch to prepare (once per PREPARE), or null.
  std::shared_ptr<Epoch> takePrepareJob();
  // Records the outcome of preparing `version`; false when it was cancelled meanwhile.
  bool finishPrepare(uint64_t version, const Status& result);

  // ---- any thread ----
  // The epoch in effect for collective `seq` as far as this rank knows now
  // (the current one, or a committed one that takes effect by then).
  std::shared_ptr<const Epoch> epochFor(uint64_t seq) const;
  uint64_t horizon() const;
  uint64_t currentVersion() const { return currentVersion_.load(std::memory_order_acquire); }
  Status failure() const;

 private:
  enum class PrepState { kNone, kQueued, kWorking, kDone, kFailed };

  void recomputeTriggerLocked();
  void failLocked(const Status& why);
  Status waitAtHorizon(std::unique_lock<std::mutex>& lock, uint64_t seq, Deadline deadline, int64_t waitMs);
  int64_t effectiveWaitMs() const;
  std::string waitDescriptionLocked(uint64_t seq) const;

  const AbortFlag* abort_;
  int64_t waitTimeoutMs_;
  const std::atomic<int64_t>* commTimeoutMs_ = nullptr;
  Hooks hooks_;
  std::atomic<uint64_t> trigger_{0};
  std::atomic<uint64_t> currentVersion_{0};
  std::shared_ptr<Epoch> current_;   // written by the app thread under mu_

  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t horizon_ = 0;
  uint64_t reportAt_ = 0;
  uint64_t reported_ = 0;            // highest seq reported + 1 (0: none)
  std::deque<std::shared_ptr<Epoch>> committed_;  // by fromSeq, not yet in effect
  uint64_t lastCommitted_ = 0;       // version of the newest committed epoch
  std::shared_ptr<Epoch> preparing_;
  PrepState prepState_ = PrepState::kNone;
  Status failure_;
};

}  // namespace theseus::epoch
