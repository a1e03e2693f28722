// Admission of connections on a listener anyone can reach (the root's port, a rank's
// bootstrap listener).
//
// Anything may connect to these ports: a port scanner, a misconfigured job, an attack. A
// connection that never introduces itself must not lock real ranks or peers out, and must
// not make the process run out of file descriptors (issue 14, item 9: a thousand idle
// connections used to make real ranks fail with "Connection reset by peer"). A real client
// sends its hello right after connecting, so it is heard within one poll round. Hence:
//  - at most kAcceptBatch connections are accepted per poll round, so those accepted in
//    one round are read before the next batch arrives;
//  - at most `maxPending` connections may be still introducing themselves; when full, or
//    when the process is out of file descriptors, the oldest connection that has said
//    nothing is closed, never the newcomer;
//  - out of file descriptors with nothing to close, the listener is left alone for
//    kPauseMs (its poll slot gets fd -1) instead of spinning on it.
// Connections that say nothing are dropped at their hello deadline anyway.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <vector>

#include "bootstrap/socket.h"
#include "common/deadline.h"
#include "common/log.h"

namespace theseus::bootstrap {

class Admission {
 public:
  static constexpr size_t kAcceptBatch = 32;
  static constexpr int64_t kPauseMs = 20;

  Admission(const char* owner, size_t maxPending) : owner_(owner), maxPending_(maxPending) {}

  // The fd to put in the listener's poll slot (-1 while paused) and the poll timeout.
  int pollFd(int listenFd) const { return pause_.expired() ? listenFd : -1; }
  int64_t pollTimeoutMs(int64_t wanted) const { return pause_.expired() ? wanted : std::min(wanted, kPauseMs); }

  // Accepts one batch into `pending` (oldest first; T has `int fd` and `bool heard`, and
  // entries with fd < 0 are already removed). `init(T&)` sets up a new entry.
  template <typename T, typename Init>
  void acceptBatch(int listenFd, std::vector<std::unique_ptr<T>>& pending, Init init) {
    for (size_t n = 0; n < kAcceptBatch; ++n) {
      if (pending.size() >= maxPending_ && !evictSilent(pending, "too many connections introducing themselves"))
        return pauseListener();
      int fd = acceptNonBlocking(listenFd);
      if (fd < 0) {
        if (errno != EMFILE && errno != ENFILE && errno != ENOBUFS && errno != ENOMEM) return;  // drained
        if (!evictSilent(pending, "the process is out of file descriptors")) return pauseListener();
        continue;
      }
      auto entry = std::make_unique<T>();
      entry->fd = fd;
      init(*entry);
      pending.push_back(std::move(entry));
    }
  }

 private:
  template <typename T>
  bool evictSilent(std::vector<std::unique_ptr<T>>& pending, const char* why) {
    auto it = std::find_if(pending.begin(), pending.end(), [](const auto& p) { return p->fd >= 0 && !p->heard; });
    if (it == pending.end()) return false;
    if (evicted_++ % 1000 == 0)
      TH_INFO(log::kBootstrap, "%s: %s; closing the oldest connections that said nothing (%llu so far)", owner_, why,
              static_cast<unsigned long long>(evicted_));
    closeFd(&(*it)->fd);
    pending.erase(it);
    return true;
  }
  void pauseListener() { pause_ = Deadline::afterMs(kPauseMs); }

  const char* owner_;
  size_t maxPending_;
  Deadline pause_ = Deadline::afterMs(0);
  uint64_t evicted_ = 0;
};

}  // namespace theseus::bootstrap
