// Send side of the TCP transport and the SocketPump (see socket_transport.h).
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "transport/socket/socket_io.h"
#include "transport/socket/socket_transport.h"
#include "transport/socket/tcp_path_stats.h"

namespace theseus::transport {

uint32_t socketTag(int channel, uint32_t index) {
  // 0x7d in the top byte marks transport data connections among bootstrap tags.
  return 0x7d000000u | ((static_cast<uint32_t>(channel) & 0xffffu) << 8) | (index & 0xffu);
}

namespace {

// Locking: mu_ guards the queue and the socket cursors, taken by the executor's
// thread (acquire/commit/progress) and by the pump thread. The executor writes
// payload into an acquired slot without the lock: that slot is not queued yet,
// so nobody else reads it.
class SocketSendConnection final : public SendConnection, public SocketWaitable, public SocketPump::Client {
 public:
  SocketSendConnection(const SocketParams& p, std::vector<int> fds, RingMemory ring, ConnectionCounters* counters,
                       SocketPump* pump, const AbortFlag* abort)
      : p_(p), fds_(std::move(fds)), ring_(std::move(ring)), metas_(p.slots), cursors_(fds_.size()),
        counters_(counters), pump_(pump), abort_(abort) {
    if (pump_ != nullptr) pump_->add(this);
  }
  ~SocketSendConnection() override {
    if (pump_ != nullptr) pump_->remove(this);
    flush();
    TH_INFO(log::kNet, "closing the TCP connection to rank %d channel %d after %llu message(s)", p_.peer, p_.channel,
            static_cast<unsigned long long>(completed_.load()));
    for (int fd : fds_) {
      shutdown(fd, SHUT_WR);
      close(fd);
    }
  }

  Kind kind() const override { return Kind::kSocket; }
  int peer() const override { return p_.peer; }
  size_t slotBytes() const override { return p_.slotBytes; }

  bool tryAcquire(SendSlot* slot) override {
    if (committed_ - completed_.load(std::memory_order_acquire) >= p_.slots) {
      std::lock_guard lock(mu_);
      drive();
      if (committed_ - completed_.load(std::memory_order_relaxed) >= p_.slots) return false;
    }
    acquired_ = true;
    slot->data = ring_.get() + (committed_ % p_.slots) * p_.slotBytes;
    slot->capacity = p_.slotBytes;
    return true;
  }

  uint64_t commitInline(size_t bytes, uint32_t tag) override {
    if (!acquired_ || bytes > p_.slotBytes) {
      std::lock_guard lock(mu_);
      error_ = internalError("commitInline to rank %d: %s (%zu bytes, slot %zu)", p_.peer,
                             acquired_ ? "message larger than the slot" : "no slot acquired", bytes, p_.slotBytes);
      TH_WARN("%s", error_.message().c_str());
      return 0;
    }
    acquired_ = false;
    bool notify = false;
    uint64_t ticket;
    {
      std::lock_guard lock(mu_);
      Meta& m = metas_[committed_ % p_.slots];
      m.header = {wire::kMessageMagic, tag, bytes};
      if (completed_.load(std::memory_order_relaxed) == committed_) busy_.begin();
      ticket = ++committed_;
      drive();
      if (pendingLocked() && !watched_) watched_ = notify = true;
    }
    counters_->addMessage(bytes);
    if (bytes >= kPathSampleMinBytes) samplePath();
    if (notify && pump_ != nullptr) pump_->notify();
    return ticket;
  }

  bool canSendDirect(const void*, size_t) const override { return false; }
  uint64_t commitDirect(const void*, size_t bytes, uint32_t) override {
    std::lock_guard lock(mu_);
    acquired_ = false;
    error_ = internalError("commitDirect to rank %d: a TCP connection cannot send zero-copy", p_.peer);
    TH_WARN("%s", error_.message().c_str());
    return 0;
  }
  bool consumed(uint64_t ticket) const override { return completed_.load(std::memory_order_acquire) >= ticket; }

  Status progress() override {
    std::lock_guard lock(mu_);
    drive();
    return error_;
  }

  // SocketWaitable: the pump writes queued data, so the executor waits on nothing here.
  void addPollFds(std::vector<struct pollfd>*) override {}
  bool settingUp() const override { return false; }

  // SocketPump::Client
  bool pump() override {
    std::lock_guard lock(mu_);
    uint64_t before = completed_.load(std::memory_order_relaxed);
    drive();
    if (!pendingLocked()) watched_ = false;
    return completed_.load(std::memory_order_relaxed) != before || !error_.isOk();
  }
  bool addPendingFds(std::vector<struct pollfd>* fds) override {
    std::lock_guard lock(mu_);
    if (!error_.isOk() || !pendingLocked()) return false;
    for (size_t i = 0; i < fds_.size(); ++i)
      if (cursors_[i].msg < committed_) fds->push_back({fds_[i], POLLOUT, 0});
    return true;
  }

 private:
  struct Meta {
    wire::MessageHeader header{};
  };
  struct Cursor {
    uint64_t msg = 0;  // message being written on this socket
    uint64_t off = 0;  // bytes of it written (socket 0: header first)
  };

  // A collective completes once its messages are queued, so a communicator may
  // be destroyed while the last ones are still here: write them out before
  // closing (bounded; skipped on abort or when the peer is gone).
  void flush() {
    constexpr int64_t kFlushMs = 10000;
    Deadline deadline = Deadline::afterMs(kFlushMs);
    std::unique_lock lock(mu_);
    std::vector<struct pollfd> fds;
    for (;;) {
      drive();
      if (!pendingLocked() || (abort_ != nullptr && abort_->isSet())) return;
      if (deadline.expired()) {
        TH_WARN("closing the TCP connection to rank %d (channel %d) with %llu message(s) unsent after %lld ms",
                p_.peer, p_.channel, static_cast<unsigned long long>(committed_ - completed_.load()),
                static_cast<long long>(kFlushMs));
        return;
      }
      fds.clear();
      for (size_t i = 0; i < fds_.size(); ++i)
        if (cursors_[i].msg < committed_) fds.push_back({fds_[i], POLLOUT, 0});
      lock.unlock();
      (void)poll(fds.data(), fds.size(), 10);
      lock.lock();
    }
  }

  uint64_t streamBytes(uint32_t i, uint64_t m) const {
    uint64_t payload = stripePart(metas_[m % p_.slots].header.bytes, p_.nsocks, p_.stripeMinBytes, i).bytes;
    return payload + (i == 0 ? sizeof(wire::MessageHeader) : 0);
  }
  bool pendingLocked() const { return error_.isOk() && completed_.load(std::memory_order_relaxed) < committed_; }

  // Writes what the kernel takes on every socket; updates completed_.
  void drive() {
    if (!error_.isOk()) return;
    uint64_t done = committed_;
    for (uint32_t i = 0; i < fds_.size(); ++i) {
      Status s = writeSocket(i);
      if (!s.isOk()) {
        error_ = s;
        TH_WARN("%s", s.message().c_str());
        return;
      }
      done = std::min(done, cursors_[i].msg);
    }
    completed_.store(done, std::memory_order_release);
    if (done == committed_) busy_.end(*counters_);
  }

  // The kernel's view of the path (PeerStats::linkBusyNs), read while large
  // messages go out, at most every kPathSampleNs: one getsockopt per socket,
  // never on the small-message path. Stops for good on sockets that are not TCP.
  void samplePath() {
    if (!pathStats_) return;
    const uint64_t now = nowNs();
    if (now - lastPathSampleNs_ < kPathSampleNs) return;
    lastPathSampleNs_ = now;
    uint64_t busyUs = 0;
    for (int fd : fds_) {
      TcpPathStats t;
      if (!readTcpPathStats(fd, &t)) {
        pathStats_ = false;
        return;
      }
      busyUs += t.pathBusyUs;
    }
    counters_->linkBusyNs.store(busyUs * 1000, std::memory_order_relaxed);
  }

  Status writeSocket(uint32_t i) {
    Cursor& c = cursors_[i];
    constexpr int kMaxIov = 16;
    for (;;) {
      while (c.msg < committed_ && streamBytes(i, c.msg) == 0) ++c.msg;
      if (c.msg == committed_) return Status::ok();
      struct iovec iov[kMaxIov];
      int n = 0;
      for (uint64_t m = c.msg; m < committed_ && n + 2 <= kMaxIov; ++m) {
        uint64_t off = (m == c.msg) ? c.off : 0;
        const Meta& meta = metas_[m % p_.slots];
        if (i == 0 && off < sizeof(wire::MessageHeader)) {
          iov[n++] = {const_cast<char*>(reinterpret_cast<const char*>(&meta.header)) + off,
                      sizeof(wire::MessageHeader) - off};
          off = 0;
        } else if (i == 0) {
          off -= sizeof(wire::MessageHeader);
        }
        StripePart part = stripePart(meta.header.bytes, p_.nsocks, p_.stripeMinBytes, i);
        if (part.bytes > off)
          iov[n++] = {ring_.get() + (m % p_.slots) * p_.slotBytes + part.offset + off, part.bytes - off};
      }
      size_t sent = 0;
      int err = 0;
      switch (sendSome(fds_[i], iov, n, &sent, &err)) {
        case IoResult::kWouldBlock: return Status::ok();
        case IoResult::kClosed:
          return remoteError("rank %d closed its TCP connection (channel %d, socket %u): %s", p_.peer, p_.channel, i,
                             strerror(err));
        case IoResult::kError:
          return errnoStatus(err, "sending to rank %d (channel %d, socket %u)", p_.peer, p_.channel, i);
        case IoResult::kProgress: break;
      }
      while (sent > 0) {
        uint64_t left = streamBytes(i, c.msg) - c.off;
        if (sent < left) {
          c.off += sent;
          break;
        }
        sent -= left;
        ++c.msg;
        c.off = 0;
        while (c.msg < committed_ && streamBytes(i, c.msg) == 0) ++c.msg;
      }
    }
  }

  SocketParams p_;
  std::vector<int> fds_;
  RingMemory ring_;
  std::vector<Meta> metas_;
  std::vector<Cursor> cursors_;
  ConnectionCounters* counters_;
  SocketPump* pump_;
  const AbortFlag* abort_;
  std::mutex mu_;
  bool acquired_ = false;
  uint64_t committed_ = 0;                // written by the executor's thread under mu_
  std::atomic<uint64_t> completed_{0};    // all sockets wrote it
  bool watched_ = false;                  // the pump knows we have queued output
  IntervalClock busy_;
  Status error_;
  static constexpr size_t kPathSampleMinBytes = 64 << 10;
  static constexpr uint64_t kPathSampleNs = 5'000'000;
  bool pathStats_ = true;          // executor thread
  uint64_t lastPathSampleNs_ = 0;  // executor thread
};

}  // namespace

Result<SocketSendHandle> connectSocketSend(bootstrap::Bootstrap& boot, const SocketParams& p, Deadline deadline,
                                           const AbortFlag* abort, ConnectionCounters* counters, SocketPump* pump) {
  std::vector<int> fds;
  auto fail = [&](const Status& s) {
    for (int fd : fds) close(fd);
    return s.withContext("TCP connection to rank " + std::to_string(p.peer) + " channel " + std::to_string(p.channel));
  };
  for (uint32_t i = 0; i < p.nsocks; ++i) {
    auto fd = boot.connectTo(p.peer, socketTag(p.channel, i), deadline);
    if (!fd.isOk()) return fail(fd.status());
    fds.push_back(fd.value());
    Status s = configureDataSocket(fd.value(), p.sendBuf, p.recvBuf);
    wire::Hello h{wire::kHelloMagic, wire::kVersion, p.rank, static_cast<uint32_t>(p.channel), i, p.nsocks, 0,
                  p.slotBytes, p.stripeMinBytes};
    if (s.isOk()) s = writeFully(fd.value(), &h, sizeof(h), deadline, abort, "sending the connection hello");
    if (!s.isOk()) return fail(s);
  }
  auto ring = allocRing(static_cast<size_t>(p.slots) * p.slotBytes);
  if (!ring.isOk()) return fail(ring.status());
  auto* c = new SocketSendConnection(p, std::move(fds), ring.take(), counters, pump, abort);
  SocketSendHandle h;
  h.connection.reset(c);
  h.waitable = c;
  TH_INFO(log::kNet | log::kInit, "TCP connection to rank %d channel %d: %u socket(s), %u x %zu-byte slots", p.peer,
          p.channel, p.nsocks, p.slots, p.slotBytes);
  return h;
}

// ---------------------------------------------------------------------------
// SocketPump

SocketPump::SocketPump(WakeFn wake, void* wakeCtx) : wake_(wake), wakeCtx_(wakeCtx) {
  eventFd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  thread_ = std::thread([this] { run(); });
}

SocketPump::~SocketPump() {
  stop_.store(true);
  notify();
  thread_.join();
  if (eventFd_ >= 0) close(eventFd_);
}

void SocketPump::add(Client* c) {
  std::lock_guard lock(mu_);
  clients_.push_back(c);
}

void SocketPump::remove(Client* c) {
  std::lock_guard lock(mu_);
  clients_.erase(std::remove(clients_.begin(), clients_.end(), c), clients_.end());
}

void SocketPump::notify() {
  uint64_t one = 1;
  if (eventFd_ >= 0) (void)!write(eventFd_, &one, sizeof(one));
}

// Sleeps until a client's socket can take more bytes (or a client announces
// queued output), writes, and wakes the executor when slots were freed.
void SocketPump::run() {
  std::vector<struct pollfd> fds;
  while (!stop_.load()) {
    fds.clear();
    fds.push_back({eventFd_, POLLIN, 0});
    {
      std::lock_guard lock(mu_);
      for (Client* c : clients_) c->addPendingFds(&fds);
    }
    int rc = poll(fds.data(), fds.size(), 1000);
    if (rc < 0 && errno != EINTR) break;
    if (fds[0].revents != 0) {
      uint64_t v;
      (void)!read(eventFd_, &v, sizeof(v));
    }
    bool freed = false;
    {
      std::lock_guard lock(mu_);
      for (Client* c : clients_) freed |= c->pump();
    }
    if (freed && wake_ != nullptr) wake_(wakeCtx_);
  }
}

}  // namespace theseus::transport
