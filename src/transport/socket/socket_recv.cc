// Receive side of the TCP transport (see socket_transport.h).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "transport/peer_accept.h"
#include "transport/socket/socket_io.h"
#include "transport/socket/socket_transport.h"
#include "transport/transport_config.h"

namespace theseus::transport {
namespace {

// Filled by the accept thread; read by the connection once `done` is set.
struct SocketSetup {
  std::atomic<bool> done{false};
  std::atomic<bool> cancel{false};
  Status status;
  std::vector<int> fds;
  wire::Hello hello{};
};

Status checkHello(const wire::Hello& h, const SocketParams& p, uint32_t index, uint32_t nsocks) {
  const char* why = nullptr;
  if (h.magic != wire::kHelloMagic) why = "not a Theseus data connection (bad magic)";
  else if (h.version != wire::kVersion) why = "protocol version mismatch";
  else if (h.rank != p.peer || h.channel != static_cast<uint32_t>(p.channel) || h.index != index)
    why = "connection for another rank, channel or socket";
  else if (h.nsocks < 1 || h.nsocks > kMaxSocketsPerConnection || (index > 0 && h.nsocks != nsocks))
    why = "bad socket count";
  else if (h.slotBytes < kMinSlotBytes || h.slotBytes > kMaxSlotBytes || h.stripeMinBytes == 0)
    why = "bad slot size";
  if (why == nullptr) return Status::ok();
  return remoteError("rank %d channel %d socket %u: bad connection hello: %s", p.peer, p.channel, index, why);
}

Status acceptAll(bootstrap::Bootstrap& boot, const SocketParams& p, Deadline deadline, const AbortFlag* abort,
                 int64_t timeoutMs, SocketSetup* s) {
  uint32_t nsocks = 1;
  for (uint32_t i = 0; i < nsocks; ++i) {
    TH_ASSIGN(int fd, acceptFromPeer(boot, p.peer, socketTag(p.channel, i), deadline, abort, s->cancel, timeoutMs,
                                     "its TCP connection (channel " + std::to_string(p.channel) + ", socket " +
                                         std::to_string(i) + ")"));
    s->fds.push_back(fd);
    // Once connected, the hello is due at once: a silent peer is an error, not a wait.
    wire::Hello h;
    TH_CHECK(readFully(fd, &h, sizeof(h), Deadline::afterMs(timeoutMs), abort, &s->cancel,
                       "reading the connection hello"));
    TH_CHECK(checkHello(h, p, i, nsocks));
    if (i == 0) {
      nsocks = h.nsocks;
      s->hello = h;
    }
    TH_CHECK(configureDataSocket(fd, p.sendBuf, p.recvBuf));
  }
  return Status::ok();
}

class SocketRecvConnection final : public RecvConnection, public SocketWaitable {
 public:
  SocketRecvConnection(bootstrap::Bootstrap& boot, const SocketParams& p, Deadline deadline, const AbortFlag* abort,
                       int64_t timeoutMs, ConnectionCounters* counters, WakeFn wake, void* wakeCtx)
      : p_(p), counters_(counters), setup_(std::make_shared<SocketSetup>()) {
    auto setup = setup_;
    SocketParams params = p;
    thread_ = std::thread([&boot, params, deadline, abort, timeoutMs, setup, wake, wakeCtx] {
      setup->status = acceptAll(boot, params, deadline, abort, timeoutMs, setup.get());
      setup->done.store(true, std::memory_order_release);
      if (wake != nullptr) wake(wakeCtx);
    });
  }
  ~SocketRecvConnection() override {
    setup_->cancel.store(true);
    if (thread_.joinable()) thread_.join();
    if (!active_)
      for (int fd : setup_->fds) close(fd);
    for (int fd : fds_) close(fd);
  }

  Kind kind() const override { return Kind::kSocket; }
  int peer() const override { return p_.peer; }

  bool tryPeek(RecvMessage* msg) override {
    if (!peeked_) {
      if (released_ >= complete()) drive();
      if (released_ >= complete()) {
        wait_.begin();
        return false;
      }
      wait_.end(*counters_);
      const Meta& m = metas_[released_ % slots_];
      msg_.data = ring_.get() + (released_ % slots_) * slotBytes_;
      msg_.bytes = m.bytes;
      msg_.tag = m.tag;
      msg_.direct = false;
      peeked_ = true;
    }
    *msg = msg_;
    return true;
  }

  void release() override {
    if (!peeked_) return;
    peeked_ = false;
    ++released_;
    counters_->addMessage(msg_.bytes);
  }

  Status progress() override {
    drive();
    // Messages that arrived before an error are still delivered first.
    if (!error_.isOk() && released_ < complete()) return Status::ok();
    return error_;
  }

  void addPollFds(std::vector<struct pollfd>* fds) override {
    if (!active_ || !error_.isOk()) return;
    for (uint32_t i = 0; i < fds_.size(); ++i)
      if (!eof_[i] && canRead(i)) fds->push_back({fds_[i], POLLIN, 0});
  }
  bool settingUp() const override {
    return !active_ && error_.isOk() && !setup_->done.load(std::memory_order_acquire);
  }

 private:
  struct Meta {
    uint64_t bytes = 0;
    uint32_t tag = 0;
  };
  struct Cursor {
    uint64_t msg = 0;  // message being read on this socket
    uint64_t off = 0;  // bytes of it read (socket 0: header first)
  };
  static constexpr uint64_t kHeader = sizeof(wire::MessageHeader);

  // Messages whose every part arrived.
  uint64_t complete() const {
    if (!active_) return 0;
    uint64_t c = cursors_[0].msg;
    for (const Cursor& k : cursors_) c = std::min(c, k.msg);
    return c;
  }

  bool canRead(uint32_t i) const {
    const Cursor& c = cursors_[i];
    if (i == 0) return c.off < kHeader || c.msg < parsed_;
    return c.msg < parsed_;
  }

  void activate() {
    if (active_ || !error_.isOk() || !setup_->done.load(std::memory_order_acquire)) return;
    thread_.join();
    if (!setup_->status.isOk()) {
      error_ = setup_->status.withContext("TCP connection from rank " + std::to_string(p_.peer) + " channel " +
                                          std::to_string(p_.channel));
      TH_WARN("%s", error_.message().c_str());
      return;
    }
    const wire::Hello& h = setup_->hello;
    slots_ = p_.slots;
    slotBytes_ = h.slotBytes;
    nsocks_ = h.nsocks;
    stripeMin_ = h.stripeMinBytes;
    auto ring = allocRing(slots_ * slotBytes_);
    if (!ring.isOk()) {
      error_ = ring.status();
      return;
    }
    ring_ = ring.take();
    metas_.resize(slots_);
    fds_ = std::move(setup_->fds);
    setup_->fds.clear();
    cursors_.resize(fds_.size());
    eof_.assign(fds_.size(), false);
    active_ = true;
    TH_INFO(log::kNet | log::kInit, "TCP connection from rank %d channel %d: %u socket(s), %zu x %zu-byte slots",
            p_.peer, p_.channel, nsocks_, slots_, slotBytes_);
  }

  // Reads every socket, then decides whether an orderly close (EOF) of some
  // sockets is fatal. A sender closes all its sockets after its last message,
  // and the parts of that message may still be in flight on the other sockets,
  // so EOF on one socket only stops that socket. It becomes an error when a
  // closed socket still owes bytes (a truncated message), or when everything
  // that was sent has arrived and the connection is closed (no more messages
  // can come; complete ones are still delivered first, see progress()).
  void drive() {
    activate();
    if (!active_ || !error_.isOk()) return;
    for (uint32_t i = 0; i < fds_.size(); ++i) {
      Status s = eof_[i] ? Status::ok() : readSocket(i);
      if (!s.isOk()) {
        error_ = s;
        TH_WARN("%s", s.message().c_str());
        return;
      }
    }
    bool idle = true;  // no socket owes bytes of a started message
    for (uint32_t i = 0; i < fds_.size(); ++i) {
      bool owes = i == 0 ? (cursors_[0].off > 0 || cursors_[0].msg < parsed_) : cursors_[i].msg < parsed_;
      if (owes && eof_[i]) {
        error_ = ioError(IoResult::kClosed, 0, i).withContext("in the middle of a message");
        TH_WARN("%s", error_.message().c_str());
        return;
      }
      idle &= !owes;
    }
    if (eof_[0] && idle)
      error_ = ioError(IoResult::kClosed, 0, 0)
                   .withContext("after " + std::to_string(parsed_) + " message(s), " + std::to_string(released_) +
                                " of them consumed");
  }

  Status ioError(IoResult r, int err, uint32_t i) const {
    if (r == IoResult::kClosed)
      return remoteError("rank %d closed its TCP connection (channel %d, socket %u)%s%s: the peer process exited or "
                         "failed",
                         p_.peer, p_.channel, i, err ? ": " : "", err ? strerror(err) : "");
    return errnoStatus(err, "receiving from rank %d (channel %d, socket %u)", p_.peer, p_.channel, i);
  }

  // Validates the header of message `parsed_` and gives it a slot, if one is free.
  Status parseHeader(bool* parsed) {
    *parsed = false;
    if (parsed_ - released_ >= slots_) return Status::ok();
    const wire::MessageHeader& h = header_;
    if (h.magic != wire::kMessageMagic || h.bytes > slotBytes_)
      return remoteError("rank %d sent a malformed message header on its TCP connection (channel %d): magic 0x%08x, "
                         "%llu bytes (slots hold %zu)",
                         p_.peer, p_.channel, h.magic, static_cast<unsigned long long>(h.bytes), slotBytes_);
    metas_[parsed_ % slots_] = {h.bytes, h.tag};
    ++parsed_;
    *parsed = true;
    return Status::ok();
  }

  Status readSocket(uint32_t i) {
    Cursor& c = cursors_[i];
    for (;;) {
      if (i == 0 && c.off == kHeader && c.msg == parsed_) {
        bool parsed;
        TH_CHECK(parseHeader(&parsed));
        if (!parsed) return Status::ok();  // no free slot yet
      }
      if (i > 0)
        while (c.msg < parsed_ && stripePart(metas_[c.msg % slots_].bytes, nsocks_, stripeMin_, i).bytes == 0) ++c.msg;
      if (!canRead(i)) return Status::ok();
      char* dst;
      uint64_t want;
      if (i == 0 && c.off < kHeader) {
        dst = reinterpret_cast<char*>(&header_) + c.off;
        want = kHeader - c.off;
      } else {
        StripePart part = stripePart(metas_[c.msg % slots_].bytes, nsocks_, stripeMin_, i);
        uint64_t got = c.off - (i == 0 ? kHeader : 0);
        dst = ring_.get() + (c.msg % slots_) * slotBytes_ + part.offset + got;
        want = part.bytes - got;
      }
      size_t n = 0;
      int err = 0;
      if (want > 0) {
        IoResult r = recvSome(fds_[i], dst, want, &n, &err);
        if (r == IoResult::kWouldBlock) return Status::ok();
        if (r == IoResult::kClosed && err == 0) {
          eof_[i] = true;  // orderly close: judged in drive()
          return Status::ok();
        }
        if (r != IoResult::kProgress) return ioError(r, err, i);
      }
      c.off += n;
      bool inHeader = i == 0 && c.off <= kHeader && !(c.off == kHeader && c.msg < parsed_);
      if (!inHeader) {
        StripePart part = stripePart(metas_[c.msg % slots_].bytes, nsocks_, stripeMin_, i);
        if (c.off == part.bytes + (i == 0 ? kHeader : 0)) {
          ++c.msg;
          c.off = 0;
        }
      }
    }
  }

  SocketParams p_;
  ConnectionCounters* counters_;
  std::shared_ptr<SocketSetup> setup_;
  std::thread thread_;
  bool active_ = false;
  std::vector<int> fds_;
  size_t slots_ = 0;
  size_t slotBytes_ = 0;
  uint32_t nsocks_ = 1;
  uint64_t stripeMin_ = 1;
  RingMemory ring_;
  std::vector<Meta> metas_;
  std::vector<Cursor> cursors_;
  std::vector<bool> eof_;         // the sender closed this socket
  wire::MessageHeader header_{};  // header of message cursors_[0].msg while it is read
  uint64_t parsed_ = 0;           // headers validated (messages with a slot)
  uint64_t released_ = 0;
  bool peeked_ = false;
  RecvMessage msg_;
  IntervalClock wait_;
  Status error_;
};

}  // namespace

SocketRecvHandle startSocketRecv(bootstrap::Bootstrap& boot, const SocketParams& params, Deadline deadline,
                                 const AbortFlag* abort, int64_t timeoutMs, ConnectionCounters* counters, WakeFn wake,
                                 void* wakeCtx) {
  auto* c = new SocketRecvConnection(boot, params, deadline, abort, timeoutMs, counters, wake, wakeCtx);
  SocketRecvHandle h;
  h.connection.reset(c);
  h.waitable = c;
  return h;
}

}  // namespace theseus::transport
