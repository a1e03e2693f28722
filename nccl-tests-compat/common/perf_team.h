// Thread-level plumbing of one process: the team of worker threads (-t) with
// an abortable barrier and element-wise combination, and the -T watchdog.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "perf_status.h"
#include "perf_world.h"

namespace theseus::perf {

void combineInto(std::vector<double>* acc, const std::vector<double>& v, Combine op);

// Barrier and reduction among the threads of one process. fail() wakes every
// waiter with an error, so a thread that stops early never strands the others.
class ThreadTeam {
 public:
  explicit ThreadTeam(int nthreads) : n_(nthreads) {}

  Status barrier();
  // Combines every thread's `values`; thread 0 then runs `leaderHook` (e.g. an
  // MPI allreduce) on the process-wide result, which every thread receives.
  Status allreduce(int thread, std::vector<double>* values, Combine op,
                   const std::function<Status(std::vector<double>*)>& leaderHook);
  // Every thread writes its part into a shared buffer; thread 0 runs
  // `leaderHook` on it; everybody receives the final buffer.
  Status gather(int thread, size_t offset, const std::string& part, size_t total,
                const std::function<Status(std::string*)>& leaderHook, std::string* out);
  void fail();
  bool failed() const { return failed_.load(); }

 private:
  const int n_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::atomic<bool> failed_{false};
  std::vector<std::vector<double>> valueSlots_;
  std::vector<double> acc_;
  std::vector<std::pair<size_t, std::string>> partSlots_;
  std::string shared_;
};

// -T: fires `onTimeout` once when an operation stays in flight longer than the
// timeout. Threads bracket every blocking NCCL call or wait with a Scope.
class Watchdog {
 public:
  Watchdog(int nthreads, double timeoutSec, std::function<void(int thread, const std::string& what)> onTimeout);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  bool enabled() const { return timeoutNs_ > 0; }
  bool fired() const { return fired_.load(); }

  class Scope {
   public:
    Scope(Watchdog& w, int thread, const std::string& what);
    ~Scope();
   private:
    Watchdog& w_;
    int thread_;
  };

 private:
  void loop();

  struct Slot {
    std::atomic<int64_t> sinceNs{0};  // 0: idle
    std::mutex mu;
    std::string what;
  };
  const int64_t timeoutNs_;
  std::function<void(int, const std::string&)> onTimeout_;
  std::unique_ptr<Slot[]> slots_;
  const int nslots_;
  std::atomic<bool> fired_{false};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
};

int64_t monotonicNs();

}  // namespace theseus::perf
