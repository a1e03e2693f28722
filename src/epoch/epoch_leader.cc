#include "epoch/epoch_leader.h"

#include <algorithm>

#include "common/log.h"

namespace theseus::epoch {

EpochLeader::EpochLeader(const LeaderConfig& config, uint64_t initialVersion, uint64_t horizon, uint64_t reportAt,
                         uint64_t nowNs)
    : config_(config),
      horizon_(horizon),
      reportAt_(std::min(reportAt, horizon)),
      lease_(std::clamp<uint64_t>(horizon, config.leaseMin, config.leaseMax)),
      rateNs_(nowNs),
      nextVersion_(initialVersion + 1),
      committedVersion_(initialVersion) {
  config_.leaseMin = std::max<uint64_t>(config_.leaseMin, 2);
  config_.leaseMax = std::max(config_.leaseMax, config_.leaseMin);
}

// Lease length from the rate the most advanced rank moved since the last extension.
void EpochLeader::adaptLease(uint64_t seq, uint64_t nowNs) {
  if (seq > rateSeq_ && nowNs > rateNs_) {
    double rate = double(seq - rateSeq_) / double(nowNs - rateNs_);  // collectives per ns
    double want = rate * double(config_.leaseTargetNs);
    lease_ = std::clamp<uint64_t>(static_cast<uint64_t>(want), config_.leaseMin, config_.leaseMax);
    if (config_.longCollectiveNs > 0 && rate * double(config_.longCollectiveNs) <= 1.0) lease_ = 1;
  }
  rateSeq_ = seq;
  rateNs_ = nowNs;
}

void EpochLeader::grant(uint64_t base, uint64_t nowNs, Outbox* out) {
  adaptLease(base, nowNs);
  horizon_ += lease_;
  reportAt_ = horizon_ - lease_ / 2;
  EpochMsg m;
  m.kind = MsgKind::kGrant;
  m.horizon = horizon_;
  m.reportAt = reportAt_;
  out->to(Outbox::kAll, m);
}

void EpochLeader::onProgress(int rank, uint64_t seq, uint64_t nowNs, Outbox* out) {
  if (rank < 0 || rank >= config_.nranks) return;
  if (seq > horizon_) {
    TH_WARN("epoch leader: rank %d reports collective %llu beyond the lease %llu; ignoring", rank,
            static_cast<unsigned long long>(seq), static_cast<unsigned long long>(horizon_));
    return;
  }
  maxReported_ = std::max(maxReported_, seq);
  if (state_ != State::kLeasing) return;  // the horizon stays frozen during a swap
  if (maxReported_ >= reportAt_) grant(maxReported_, nowNs, out);
}

Result<uint64_t> EpochLeader::propose(policy::DecisionTable table, const std::string& reason, uint64_t nowNs,
                                      Outbox* out) {
  if (state_ == State::kStopped) return invalidUsage("the epoch leader stopped (a rank failed)");
  if (state_ == State::kPreparing)
    return invalidUsage("table v%llu is still being prepared", static_cast<unsigned long long>(swapVersion_));
  swapVersion_ = nextVersion_++;
  table.setVersion(swapVersion_);
  swapTable_ = table;
  swapStartNs_ = nowNs;
  acked_.clear();
  state_ = State::kPreparing;
  EpochMsg m;
  m.kind = MsgKind::kPrepare;
  m.version = swapVersion_;
  m.horizon = horizon_;
  m.text = table.serialize();
  m.reason = reason;
  out->to(Outbox::kAll, m);
  return swapVersion_;
}

void EpochLeader::onAck(int rank, uint64_t version, bool ok, const std::string& error, uint64_t nowNs,
                        Outbox* out) {
  if (state_ != State::kPreparing || version != swapVersion_ || rank < 0 || rank >= config_.nranks) return;
  if (!ok) {
    cancel("rank " + std::to_string(rank) + " could not prepare table v" + std::to_string(version) + ": " + error,
           nowNs, out);
    return;
  }
  acked_.insert(rank);
  if (static_cast<int>(acked_.size()) < config_.nranks) return;
  // Everyone is ready: table v takes effect at the frozen horizon.
  const uint64_t e = horizon_;
  state_ = State::kLeasing;
  committedVersion_ = swapVersion_;
  committed_ = std::move(swapTable_);
  swapTable_ = policy::DecisionTable();
  lastCommitSeq_ = e;
  horizon_ = e + lease_;
  reportAt_ = horizon_ - lease_ / 2;
  rateSeq_ = std::max(rateSeq_, maxReported_);
  EpochMsg m;
  m.kind = MsgKind::kCommit;
  m.version = committedVersion_;
  m.effectiveSeq = e;
  m.horizon = horizon_;
  m.reportAt = reportAt_;
  out->to(Outbox::kAll, m);
  TH_INFO(log::kEpoch, "epoch leader: table v%llu commits at collective %llu (prepared in %.1f ms)",
          static_cast<unsigned long long>(committedVersion_), static_cast<unsigned long long>(e),
          double(nowNs - swapStartNs_) / 1e6);
}

void EpochLeader::cancel(const std::string& why, uint64_t nowNs, Outbox* out) {
  lastCancel_ = why;
  TH_WARN("epoch leader: table v%llu cancelled: %s", static_cast<unsigned long long>(swapVersion_), why.c_str());
  EpochMsg m;
  m.kind = MsgKind::kCancel;
  m.version = swapVersion_;
  m.text = why;
  out->to(Outbox::kAll, m);
  swapTable_ = policy::DecisionTable();
  acked_.clear();
  if (state_ == State::kPreparing) {
    state_ = State::kLeasing;
    // Ranks may be waiting at the frozen horizon: extend at once.
    grant(maxReported_, nowNs, out);
  }
}

void EpochLeader::tick(uint64_t nowNs, Outbox* out) {
  if (state_ != State::kPreparing || nowNs - swapStartNs_ < config_.prepareTimeoutNs) return;
  std::string missing;
  for (int r = 0; r < config_.nranks; ++r)
    if (!acked_.count(r)) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  cancel("no acknowledgement from rank(s) " + missing + " within " +
             std::to_string(config_.prepareTimeoutNs / 1'000'000) + " ms (THESEUS_EPOCH_PREPARE_TIMEOUT_MS)",
         nowNs, out);
}

void EpochLeader::onRankFailed(int rank, Outbox* out) {
  if (state_ == State::kStopped) return;
  if (state_ == State::kPreparing) {
    lastCancel_ = "rank " + std::to_string(rank) + " failed";
    EpochMsg m;
    m.kind = MsgKind::kCancel;
    m.version = swapVersion_;
    m.text = lastCancel_;
    out->to(Outbox::kAll, m);
  }
  state_ = State::kStopped;
}

}  // namespace theseus::epoch
