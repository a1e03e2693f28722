// TcpBootstrap: creation, teardown, the atexit BYE hook and the control thread.
#include "bootstrap/tcp_bootstrap.h"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>

#include "bootstrap/bootstrap_settings.h"
#include "bootstrap/host_identity.h"
#include "bootstrap/root.h"
#include "common/log.h"

namespace theseus::bootstrap {

namespace {

constexpr int64_t kHelloTimeoutMs = 10000;  // an incoming connection must introduce itself within this
constexpr size_t kMaxParked = 4096;         // introduced connections nobody claimed yet
constexpr size_t kMaxQueuedPerType = 4096;  // messages waiting for a handler
constexpr int64_t kByeTimeoutMs = 500;
constexpr int64_t kNoticeTimeoutMs = 2000;

// Live bootstraps, for the atexit hook. Leaked on purpose: the hook runs during exit.
std::mutex& liveMutex() {
  static auto* m = new std::mutex;
  return *m;
}
std::set<TcpBootstrap*>& liveSet() {
  static auto* s = new std::set<TcpBootstrap*>;
  return *s;
}
void sayByeAtExit() {
  std::lock_guard<std::mutex> lock(liveMutex());
  for (TcpBootstrap* b : liveSet()) b->sayBye();
}

}  // namespace

TcpBootstrap::TcpBootstrap(int listenFd, const SockAddr& listenAddr, const InitOptions& options,
                           const AbortFlag* parentAbort)
    : options_(options), parentAbort_(parentAbort), listenFd_(listenFd), listenAddr_(listenAddr) {}

Result<std::unique_ptr<TcpBootstrap>> TcpBootstrap::open(const SockAddr& bindAddr, const InitOptions& options,
                                                         const AbortFlag* parentAbort) {
  SockAddr bound;
  int fd;
  TH_ASSIGN(fd, listenOn(bindAddr, &bound));
  std::unique_ptr<TcpBootstrap> b(new TcpBootstrap(fd, bound, options, parentAbort));
  b->maxMessage_ = maxMessageBytes();
  b->wakeFd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (b->wakeFd_ < 0) return errnoStatus(errno, "eventfd for the bootstrap control thread");
  try {
    b->control_ = std::thread(&TcpBootstrap::controlLoop, b.get());
  } catch (const std::system_error& e) {
    return systemError("cannot start the bootstrap control thread: %s", e.what());
  }
  return b;
}

TcpBootstrap::~TcpBootstrap() { shutdown(/*clean=*/true); }

PeerInfo TcpBootstrap::selfInfo(int rank) const {
  PeerInfo p;
  p.rank = rank;
  p.pid = getpid();
  p.cudaDev = options_.cudaDev;
  p.usesCuda = options_.usesCuda;
  p.gpuHash = options_.gpuHash;
  p.deviceSetting = options_.deviceSetting;
  p.hostHash = hostIdentity().hash;
  p.machineHash = hostIdentity().machineHash;
  p.hostname = hostIdentity().hostname.substr(0, wire::kMaxHostnameBytes);
  p.listenAddress = listenAddr_.toString();
  return p;
}

void TcpBootstrap::install(int rank, uint64_t commHash, std::vector<PeerInfo> peers, const std::vector<int>& links) {
  rank_ = rank;
  nranks_ = static_cast<int>(peers.size());
  commHash_ = commHash;
  peers_ = std::move(peers);
  std::set<uint64_t> hosts;
  for (const auto& p : peers_) {
    hosts.insert(p.hostHash);
    if (p.hostHash == peers_[rank_].hostHash) {
      if (p.rank == rank_) localRank_ = static_cast<int>(localRanks_.size());
      localRanks_.push_back(p.rank);
    }
  }
  nodeCount_ = static_cast<int>(hosts.size());
  links_.resize(nranks_);
  for (int r = 0; r < nranks_; ++r)
    if (r < static_cast<int>(links.size()) && links[r] >= 0) {
      setNonBlocking(links[r], true);
      links_[r] = std::make_unique<Link>(r, links[r], maxMessage_);
    }
  installed_.store(true, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(liveMutex());
    static bool hooked = (atexit(sayByeAtExit), true);
    (void)hooked;
    liveSet().insert(this);
  }
  wake();
}

void TcpBootstrap::wake() {
  uint64_t one = 1;
  if (wakeFd_ >= 0) (void)!write(wakeFd_, &one, sizeof(one));
}

void TcpBootstrap::sayBye() {
  leaving_.store(true);
  if (!installed_.load(std::memory_order_acquire)) return;
  for (auto& link : links_) {
    if (!link) continue;
    std::lock_guard<std::mutex> lock(link->sendMu);
    if (link->down.load() || link->fd < 0) continue;
    (void)wire::sendFrame(link->fd, wire::kBye, "", Wait::forMs(kByeTimeoutMs), "rank " + std::to_string(link->peer));
    ::shutdown(link->fd, SHUT_WR);  // BYE then EOF: the peer sees a clean leave
  }
}

void TcpBootstrap::shutdown(bool clean) {
  if (closed_.exchange(true)) return;
  {
    std::lock_guard<std::mutex> lock(liveMutex());
    liveSet().erase(this);
  }
  if (clean) sayBye();
  leaving_.store(true);
  stop_.store(true);
  wake();
  if (control_.joinable()) {
    if (control_.get_id() == std::this_thread::get_id()) control_.detach();
    else control_.join();
  }
  for (auto& link : links_) {
    if (!link) continue;
    std::lock_guard<std::mutex> lock(link->sendMu);
    link->down.store(true);
    closeFd(&link->fd);
  }
  std::lock_guard<std::mutex> lock(mu_);
  closeFd(&listenFd_);
  closeFd(&wakeFd_);
  for (auto& p : pending_) closeFd(&p->fd);
  pending_.clear();
  for (auto& [key, q] : parked_)
    for (auto& [fd, h] : q) ::close(fd);
  parked_.clear();
  parkedCount_ = 0;
  cv_.notify_all();
}

// ---------------------------------------------------------------- control thread

void TcpBootstrap::controlLoop() {
  pthread_setname_np(pthread_self(), "th-bootstrap");
  std::vector<pollfd> fds;
  std::vector<Link*> polledLinks;
  while (!stop_.load()) {
    fds.clear();
    polledLinks.clear();
    fds.push_back({wakeFd_, POLLIN, 0});
    fds.push_back({admission_.pollFd(listenFd_), POLLIN, 0});
    for (auto& p : pending_) fds.push_back({p->fd, POLLIN, 0});
    if (installed_.load(std::memory_order_acquire)) {
      for (auto& link : links_)
        if (link && !link->down.load()) {
          fds.push_back({link->fd, POLLIN, 0});
          polledLinks.push_back(link.get());
        }
    }
    int r = poll(fds.data(), fds.size(), static_cast<int>(admission_.pollTimeoutMs(100)));
    if (stop_.load()) break;
    if (r < 0) continue;
    uint64_t drained;
    if (fds[0].revents) (void)!read(wakeFd_, &drained, sizeof(drained));
    flushQueued();
    const size_t nPending = pending_.size();
    for (size_t i = 0; i < nPending; ++i)
      if (fds[2 + i].revents || pending_[i]->deadline.expired()) readPending(*pending_[i]);
    for (size_t i = 0; i < polledLinks.size(); ++i)
      if (fds[2 + nPending + i].revents) readLink(*polledLinks[i]);
    std::erase_if(pending_, [](const auto& p) { return p->fd < 0; });
    if (fds[1].revents) acceptIncoming();
    flushQueued();
  }
}

void TcpBootstrap::acceptIncoming() {
  admission_.acceptBatch(listenFd_, pending_, [](Pending& p) { p.deadline = Deadline::afterMs(kHelloTimeoutMs); });
}

void TcpBootstrap::readPending(Pending& p) {
  if (p.deadline.expired()) {
    TH_INFO(log::kBootstrap, "Bootstrap: dropping a connection that sent no hello within %lld ms",
            static_cast<long long>(kHelloTimeoutMs));
    return closeFd(&p.fd);
  }
  // Read exactly the hello: what follows belongs to whoever claims the connection.
  ssize_t n = recv(p.fd, reinterpret_cast<char*>(&p.hello) + p.have, sizeof(p.hello) - p.have, MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return closeFd(&p.fd);
  if (n < 0) return;
  p.heard = true;
  p.have += static_cast<size_t>(n);
  if (p.have < sizeof(p.hello)) return;
  int fd = p.fd;
  p.fd = -1;
  parkOrDrop(fd, p.hello);
}

void TcpBootstrap::parkOrDrop(int fd, const wire::Hello& h) {
  auto drop = [&](const char* why) {
    TH_INFO(log::kBootstrap, "Bootstrap: dropping an incoming connection: %s", why);
    ::close(fd);
  };
  if (h.magic != wire::kProtocolMagic || h.version != wire::kProtocolVersion)
    return drop("foreign connection (wrong magic or protocol version)");
  auto kind = static_cast<wire::ConnKind>(h.kind);
  if (kind != wire::ConnKind::kControl && kind != wire::ConnKind::kData && kind != wire::ConnKind::kChildJoin)
    return drop("unknown connection kind");
  if (h.fromRank < 0) return drop("negative rank");
  if (installed_.load(std::memory_order_acquire)) {
    // Before install the communicator is not known yet: claimers check instead.
    if (kind == wire::ConnKind::kControl) return drop("control link after the communicator was set up");
    if (h.commHash != commHash_) return drop("connection for another communicator");
    if (h.fromRank >= nranks_) return drop("rank out of range");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (parkedCount_ >= kMaxParked) return drop("too many unclaimed connections");
  parked_[ParkKey(h.kind, h.fromRank, h.tag)].emplace_back(fd, h);
  ++parkedCount_;
  cv_.notify_all();
}

void TcpBootstrap::readLink(Link& link) {
  char buf[65536];
  for (int rounds = 0; rounds < 16 && !link.down.load(); ++rounds) {
    ssize_t n = recv(link.fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0) {
      return linkDown(link, link.bye ? "left" : "closed its control link without saying goodbye (process died?)");
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      return linkDown(link, std::string("control link error: ") + strerror(errno));
    }
    link.parser.append(buf, static_cast<size_t>(n));
    wire::Frame f;
    int got = 0;
    while (!link.down.load() && (got = link.parser.next(&f)) == 1) onFrame(link, f);
    if (!link.down.load() && got < 0) return linkDown(link, "sent a malformed control message: " + link.parser.error());
    if (static_cast<size_t>(n) < sizeof(buf)) return;
  }
}

void TcpBootstrap::linkDown(Link& link, const std::string& why) {
  if (link.down.load()) return;
  ::shutdown(link.fd, SHUT_RDWR);  // unblocks a sender holding sendMu
  {
    std::lock_guard<std::mutex> lock(link.sendMu);
    link.down.store(true);
    closeFd(&link.fd);
  }
  if (leaving_.load()) return;
  if (link.bye) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      departed_.insert(link.peer);
      cv_.notify_all();
    }
    TH_INFO(log::kBootstrap, "Bootstrap comm %#llx: rank %d left", static_cast<unsigned long long>(commHash_),
            link.peer);
    if (rank_ == 0) failRoundsWaitingFor(link.peer, rankName(link.peer) + " left the communicator");
    std::lock_guard<std::mutex> lock(callbackMu_);
    if (departureCallback_) departureCallback_(link.peer);
    return;
  }
  markFailed(link.peer, why, /*tellOthers=*/rank_ == 0);
}

void TcpBootstrap::markFailed(int rank, const std::string& why, bool tellOthers) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_.count(rank) || departed_.count(rank)) return;
    failed_.insert(rank);
    failedOrder_.push_back(rank);
    cv_.notify_all();
  }
  TH_INFO(log::kBootstrap | log::kInit, "Bootstrap comm %#llx rank %d: rank %d failed: %s",
          static_cast<unsigned long long>(commHash_), rank_, rank, why.c_str());
  if (rank_ == 0) failRoundsWaitingFor(rank, rankName(rank) + " failed: " + why);
  if (tellOthers) {
    wire::Writer w;
    w.put<int32_t>(rank).putStr(why);
    for (int r = 1; r < nranks_; ++r)
      if (r != rank && links_[r] && !links_[r]->down.load())
        (void)sendOnLink(r, wire::kPeerFailed, w.data(), kNoticeTimeoutMs);
  }
  std::lock_guard<std::mutex> lock(callbackMu_);
  for (auto& [listener, cb] : failureCallbacks_) cb(rank, remoteError("%s failed: %s", rankName(rank).c_str(), why.c_str()));
}

void TcpBootstrap::onFrame(Link& link, wire::Frame& f) {
  wire::Reader r(f.payload);
  switch (f.type) {
    case wire::kBye:
      link.bye = true;
      return;
    case wire::kAgContribution: {
      uint64_t seq;
      if (rank_ != 0 || !r.get(&seq)) break;
      addContribution(seq, link.peer, f.payload.substr(sizeof(seq)));
      return;
    }
    case wire::kAgResult: {
      uint64_t seq;
      uint32_t n;
      if (rank_ == 0 || !r.get(&seq) || !r.get(&n) || static_cast<int>(n) != nranks_) break;
      std::vector<std::string> parts(n);
      bool ok = true;
      for (auto& p : parts) ok = ok && r.getStr(&p, maxMessage_);
      if (!ok || !r.done()) break;
      std::lock_guard<std::mutex> lock(mu_);
      results_.emplace(seq, std::move(parts));
      cv_.notify_all();
      return;
    }
    case wire::kAgFailed: {
      uint64_t seq;
      std::string why;
      if (rank_ == 0 || !r.get(&seq) || !r.getStr(&why, maxMessage_)) break;
      std::lock_guard<std::mutex> lock(mu_);
      results_.emplace(seq, remoteError("%s", why.c_str()));
      cv_.notify_all();
      return;
    }
    case wire::kPeerFailed: {
      int32_t who;
      std::string why;
      if (rank_ == 0 || !r.get(&who) || !r.getStr(&why, 4096) || who < 0 || who >= nranks_) break;
      if (who != rank_) markFailed(who, why + " (reported by the leader)", /*tellOthers=*/false);
      return;
    }
    default:
      if (f.type >= wire::kFirstUserType) return deliver(f.type, link.peer, std::move(f.payload));
      break;
  }
  linkDown(link, "sent an unexpected or malformed control message (type " + std::to_string(f.type) + ")");
}

void TcpBootstrap::deliver(uint32_t type, int from, std::string payload) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& q = queued_[type];
    if (q.size() >= kMaxQueuedPerType) {
      TH_INFO(log::kBootstrap, "Bootstrap: no handler for message type %u; dropping the oldest queued one", type);
      q.pop_front();
    }
    q.emplace_back(from, std::move(payload));
  }
  flushQueued();
}

void TcpBootstrap::flushQueued() {
  for (;;) {
    Handler handler;
    int from = -1;
    std::string payload;
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (!local_.empty()) {
        auto& [type, src, bytes] = local_.front();
        auto& q = queued_[type];
        if (q.size() >= kMaxQueuedPerType) q.pop_front();
        q.emplace_back(src, std::move(bytes));
        local_.pop_front();
      }
      for (auto& [type, q] : queued_) {
        auto h = handlers_.find(type);
        if (q.empty() || h == handlers_.end() || !h->second) continue;
        handler = h->second;
        from = q.front().first;
        payload = std::move(q.front().second);
        q.pop_front();
        break;
      }
    }
    if (!handler) return;
    handler(from, payload);
  }
}

}  // namespace theseus::bootstrap
