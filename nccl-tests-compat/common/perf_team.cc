#include "perf_team.h"

#include <algorithm>
#include <ctime>

namespace theseus::perf {

int64_t monotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void combineInto(std::vector<double>* acc, const std::vector<double>& v, Combine op) {
  for (size_t i = 0; i < acc->size() && i < v.size(); ++i) {
    double& a = (*acc)[i];
    switch (op) {
      case Combine::kSum: a += v[i]; break;
      case Combine::kMin: a = std::min(a, v[i]); break;
      case Combine::kMax: a = std::max(a, v[i]); break;
    }
  }
}

// Generation-counting barrier: the last thread to arrive bumps the generation
// and wakes the others; fail() wakes everybody with an error instead.
Status ThreadTeam::barrier() {
  std::unique_lock<std::mutex> lock(mu_);
  if (failed_) return errorf(kExitError, "another thread of this process failed");
  if (++arrived_ == n_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return Status::ok();
  }
  uint64_t gen = generation_;
  cv_.wait(lock, [&] { return generation_ != gen || failed_; });
  if (generation_ == gen) return errorf(kExitError, "another thread of this process failed");
  return Status::ok();
}

void ThreadTeam::fail() {
  std::lock_guard<std::mutex> lock(mu_);
  failed_ = true;
  cv_.notify_all();
}

// Each thread publishes into its own slot; after the first barrier thread 0
// combines the slots (and runs the hook) into the shared result, which the
// others copy after the second barrier. Thread 0 writes the result again only
// after the first barrier of the next call, when every copy is done.
Status ThreadTeam::allreduce(int thread, std::vector<double>* values, Combine op,
                             const std::function<Status(std::vector<double>*)>& leaderHook) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (valueSlots_.size() != static_cast<size_t>(n_)) valueSlots_.resize(n_);
    valueSlots_[thread] = *values;
  }
  PERF_CHECK(barrier());
  if (thread == 0) {
    Status hook;
    {
      std::lock_guard<std::mutex> lock(mu_);
      acc_ = valueSlots_[0];
      for (int t = 1; t < n_; ++t) combineInto(&acc_, valueSlots_[t], op);
    }
    if (leaderHook) hook = leaderHook(&acc_);
    if (!hook.isOk()) {
      fail();
      return hook;
    }
  }
  PERF_CHECK(barrier());
  std::lock_guard<std::mutex> lock(mu_);
  *values = acc_;
  return Status::ok();
}

Status ThreadTeam::gather(int thread, size_t offset, const std::string& part, size_t total,
                          const std::function<Status(std::string*)>& leaderHook, std::string* out) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (partSlots_.size() != static_cast<size_t>(n_)) partSlots_.resize(n_);
    partSlots_[thread] = {offset, part};
  }
  PERF_CHECK(barrier());
  if (thread == 0) {
    Status hook;
    {
      std::lock_guard<std::mutex> lock(mu_);
      shared_.assign(total, '\0');
      for (const auto& [off, text] : partSlots_)
        if (off < total) shared_.replace(off, std::min(text.size(), total - off), text.substr(0, total - off));
    }
    if (leaderHook) hook = leaderHook(&shared_);
    if (!hook.isOk()) {
      fail();
      return hook;
    }
  }
  PERF_CHECK(barrier());
  std::lock_guard<std::mutex> lock(mu_);
  *out = shared_;
  return Status::ok();
}

Watchdog::Watchdog(int nthreads, double timeoutSec, std::function<void(int, const std::string&)> onTimeout)
    : timeoutNs_(static_cast<int64_t>(timeoutSec * 1e9)),
      onTimeout_(std::move(onTimeout)),
      slots_(new Slot[nthreads]),
      nslots_(nthreads) {
  if (timeoutNs_ > 0) thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

// Polls every slot a few times per timeout period (at most every 100 ms).
void Watchdog::loop() {
  const auto period = std::chrono::nanoseconds(std::clamp<int64_t>(timeoutNs_ / 4, 1000000, 100000000));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_ && !fired_) {
    cv_.wait_for(lock, period, [&] { return stop_.load(); });
    if (stop_) break;
    const int64_t now = monotonicNs();
    for (int t = 0; t < nslots_; ++t) {
      int64_t since = slots_[t].sinceNs.load();
      if (since != 0 && now - since > timeoutNs_) {
        fired_ = true;
        std::string what;
        {
          std::lock_guard<std::mutex> slotLock(slots_[t].mu);
          what = slots_[t].what;
        }
        lock.unlock();
        onTimeout_(t, what);
        return;
      }
    }
  }
}

Watchdog::Scope::Scope(Watchdog& w, int thread, const std::string& what) : w_(w), thread_(thread) {
  if (!w_.enabled()) return;
  {
    std::lock_guard<std::mutex> lock(w_.slots_[thread_].mu);
    w_.slots_[thread_].what = what;
  }
  w_.slots_[thread_].sinceNs.store(monotonicNs());
}

Watchdog::Scope::~Scope() {
  if (w_.enabled()) w_.slots_[thread_].sinceNs.store(0);
}

}  // namespace theseus::perf
