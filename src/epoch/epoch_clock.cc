#include "epoch/epoch_clock.h"

#include <algorithm>
#include <chrono>

#include "common/log.h"

namespace theseus::epoch {
namespace {

constexpr auto kWaitSlice = std::chrono::milliseconds(5);

std::string u(uint64_t v) { return v == EpochClock::kForever ? std::string("inf") : std::to_string(v); }

}  // namespace

EpochClock::EpochClock(std::shared_ptr<Epoch> initial, uint64_t horizon, uint64_t reportAt, const AbortFlag* abort,
                       int64_t waitTimeoutMs, Hooks hooks)
    : abort_(abort), waitTimeoutMs_(waitTimeoutMs), hooks_(std::move(hooks)), current_(std::move(initial)) {
  horizon_ = std::max(horizon, current_->fromSeq);
  reportAt_ = std::min(reportAt, horizon_);
  lastCommitted_ = current_->version;
  currentVersion_.store(current_->version, std::memory_order_release);
  std::lock_guard<std::mutex> lock(mu_);
  recomputeTriggerLocked();
}

void EpochClock::recomputeTriggerLocked() {
  uint64_t t = horizon_;
  if (!committed_.empty()) t = std::min(t, committed_.front()->fromSeq);
  if (reported_ <= reportAt_) t = std::min(t, reportAt_);
  if (!failure_.isOk()) t = 0;
  trigger_.store(t, std::memory_order_relaxed);
}

void EpochClock::failLocked(const Status& why) {
  if (failure_.isOk()) {
    failure_ = why;
    TH_WARN("epoch: %s", why.message().c_str());
  }
  recomputeTriggerLocked();
  cv_.notify_all();
}

void EpochClock::fail(const Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  failLocked(why);
}

Status EpochClock::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

std::shared_ptr<const Epoch> EpochClock::epochFor(uint64_t seq) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<const Epoch> e = current_;
  for (const auto& c : committed_)
    if (c->fromSeq <= seq) e = c;
  return e;
}

uint64_t EpochClock::horizon() const {
  std::lock_guard<std::mutex> lock(mu_);
  return horizon_;
}

void EpochClock::wake() {
  std::lock_guard<std::mutex> lock(mu_);
  cv_.notify_all();
}

// ---- app thread -------------------------------------------------------------------------------

int64_t EpochClock::effectiveWaitMs() const {
  const int64_t comm = commTimeoutMs_ != nullptr ? commTimeoutMs_->load(std::memory_order_relaxed) : 0;
  return boundedWaitMs(comm, waitTimeoutMs_);
}

Status EpochClock::advance(uint64_t seq) {
  const int64_t waitMs = effectiveWaitMs();
  Deadline deadline = Deadline::afterMs(waitMs);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (!failure_.isOk()) return failure_;
    // Install the committed epoch whose turn it is (exactly at its fromSeq).
    if (!committed_.empty() && seq >= committed_.front()->fromSeq) {
      std::shared_ptr<Epoch> next = std::move(committed_.front());
      committed_.pop_front();
      if (seq != next->fromSeq) {
        failLocked(internalError("epoch protocol: table v%llu takes effect at collective %llu but this rank is "
                                 "already at %llu",
                                 static_cast<unsigned long long>(next->version),
                                 static_cast<unsigned long long>(next->fromSeq), static_cast<unsigned long long>(seq)));
        return failure_;
      }
      current_ = std::move(next);
      currentVersion_.store(current_->version, std::memory_order_release);
      if (hooks_.installed) hooks_.installed(*current_);
      continue;
    }
    bool atHorizon = seq >= horizon_;
    bool crossed = seq >= reportAt_ && reported_ <= reportAt_;
    if ((crossed || atHorizon) && reported_ <= seq) {
      reported_ = seq + 1;
      recomputeTriggerLocked();
      lock.unlock();
      Status s = hooks_.report ? hooks_.report(seq) : Status::ok();
      lock.lock();
      if (!s.isOk()) {
        // Below the horizon the lease still covers this collective: the leader
        // may simply have finished its last collective and left (a broadcast
        // root destroys its communicator while the others still receive). Only
        // a rank that must wait at the horizon needs the leader; that wait fails
        // then, through the health hook, naming the departed leader.
        if (!atHorizon) {
          TH_INFO(log::kEpoch, "collective #%llu: could not report progress to the leader (%s); the lease still "
                               "covers it",
                  static_cast<unsigned long long>(seq), s.message().c_str());
          continue;
        }
        failLocked(s.withContext("epoch: reporting progress to the leader"));
        return failure_;
      }
      continue;  // state may have changed while unlocked
    }
    if (!atHorizon) {
      recomputeTriggerLocked();
      return Status::ok();
    }
    TH_CHECK(waitAtHorizon(lock, seq, deadline, waitMs));
  }
}

// One bounded wait for the lease to move past seq (or the next epoch to be committed).
Status EpochClock::waitAtHorizon(std::unique_lock<std::mutex>& lock, uint64_t seq, Deadline deadline, int64_t waitMs) {
  if (abort_ != nullptr && abort_->isSet())
    return remoteError("collective #%llu: the communicator was aborted while waiting for the epoch lease",
                       static_cast<unsigned long long>(seq));
  if (hooks_.health) {
    lock.unlock();
    Status h = hooks_.health();
    lock.lock();
    if (!h.isOk())
      return h.withContext("collective #" + std::to_string(seq) + " waiting for the epoch lease");
  }
  if (deadline.expired())
    return remoteError("collective #%llu waited %lld ms for the leader (rank 0) to extend the epoch lease: %s "
                       "(THESEUS_EPOCH_WAIT_TIMEOUT_MS, THESEUS_TIMEOUT_MS)",
                       static_cast<unsigned long long>(seq), static_cast<long long>(waitMs),
                       waitDescriptionLocked(seq).c_str());
  cv_.wait_for(lock, kWaitSlice);
  return Status::ok();
}

std::string EpochClock::waitDescriptionLocked(uint64_t seq) const {
  std::string s = "lease ends at " + u(horizon_) + ", this rank is at " + std::to_string(seq);
  if (preparing_ != nullptr) {
    const char* st = prepState_ == PrepState::kDone     ? "prepared here, waiting for the other ranks"
                     : prepState_ == PrepState::kFailed ? "failed to prepare here"
                                                        : "still being prepared here";
    s += "; table v" + std::to_string(preparing_->version) + " " + st;
  }
  return s;
}

// ---- control thread -----------------------------------------------------------------------------

void EpochClock::onGrant(uint64_t horizon, uint64_t reportAt) {
  std::lock_guard<std::mutex> lock(mu_);
  if (horizon <= horizon_) return;  // stale or duplicate: leases only grow
  horizon_ = horizon;
  reportAt_ = std::max(reportAt, reported_);
  reportAt_ = std::min(reportAt_, horizon_);
  recomputeTriggerLocked();
  cv_.notify_all();
}

void EpochClock::onPrepare(std::shared_ptr<Epoch> e, uint64_t atSeq) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (e->version <= lastCommitted_) {
      failLocked(internalError("epoch protocol: PREPARE of table v%llu, but v%llu was already committed",
                               static_cast<unsigned long long>(e->version),
                               static_cast<unsigned long long>(lastCommitted_)));
      return;
    }
    if (atSeq < horizon_) {
      failLocked(internalError("epoch protocol: PREPARE of table v%llu for collective %llu, below this rank's "
                               "lease %llu",
                               static_cast<unsigned long long>(e->version), static_cast<unsigned long long>(atSeq),
                               static_cast<unsigned long long>(horizon_)));
      return;
    }
    preparing_ = std::move(e);
    prepState_ = PrepState::kQueued;
  }
  if (hooks_.prepareQueued) hooks_.prepareQueued();
}

void EpochClock::onCommit(uint64_t version, uint64_t effectiveSeq, uint64_t horizon, uint64_t reportAt) {
  std::lock_guard<std::mutex> lock(mu_);
  if (preparing_ == nullptr || preparing_->version != version || prepState_ != PrepState::kDone) {
    failLocked(internalError("epoch protocol: COMMIT of table v%llu, which this rank %s",
                             static_cast<unsigned long long>(version),
                             preparing_ == nullptr || preparing_->version != version ? "was never asked to prepare"
                                                                                      : "has not prepared"));
    return;
  }
  uint64_t lastFrom = committed_.empty() ? current_->fromSeq : committed_.back()->fromSeq;
  if (effectiveSeq < horizon_ || effectiveSeq <= lastFrom) {
    failLocked(internalError("epoch protocol: COMMIT of table v%llu at collective %llu, but this rank may already "
                             "have started collectives up to %llu (previous table from %llu)",
                             static_cast<unsigned long long>(version), static_cast<unsigned long long>(effectiveSeq),
                             static_cast<unsigned long long>(horizon_), static_cast<unsigned long long>(lastFrom)));
    return;
  }
  preparing_->fromSeq = effectiveSeq;
  committed_.push_back(std::move(preparing_));
  preparing_.reset();
  prepState_ = PrepState::kNone;
  lastCommitted_ = version;
  horizon_ = std::max(horizon_, horizon);
  reportAt_ = std::min(std::max(reportAt, reported_), horizon_);
  recomputeTriggerLocked();
  cv_.notify_all();
}

void EpochClock::onCancel(uint64_t version, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (preparing_ == nullptr || preparing_->version != version) return;  // nothing (left) to cancel
  TH_INFO(log::kEpoch, "epoch: table v%llu cancelled by the leader: %s", static_cast<unsigned long long>(version),
          why.c_str());
  preparing_.reset();
  prepState_ = PrepState::kNone;
  cv_.notify_all();
}

// ---- service thread -------------------------------------------------------------------------------

std::shared_ptr<Epoch> EpochClock::takePrepareJob() {
  std::lock_guard<std::mutex> lock(mu_);
  if (preparing_ == nullptr || prepState_ != PrepState::kQueued) return nullptr;
  prepState_ = PrepState::kWorking;
  return preparing_;
}

bool EpochClock::finishPrepare(uint64_t version, const Status& result) {
  std::lock_guard<std::mutex> lock(mu_);
  if (preparing_ == nullptr || preparing_->version != version || prepState_ != PrepState::kWorking) return false;
  prepState_ = result.isOk() ? PrepState::kDone : PrepState::kFailed;
  cv_.notify_all();
  return true;
}

}  // namespace theseus::epoch
