// The net-plugin backend's progress thread (see net_connection.h).
//
// A plugin has no descriptor to sleep on, so the pump polls while some
// connection has work in flight: at once again after a pass that moved
// something, then yielding, then sleeping 5 us more per idle pass up to
// 200 us (a link that carries nothing for a while costs a few thousand wake-
// ups a second, not a core). With no work anywhere it sleeps until notify().
// Lock order: the pump holds mu_ (the client list) and try-locks a client;
// clients notify without holding mu_, so the executor never waits for a pass.
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>

#include "common/log.h"
#include "transport/netplugin/net_connection.h"

namespace theseus::transport::netplugin {

NetPump::NetPump(WakeFn wake, void* wakeCtx, std::vector<int> cpus)
    : wake_(wake), wakeCtx_(wakeCtx), cpus_(std::move(cpus)) {
  thread_ = std::thread([this] {
    pin();
    run();
  });
}

// The NIC's NUMA-local CPUs that this process may use; none of them: unpinned.
void NetPump::pin() {
  if (cpus_.empty()) return;
  cpu_set_t allowed, mine;
  CPU_ZERO(&mine);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return;
  int n = 0;
  for (int c : cpus_)
    if (c >= 0 && c < CPU_SETSIZE && CPU_ISSET(c, &allowed)) {
      CPU_SET(c, &mine);
      ++n;
    }
  if (n == 0) {
    TH_INFO(log::kNet, "net plugin progress thread: none of the NIC's NUMA-local CPUs is allowed to this process; "
            "not pinned");
    return;
  }
  pthread_setaffinity_np(pthread_self(), sizeof(mine), &mine);
}

NetPump::~NetPump() {
  stop_.store(true);
  notify();
  thread_.join();
}

void NetPump::add(NetPumpClient* c) {
  {
    std::lock_guard lock(mu_);
    clients_.push_back(c);
  }
  notify();
}

void NetPump::remove(NetPumpClient* c) {
  std::lock_guard lock(mu_);  // waits for a pass that may be driving `c`
  clients_.erase(std::remove(clients_.begin(), clients_.end(), c), clients_.end());
}

void NetPump::notify() {
  std::lock_guard lock(kickMu_);
  kicked_ = true;
  cv_.notify_one();
}

void NetPump::run() {
  int idle = 0;
  while (!stop_.load()) {
    bool busy = false;
    bool moved = false;
    {
      std::lock_guard lock(mu_);
      for (NetPumpClient* c : clients_) {
        if (!c->wantsPump()) continue;
        busy = true;
        moved |= c->pump();
      }
    }
    if (moved) {
      idle = 0;
      if (wake_ != nullptr) wake_(wakeCtx_);
      continue;
    }
    if (!busy) {
      std::unique_lock lock(kickMu_);
      cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return kicked_ || stop_.load(); });
      kicked_ = false;
      idle = 0;
      continue;
    }
    ++idle;
    if (idle < 16) {
      sched_yield();
      continue;
    }
    std::unique_lock lock(kickMu_);
    cv_.wait_for(lock, std::chrono::microseconds(std::min(200, 5 * (idle - 15))), [this] { return kicked_ || stop_.load(); });
    if (kicked_) idle = 0;
    kicked_ = false;
  }
}

}  // namespace theseus::transport::netplugin
