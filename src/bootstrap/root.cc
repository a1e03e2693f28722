#include "bootstrap/root.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "bootstrap/admission.h"
#include "bootstrap/bootstrap_settings.h"
#include "bootstrap/unique_id.h"
#include "bootstrap/wire.h"
#include "common/log.h"

namespace theseus::bootstrap {
namespace {

constexpr int64_t kHelloTimeoutMs = 10000;  // a connection must introduce itself within this
constexpr int64_t kReplyTimeoutMs = 10000;  // sending a reply to one rank
constexpr size_t kMaxIncoming = 256;        // connections still introducing themselves (admission.h)
constexpr size_t kMaxForwardBytes = 256u << 20;
constexpr int64_t kFailureLingerMs = 10000;  // a failed rendezvous still answers late ranks this long

// A connection that has not finished its hello and first frame.
struct Incoming {
  int fd = -1;
  wire::Hello hello{};
  size_t helloHave = 0;
  std::optional<wire::FrameParser> parser;
  Deadline deadline = Deadline::afterMs(kHelloTimeoutMs);
  bool heard = false;  // sent at least one byte
};

struct Member {
  int fd = -1;
  PeerInfo peer;
};

std::string encodeForward(int rootIndex, int nranks, int nRoots, uint64_t idsHash, const std::map<int, Member>& m) {
  wire::Writer w;
  w.put<int32_t>(rootIndex).put<int32_t>(nranks).put<int32_t>(nRoots).put<uint64_t>(idsHash);
  w.put<uint32_t>(static_cast<uint32_t>(m.size()));
  for (const auto& [rank, member] : m) wire::putPeer(w, member.peer);
  return w.take();
}

class RootService {
 public:
  RootService(int fd, uint64_t magic, SockAddr addr, bool linger)
      : listenFd_(fd), magic_(magic), addr_(addr), linger_(linger) {}
  ~RootService() { closeEverything(); }
  void run();

 private:
  void pollOnce();
  void acceptAll();
  void readIncoming(Incoming& c);
  void onFrame(Incoming& c, wire::Frame& f);
  void onJoin(int fd, const wire::RootJoin& j);
  void onForward(int fd, const wire::Frame& f);
  void onForwardPayload(int fd, const std::string& payload);
  void reject(int fd, const std::string& why);
  void checkLiveness(int fd, const std::string& who);
  bool shareComplete() const { return static_cast<int>(members_.size()) == ranksOfRoot(rootIndex_, nranks_, nRoots_); }
  bool allComplete() const { return static_cast<int>(members_.size() + forwarded_.size()) == nranks_; }
  void finishSuccess();
  void forwardToRoot0();
  void finishFailure(const std::string& why, uint32_t frameType = wire::kError);
  void sendToAll(uint32_t type, const std::string& payload);
  std::string missingMessage() const;
  void closeEverything();

  int listenFd_;
  uint64_t magic_;
  SockAddr addr_;
  bool linger_;
  std::vector<std::unique_ptr<Incoming>> incoming_;  // oldest first
  Admission admission_{"Bootstrap root", kMaxIncoming};
  bool started_ = false;
  bool done_ = false;
  // After a failure: the reason, for ranks that join late (see finishFailure).
  bool failed_ = false;
  std::string failedWhy_;
  uint32_t failedType_ = wire::kError;
  std::set<int> answered_;
  Deadline deadline_ = Deadline::afterMs(rootTtlMs());
  int64_t timeoutMs_ = bootstrapTimeoutMs();
  int nranks_ = 0, nRoots_ = 0, rootIndex_ = -1;
  uint64_t idsHash_ = 0;
  std::string root0Id_;
  std::map<int, Member> members_;       // this root's share, by rank
  std::map<int, PeerInfo> forwarded_;   // root 0: ranks reported by the other roots
  std::map<int, int> forwardFds_;       // root 0: root index -> connection
  // Root 0: reports of other roots that arrived before any rank of root 0 joined
  // (nothing to check them against yet); handled at the first join.
  std::vector<std::pair<int, std::string>> earlyForwards_;
};

void RootService::run() {
  TH_INFO(log::kBootstrap, "Bootstrap root %s: waiting for ranks", addr_.toString().c_str());
  while (!done_) {
    if (deadline_.expired()) {
      if (failed_) break;
      if (started_) {
        finishFailure(missingMessage(), wire::kTimedOut);
      } else {
        TH_INFO(log::kBootstrap, "Bootstrap root %s: no rank joined within THESEUS_BOOTSTRAP_ROOT_TTL_MS; closing",
                addr_.toString().c_str());
        done_ = true;
      }
      break;
    }
    pollOnce();
    if (done_ || !started_ || failed_) continue;
    if (nRoots_ > 1 && rootIndex_ > 0) {
      if (shareComplete()) forwardToRoot0();
    } else if (allComplete()) {
      finishSuccess();
    }
  }
  closeEverything();
}

void RootService::pollOnce() {
  std::vector<pollfd> fds;
  fds.push_back({admission_.pollFd(listenFd_), POLLIN, 0});
  for (auto& c : incoming_) fds.push_back({c->fd, POLLIN, 0});
  // Snapshot who is watched: handling one event may add members.
  std::vector<std::pair<std::string, int>> watched;
  for (auto& [rank, m] : members_) watched.emplace_back("rank " + std::to_string(rank), m.fd);
  for (auto& [root, fd] : forwardFds_) watched.emplace_back("root " + std::to_string(root), fd);
  size_t watchBase = fds.size();
  for (auto& w : watched) fds.push_back({w.second, POLLIN, 0});
  int r = poll(fds.data(), fds.size(), static_cast<int>(admission_.pollTimeoutMs(deadline_.remainingMs(100))));
  if (r < 0) return;
  // A joined rank never sends anything until it gets the table: readable means it died or misbehaves.
  for (size_t i = 0; i < watched.size() && !done_; ++i)
    if (fds[watchBase + i].revents) checkLiveness(watched[i].second, watched[i].first);
  const size_t polledIncoming = incoming_.size();
  for (size_t i = 0; i < polledIncoming && !done_; ++i)
    if (fds[1 + i].revents || incoming_[i]->deadline.expired()) readIncoming(*incoming_[i]);
  std::erase_if(incoming_, [](const auto& c) { return c->fd < 0; });
  if (fds[0].revents && !done_) acceptAll();
}

void RootService::acceptAll() {
  admission_.acceptBatch(listenFd_, incoming_, [](Incoming&) {});
}

void RootService::readIncoming(Incoming& c) {
  auto drop = [&](const char* why) {
    TH_INFO(log::kBootstrap, "Bootstrap root: dropping a connection: %s", why);
    closeFd(&c.fd);
  };
  if (c.deadline.expired()) return drop("it did not introduce itself in time");
  char buf[65536];
  ssize_t n;
  if (c.helloHave < sizeof(c.hello)) {
    n = recv(c.fd, reinterpret_cast<char*>(&c.hello) + c.helloHave, sizeof(c.hello) - c.helloHave, MSG_DONTWAIT);
    if (n == 0) return drop("closed before its hello");
    if (n < 0) return (errno == EAGAIN || errno == EINTR) ? void() : drop("read error");
    c.heard = true;
    c.helloHave += static_cast<size_t>(n);
    if (c.helloHave < sizeof(c.hello)) return;
    if (c.hello.magic != magic_) return drop("wrong magic (not for this unique id)");
    auto kind = static_cast<wire::ConnKind>(c.hello.kind);
    if (c.hello.version != wire::kProtocolVersion ||
        (kind != wire::ConnKind::kRootJoin && kind != wire::ConnKind::kRootForward))
      return drop("unknown protocol version or connection kind");
    c.parser.emplace(kind == wire::ConnKind::kRootJoin ? wire::kMaxRendezvousBytes : kMaxForwardBytes);
  }
  n = recv(c.fd, buf, sizeof(buf), MSG_DONTWAIT);
  if (n == 0) return drop("closed before its join message");
  if (n < 0) return (errno == EAGAIN || errno == EINTR) ? void() : drop("read error");
  c.parser->append(buf, static_cast<size_t>(n));
  wire::Frame f;
  int got = c.parser->next(&f);
  if (got < 0) return drop(c.parser->error().c_str());
  if (got == 0) return;
  onFrame(c, f);
}

void RootService::onFrame(Incoming& c, wire::Frame& f) {
  int fd = c.fd;
  c.fd = -1;  // ownership moves on (or the fd is closed below)
  auto kind = static_cast<wire::ConnKind>(c.hello.kind);
  if (kind == wire::ConnKind::kRootForward && (f.type == wire::kError || f.type == wire::kTimedOut)) {
    ::close(fd);
    return finishFailure(f.payload.substr(0, 4096), f.type);
  }
  if (f.type != wire::kJoin) {
    TH_INFO(log::kBootstrap, "Bootstrap root: dropping a connection that sent message type %u", f.type);
    ::close(fd);
    return;
  }
  if (kind == wire::ConnKind::kRootForward) return onForward(fd, f);
  wire::RootJoin j;
  Status s = wire::decodeRootJoin(f.payload, &j);
  if (!s.isOk()) return reject(fd, s.message());
  onJoin(fd, j);
}

void RootService::onJoin(int fd, const wire::RootJoin& j) {
  if (failed_) {
    (void)wire::sendFrame(fd, failedType_, failedWhy_, Wait::forMs(1000), "a late rank");
    ::close(fd);
    answered_.insert(j.rank);
    if (static_cast<int>(answered_.size()) >= ranksOfRoot(rootIndex_, nranks_, nRoots_)) done_ = true;
    return;
  }
  if (!started_) {
    if (rootOfRank(j.rank, j.nranks, j.nRoots) != j.rootIndex)
      return reject(fd, "rank " + std::to_string(j.rank) + " does not belong to root " + std::to_string(j.rootIndex));
    started_ = true;
    nranks_ = j.nranks, nRoots_ = j.nRoots, rootIndex_ = j.rootIndex;
    idsHash_ = j.idsHash;
    root0Id_ = j.root0Id;
    deadline_ = Deadline::afterMs(timeoutMs_);
    std::vector<std::pair<int, std::string>> early;
    early.swap(earlyForwards_);
    for (auto& [efd, payload] : early) onForwardPayload(efd, payload);
  }
  char why[512] = "";
  if (j.nranks != nranks_ || j.nRoots != nRoots_ || j.rootIndex != rootIndex_ || j.idsHash != idsHash_)
    snprintf(why, sizeof(why), "rank %d joined with nranks %d / %d unique id(s) / root %d, but the first rank "
             "used nranks %d / %d / root %d (or different ids, or it belongs to another job: THESEUS_JOB_ID, "
             "TORCHELASTIC_RUN_ID, SLURM_JOB_ID/SLURM_STEP_ID, OMPI_MCA_ess_base_jobid and PMIX_NAMESPACE must "
             "be equal on all ranks)", j.rank, j.nranks, j.nRoots, j.rootIndex, nranks_, nRoots_, rootIndex_);
  else if (rootOfRank(j.rank, nranks_, nRoots_) != rootIndex_)
    snprintf(why, sizeof(why), "rank %d does not belong to root %d", j.rank, rootIndex_);
  else if (members_.count(j.rank)) {
    // Two processes claim one rank: two jobs share this rendezvous (the same NCCL_COMM_ID, say) or a
    // launcher gave one rank twice. Either way the communicator could mix them: nobody may succeed.
    const PeerInfo& first = members_[j.rank].peer;
    std::string both = "two processes joined as rank " + std::to_string(j.rank) + " of " + std::to_string(nranks_) +
                       " (" + first.hostname + " pid " + std::to_string(first.pid) + ", then " + j.peer.hostname +
                       " pid " + std::to_string(j.peer.pid) + "): another job uses the same unique id or NCCL_COMM_ID "
                       "address, or two processes were given the same rank";
    reject(fd, both);
    return finishFailure(both);
  }
  if (why[0]) return reject(fd, why);
  TH_TRACE(log::kBootstrap, "Bootstrap root: rank %d of %d joined from %s", j.rank, nranks_,
           j.peer.listenAddress.c_str());
  members_[j.rank] = Member{fd, j.peer};
}

void RootService::onForward(int fd, const wire::Frame& f) {
  if (failed_) {
    (void)wire::sendFrame(fd, failedType_, failedWhy_, Wait::forMs(1000), "a late root");
    ::close(fd);
    return;
  }
  if (!started_) {
    earlyForwards_.emplace_back(fd, f.payload);
    return;
  }
  onForwardPayload(fd, f.payload);
}

void RootService::onForwardPayload(int fd, const std::string& payload) {
  wire::Reader r(payload);
  int32_t root, nranks, nRoots;
  uint64_t idsHash;
  uint32_t n;
  bool ok = r.get(&root) && r.get(&nranks) && r.get(&nRoots) && r.get(&idsHash) && r.get(&n);
  ok = ok && started_ && rootIndex_ == 0 && nranks == nranks_ && nRoots == nRoots_ && idsHash == idsHash_ &&
       root > 0 && root < nRoots_ && !forwardFds_.count(root) && static_cast<int>(n) == ranksOfRoot(root, nranks, nRoots);
  std::map<int, PeerInfo> got;
  for (uint32_t i = 0; ok && i < n; ++i) {
    PeerInfo p;
    ok = wire::getPeer(r, &p) && p.rank >= 0 && p.rank < nranks_ && rootOfRank(p.rank, nranks_, nRoots_) == root &&
         !got.count(p.rank);
    if (ok) got[p.rank] = p;
  }
  if (!ok || !r.done()) return reject(fd, "inconsistent report from another root");
  forwardFds_[root] = fd;
  forwarded_.merge(got);
}

void RootService::reject(int fd, const std::string& why) {
  TH_INFO(log::kBootstrap, "Bootstrap root: rejecting a join: %s", why.c_str());
  (void)wire::sendFrame(fd, wire::kError, why, Wait::forMs(1000), "a rejected rank");
  ::close(fd);
}

void RootService::checkLiveness(int fd, const std::string& who) {
  char c;
  ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  finishFailure(who + (n > 0 ? " sent unexpected data to the bootstrap root"
                             : " closed its connection to the bootstrap root before all ranks joined "
                               "(did the process exit?)"));
}

std::string RootService::missingMessage() const {
  std::vector<int> missing;
  for (int r = 0; r < nranks_; ++r) {
    int root = rootOfRank(r, nranks_, nRoots_);
    bool seen = root == rootIndex_ ? members_.count(r) > 0 : forwarded_.count(r) > 0;
    if (!seen) missing.push_back(r);
  }
  return describeRanks(missing) + " of " + std::to_string(nranks_) + " never joined within " +
         std::to_string(timeoutMs_) + " ms (THESEUS_BOOTSTRAP_TIMEOUT_MS)";
}

void RootService::sendToAll(uint32_t type, const std::string& payload) {
  for (auto& [rank, m] : members_) {
    Status s = wire::sendFrame(m.fd, type, payload, Wait::forMs(kReplyTimeoutMs), "rank " + std::to_string(rank));
    if (!s.isOk()) TH_INFO(log::kBootstrap, "Bootstrap root: %s", s.message().c_str());
  }
  for (auto& [root, fd] : forwardFds_) {
    Status s = wire::sendFrame(fd, type, payload, Wait::forMs(kReplyTimeoutMs), "root " + std::to_string(root));
    if (!s.isOk()) TH_INFO(log::kBootstrap, "Bootstrap root: %s", s.message().c_str());
  }
}

void RootService::finishSuccess() {
  closeFd(&listenFd_);  // nobody else may join this communicator
  wire::Table t;
  t.nonce = randomU64();
  for (auto& [rank, m] : members_) forwarded_[rank] = m.peer;
  for (auto& [rank, p] : forwarded_) t.peers.push_back(p);
  sendToAll(wire::kTable, wire::encodeTable(t));
  TH_INFO(log::kBootstrap, "Bootstrap root %s: all %d ranks joined", addr_.toString().c_str(), nranks_);
  done_ = true;
}

void RootService::forwardToRoot0() {
  closeFd(&listenFd_);
  ncclUniqueId id0;
  memcpy(id0.internal, root0Id_.data(), sizeof(id0.internal));
  auto root0 = decodeRootId(id0);
  if (!root0.isOk()) return finishFailure("unique id 0 is invalid: " + root0.status().message());
  Wait wait{deadline_, timeoutMs_};
  auto fdr = connectTo(root0.value().addr, wait, "bootstrap root 0");
  if (!fdr.isOk()) return finishFailure(fdr.status().message());
  int fd = fdr.value();
  wire::Hello h;
  h.magic = root0.value().magic;
  h.kind = static_cast<uint32_t>(wire::ConnKind::kRootForward);
  h.fromRank = rootIndex_;
  std::string payload = encodeForward(rootIndex_, nranks_, nRoots_, idsHash_, members_);
  Status s = wire::sendHello(fd, h, wait, "bootstrap root 0");
  if (s.isOk()) s = wire::sendFrame(fd, wire::kJoin, payload, wait, "bootstrap root 0");
  // Root 0 answers when everyone joined or its own timeout passes; allow for the clock skew.
  Result<wire::Frame> reply = s.isOk() ? wire::recvFrame(fd, kMaxForwardBytes, Wait::forMs(timeoutMs_ + 5000), "bootstrap root 0")
                                       : Result<wire::Frame>(s);
  ::close(fd);
  if (!reply.isOk()) return finishFailure(reply.status().message());
  if (reply.value().type != wire::kTable) return finishFailure(wire::describeUnexpected(reply.value(), "table"));
  sendToAll(wire::kTable, reply.value().payload);
  done_ = true;
}

void RootService::finishFailure(const std::string& why, uint32_t frameType) {
  TH_INFO(log::kBootstrap, "Bootstrap root %s: communicator creation failed: %s", addr_.toString().c_str(),
          why.c_str());
  // A root that does not linger frees its address before anyone hears of the failure, so a
  // rank that retries at once (same NCCL_COMM_ID) can bind it again.
  if (!linger_) closeFd(&listenFd_);
  sendToAll(frameType, why);
  if (rootIndex_ > 0 && !root0Id_.empty()) {
    // Tell root 0 so its ranks fail now rather than at their timeout.
    ncclUniqueId id0;
    memcpy(id0.internal, root0Id_.data(), sizeof(id0.internal));
    if (auto root0 = decodeRootId(id0); root0.isOk()) {
      Wait wait = Wait::forMs(2000);
      if (auto fd = connectTo(root0.value().addr, wait, "bootstrap root 0"); fd.isOk()) {
        wire::Hello h;
        h.magic = root0.value().magic;
        h.kind = static_cast<uint32_t>(wire::ConnKind::kRootForward);
        h.fromRank = rootIndex_;
        if (wire::sendHello(fd.value(), h, wait, "root 0").isOk())
          (void)wire::sendFrame(fd.value(), frameType, "root " + std::to_string(rootIndex_) + ": " + why, wait, "root 0");
        ::close(fd.value());
      }
    }
  }
  // Ranks that have not joined yet would find the port closed and retry until their own
  // timeout, never learning why: the root keeps answering them with the reason until every
  // rank of its share has heard it, its deadline passes, or kFailureLingerMs (see startRoot).
  if (!linger_) {
    done_ = true;
    return;
  }
  failed_ = true;
  failedWhy_ = why;
  failedType_ = frameType;
  for (auto& [rank, m] : members_) {
    answered_.insert(rank);
    closeFd(&m.fd);
  }
  members_.clear();
  for (auto& [root, fd] : forwardFds_) closeFd(&fd);
  forwardFds_.clear();
  if (started_ && static_cast<int>(answered_.size()) >= ranksOfRoot(rootIndex_, nranks_, nRoots_)) done_ = true;
  if (!started_ || deadline_.remainingMs() > kFailureLingerMs) deadline_ = Deadline::afterMs(kFailureLingerMs);
}

void RootService::closeEverything() {
  closeFd(&listenFd_);
  for (auto& c : incoming_) closeFd(&c->fd);
  incoming_.clear();
  for (auto& [rank, m] : members_) closeFd(&m.fd);
  members_.clear();
  for (auto& [root, fd] : forwardFds_) closeFd(&fd);
  forwardFds_.clear();
  for (auto& [fd, payload] : earlyForwards_) closeFd(&fd);
  earlyForwards_.clear();
}

}  // namespace

std::string describeRanks(const std::vector<int>& ranks) {
  if (ranks.empty()) return "no rank";
  if (ranks.size() == 1) return "rank " + std::to_string(ranks[0]);
  std::string s = "ranks ";
  size_t shown = std::min<size_t>(ranks.size(), 16);
  for (size_t i = 0; i < shown; ++i) {
    if (i > 0) s += (i + 1 == ranks.size()) ? " and " : ", ";
    s += std::to_string(ranks[i]);
  }
  if (shown < ranks.size()) s += ", ... (" + std::to_string(ranks.size()) + " in all)";
  return s;
}

Status startRoot(int listenFd, uint64_t magic, const SockAddr& addr, bool lingerOnFailure) {
  try {
    std::thread([listenFd, magic, addr, lingerOnFailure] {
      RootService service(listenFd, magic, addr, lingerOnFailure);
      service.run();
    }).detach();
  } catch (const std::system_error& e) {
    ::close(listenFd);
    return systemError("cannot start the bootstrap root thread: %s", e.what());
  }
  return Status::ok();
}

}  // namespace theseus::bootstrap
