// EpochLeader: the leader's side of the horizon-lease protocol, as a pure
// state machine (no threads, no sockets: events in, messages out), so the
// protocol is unit-tested with simulated ranks. EpochService drives it.
//
// Leasing. The leader holds the horizon H it granted and the largest seq any
// rank reported. Ranks report once per lease, when they reach the report
// point R = H - L/2 (or when they are blocked at H). On a report with
// seq >= R the leader grants H' = H + L, R' = H' - L/2, so every rank always
// holds between L/2 and 3L/2 collectives of lease. The lease length L
// adapts to the collective rate: L = rate * THESEUS_EPOCH_LEASE_MS, clamped to
// [THESEUS_EPOCH_LEASE_MIN, THESEUS_EPOCH_LEASE_MAX], so small collectives
// cost one report per rank every few tens of milliseconds and big ones never
// wait for a lease (a report is due half a lease before the horizon).
//
// Swapping. propose(table) freezes H (no more grants) and sends PREPARE(v, H)
// to every rank. Ranks prepare in the background and ACK. When every rank
// acknowledged, the leader sends COMMIT(v, E = H) with the next lease
// H' = E + L. A negative ACK, a prepare timeout or a failed rank CANCELs the
// swap (and resumes leasing); a failed rank also stops the leader for good.
//
// Long collectives. When collectives start at least longCollectiveNs apart
// (THESEUS_EPOCH_LONG_COLLECTIVE_MS; the measured rate, compute gaps included), the lease is one collective and R = H:
// a rank asks for the next collective only when it gets there, so the horizon
// is always the collective after the one running, and a swap the leader
// decides while a long collective runs takes effect at the very next one. The
// price is one control round trip per collective (a rank waits for the GRANT
// at H): well under 0.1% of a collective that long.
//
// Bound on the delay of a swap: it takes effect at E = the horizon when the
// leader decided, i.e. at most 3/2 L_max collectives after the most advanced rank,
// and no earlier than every rank has prepared it.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "epoch/epoch_messages.h"
#include "policy/decision_table.h"

namespace theseus::epoch {

struct LeaderConfig {
  int nranks = 1;
  uint64_t leaseMin = 4;
  uint64_t leaseMax = 4096;
  uint64_t leaseTargetNs = 50'000'000;   // how long a lease should last at the measured rate
  uint64_t longCollectiveNs = 0;         // collectives at least this long: a lease of one (0: off)
  uint64_t prepareTimeoutNs = 30'000'000'000ull;
};

// Messages to send: to one rank, or to all (rank == kAll), in order.
struct Outbox {
  static constexpr int kAll = -1;
  std::vector<std::pair<int, EpochMsg>> messages;
  void to(int rank, EpochMsg m) { messages.emplace_back(rank, std::move(m)); }
};

class EpochLeader {
 public:
  enum class State { kLeasing, kPreparing, kStopped };

  // The initial epoch (version, in effect from seq 0) and lease are agreed at init.
  EpochLeader(const LeaderConfig& config, uint64_t initialVersion, uint64_t horizon, uint64_t reportAt,
              uint64_t nowNs);

  void onProgress(int rank, uint64_t seq, uint64_t nowNs, Outbox* out);
  void onAck(int rank, uint64_t version, bool ok, const std::string& error, uint64_t nowNs, Outbox* out);
  // Starts a swap to `table` (serialized with its version set here). Fails when
  // a swap is in progress or the leader stopped.
  Result<uint64_t> propose(policy::DecisionTable table, const std::string& reason, uint64_t nowNs, Outbox* out);
  // Periodic: prepare timeouts.
  void tick(uint64_t nowNs, Outbox* out);
  // A rank failed: cancel any swap, stop granting (the communicator is broken).
  void onRankFailed(int rank, Outbox* out);

  State state() const { return state_; }
  uint64_t horizon() const { return horizon_; }
  uint64_t maxReported() const { return maxReported_; }
  uint64_t lease() const { return lease_; }
  uint64_t committedVersion() const { return committedVersion_; }
  uint64_t lastCommitSeq() const { return lastCommitSeq_; }
  // The table last committed (or the initial one when set with setCommitted).
  const policy::DecisionTable& committedTable() const { return committed_; }
  void setCommitted(const policy::DecisionTable& t) { committed_ = t; }
  // Why the last swap was cancelled ("" if none).
  const std::string& lastCancel() const { return lastCancel_; }

 private:
  void grant(uint64_t base, uint64_t nowNs, Outbox* out);
  void cancel(const std::string& why, uint64_t nowNs, Outbox* out);
  void adaptLease(uint64_t seq, uint64_t nowNs);

  LeaderConfig config_;
  State state_ = State::kLeasing;
  uint64_t horizon_;
  uint64_t reportAt_;
  uint64_t lease_;
  uint64_t maxReported_ = 0;
  uint64_t rateSeq_ = 0, rateNs_ = 0;    // last point of the rate measurement
  uint64_t nextVersion_;
  uint64_t committedVersion_;
  uint64_t lastCommitSeq_ = 0;
  policy::DecisionTable committed_;
  // The swap in progress.
  uint64_t swapVersion_ = 0;
  policy::DecisionTable swapTable_;
  uint64_t swapStartNs_ = 0;
  std::set<int> acked_;
  std::string lastCancel_;
};

}  // namespace theseus::epoch
