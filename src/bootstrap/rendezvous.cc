// Making a communicator's bootstrap: from unique ids (root rendezvous) or as a
// child of a parent (split, shrink).
//
// Both end the same way: the leader (rank 0) gathers one control link per
// rank. Every other rank connects to the leader, sends its hello and a
// LinkJoin {rank, nranks, commHash, PeerInfo}; the leader checks each (right
// rank, same communicator hash: for children the hash covers the parent, the
// child id and the member list, so ranks that disagree on the members are
// caught) and answers kTable with everybody's PeerInfo, or kError with the
// reason to everyone that joined. That answer is also the barrier that ends
// creation: when it arrives, every control link exists.
//
//  * From unique ids: the root(s) first hand every rank the table (root.h);
//    then the control links are made to the leader's listen socket (kControl).
//  * Children: no root. Members connect to the child leader (the first member)
//    through the *parent's* listen socket (kChildJoin, tagged with the child
//    id), where the parent's control thread parks them. Only members take
//    part, so ranks outside the child, dead or alive, are never waited for.
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <set>

#include "bootstrap/job_identity.h"
#include "bootstrap/bootstrap_settings.h"
#include "bootstrap/root.h"
#include "bootstrap/tcp_bootstrap.h"
#include "bootstrap/unique_id.h"
#include "common/log.h"

namespace theseus::bootstrap {
namespace {

constexpr int64_t kRootGraceMs = 5000;    // the root's own timeout started at the first join
constexpr int64_t kLeaderGraceMs = 2000;  // let the leader's explanation of a failure arrive
constexpr int64_t kProbeIntervalMs = 1000;

size_t maxTableBytes(int nranks) { return 4096 + static_cast<size_t>(nranks) * 512; }

int64_t timeoutOf(const InitOptions& options) {
  return options.timeoutMs > 0 ? options.timeoutMs : bootstrapTimeoutMs();
}

void closeAll(std::vector<int>& fds) {
  for (int& fd : fds) closeFd(&fd);
}

// Ranks -> root: returns the table once every rank joined.
Result<wire::Table> joinRoot(TcpBootstrap& b, const ncclUniqueId* ids, int nIds, int rank, int nranks,
                             int64_t timeoutMs) {
  const int rootIndex = rootOfRank(rank, nranks, nIds);
  RootId root;
  TH_ASSIGN(root, decodeRootId(ids[rootIndex]));
  if (root.fromEnv()) {
    if (nIds > 1) return invalidUsage("NCCL_COMM_ID allows a single unique id, not %d", nIds);
    if (rank == firstRankOfRoot(rootIndex, nranks, nIds)) {
      SockAddr bound;
      int fd;
      auto listening = listenOn(root.addr, &bound, /*reuseAddr=*/true);
      if (!listening.isOk()) return listening.status().withContext("starting the root at NCCL_COMM_ID");
      fd = listening.value();
      TH_CHECK(startRoot(fd, root.magic, bound, /*lingerOnFailure=*/false));
    }
  }
  wire::RootJoin j;
  j.rank = rank;
  j.nranks = nranks;
  j.nRoots = nIds;
  j.rootIndex = rootIndex;
  // An id made from NCCL_COMM_ID is the same for every job that names that address, so the
  // job's fingerprint joins its hash: a rank of another job is refused by the root. A random id
  // is shared only on purpose (by ncclCommGrow's joiners too, launched however they are).
  j.idsHash = hashIds(ids, nIds) ^ (root.fromEnv() ? jobFingerprint() : 0);
  j.root0Id.assign(ids[0].internal, sizeof(ids[0].internal));
  j.peer = b.selfInfo(rank);

  const std::string who = "the bootstrap root at " + root.addr.toString();
  Wait wait = b.controlWait(timeoutMs);
  int fd;
  TH_ASSIGN(fd, connectTo(root.addr, wait, who));
  wire::Hello h;
  h.magic = root.magic;
  h.kind = static_cast<uint32_t>(wire::ConnKind::kRootJoin);
  h.fromRank = rank;
  Status s = wire::sendHello(fd, h, wait, who);
  if (s.isOk()) s = wire::sendFrame(fd, wire::kJoin, wire::encodeRootJoin(j), wait, who);
  Result<wire::Frame> reply = s;
  if (s.isOk()) {
    wait.deadline = Deadline::afterMs(timeoutMs + kRootGraceMs);
    reply = wire::recvFrame(fd, maxTableBytes(nranks), wait, who);
  }
  ::close(fd);
  if (!reply.isOk()) return reply.status();
  if (reply.value().type != wire::kTable) return wire::failureOf(reply.value(), "the peer table");
  wire::Table t;
  TH_CHECK(wire::decodeTable(reply.value().payload, nranks, &t));
  if (t.peers[rank].listenAddress != j.peer.listenAddress)
    return remoteError("the root's table does not list this rank's address (another process used rank %d?)", rank);
  return t;
}

// Leader: one control link per member. Connections are claimed from `parkedAt`
// (the leader's own bootstrap, or the parent's for children) by (kind, fromRanks[i], tag).
Result<std::vector<PeerInfo>> gatherMembers(TcpBootstrap& parkedAt, wire::ConnKind kind, uint64_t tag,
                                            const std::vector<int>& fromRanks, uint64_t commHash, PeerInfo self,
                                            const Wait& wait, std::vector<int>* links, const char* unit,
                                            const std::vector<std::string>* probeAddresses = nullptr) {
  const int n = static_cast<int>(fromRanks.size());
  std::vector<PeerInfo> peers(n);
  peers[0] = self;
  links->assign(n, -1);
  Status failure;
  for (int i = 1; i < n && failure.isOk(); ++i) {
    std::string who = "rank " + std::to_string(i) + (kind == wire::ConnKind::kChildJoin
                                                         ? " (" + std::string(unit) + " rank " + std::to_string(fromRanks[i]) + ")"
                                                         : std::string());
    // Children: the parent's links tell whether a member died. Comms from unique ids have no
    // links yet; a member that got the table and died is found by probing its listen socket.
    Deadline nextProbe = Deadline::afterMs(kProbeIntervalMs);
    auto alive = [&]() -> Status {
      if (kind == wire::ConnKind::kChildJoin) return parkedAt.checkPeerAlive(fromRanks[i], unit);
      if (!nextProbe.expired() || probeAddresses == nullptr) return Status::ok();
      nextProbe = Deadline::afterMs(kProbeIntervalMs);
      const std::string& address = (*probeAddresses)[i];
      auto addr = SockAddr::parse(address);
      if (addr.isOk() && probeConnect(addr.value(), kProbeIntervalMs / 2) == ECONNREFUSED)
        return remoteError("%s of %d is gone: its bootstrap listener at %s refuses connections (did the process "
                           "exit?)", who.c_str(), n, address.c_str());
      return Status::ok();
    };
    auto claimed = parkedAt.claimParked(kind, fromRanks[i], tag, wait, who + " to join", alive);
    if (!claimed.isOk()) {
      failure = claimed.status();
      if ((failure.code() == ncclRemoteError || failure.code() == ncclTimeout) && wait.deadline.expired())
        failure = timeoutError("%s of %d never joined within %lld ms", who.c_str(), n,
                              static_cast<long long>(wait.timeoutMs));
      break;
    }
    int fd = claimed.value().first;
    (*links)[i] = fd;
    if (kind == wire::ConnKind::kControl && claimed.value().second.commHash != commHash) {
      failure = remoteError("%s connected for a different communicator", who.c_str());
      break;
    }
    auto frame = wire::recvFrame(fd, wire::kMaxRendezvousBytes, wait, who);
    wire::LinkJoin j;
    if (!frame.isOk()) failure = frame.status();
    else if (frame.value().type != wire::kJoin) failure = remoteError("%s: %s", who.c_str(), wire::describeUnexpected(frame.value(), "join").c_str());
    else failure = wire::decodeLinkJoin(frame.value().payload, &j);
    if (failure.isOk() && (j.rank != i || j.nranks != n || j.commHash != commHash))
      failure = invalidUsage("%s joined with a different view of the communicator (rank %d of %d, hash %#llx vs %#llx): "
                             "did every member pass the same arguments?", who.c_str(), j.rank, j.nranks,
                             static_cast<unsigned long long>(j.commHash), static_cast<unsigned long long>(commHash));
    if (failure.isOk()) peers[i] = j.peer;
  }
  const Wait replyWait = Wait::forMs(std::max<int64_t>(wait.deadline.remainingMs(), 2000));
  if (!failure.isOk()) {
    // Members after the one that failed may already be waiting, parked: they hear it too.
    for (int i = 1; i < n; ++i) {
      if ((*links)[i] >= 0) continue;
      auto parked = parkedAt.claimParked(kind, fromRanks[i], tag, Wait::forMs(0), "a member", nullptr);
      if (parked.isOk()) (*links)[i] = parked.value().first;
    }
    for (int i = 1; i < n; ++i)
      if ((*links)[i] >= 0) (void)wire::sendFrame((*links)[i], wire::failureFrameType(failure), failure.message(), replyWait, "a member");
    closeAll(*links);
    return failure;
  }
  wire::Table t;
  t.peers = peers;
  std::string table = wire::encodeTable(t);
  for (int i = 1; i < n; ++i) {
    Status s = wire::sendFrame((*links)[i], wire::kTable, table, replyWait, "rank " + std::to_string(i));
    if (!s.isOk()) {
      closeAll(*links);
      return s;
    }
  }
  return peers;
}

// Member: connects to the leader, introduces itself, waits for the table. `stillWanted` is
// asked between connection attempts and every 100 ms of the wait for the table (a member that
// died ends it: the leader may be waiting for that one).
Result<std::vector<PeerInfo>> joinLeader(const std::string& leaderAddress, const wire::Hello& hello,
                                         const wire::LinkJoin& join, const Wait& wait, int* linkFd,
                                         const std::function<Status()>& stillWanted) {
  SockAddr addr;
  TH_ASSIGN(addr, SockAddr::parse(leaderAddress));
  const std::string who = "the leader (rank 0) at " + leaderAddress;
  int fd;
  TH_ASSIGN(fd, connectTo(addr, wait, who, stillWanted));
  Status s = wire::sendHello(fd, hello, wait, who);
  if (s.isOk()) s = wire::sendFrame(fd, wire::kJoin, wire::encodeLinkJoin(join), wait, who);
  Result<wire::Frame> reply = s;
  if (s.isOk()) {
    Wait replyWait = wait;
    replyWait.deadline = Deadline::afterMs(wait.deadline.remainingMs() + kLeaderGraceMs);
    for (pollfd p{fd, POLLIN, 0}; stillWanted && s.isOk() && !replyWait.over(); p.revents = 0) {
      if (poll(&p, 1, static_cast<int>(replyWait.deadline.remainingMs(100))) > 0) break;
      s = stillWanted();
    }
    reply = s.isOk() ? wire::recvFrame(fd, maxTableBytes(join.nranks), replyWait, who) : Result<wire::Frame>(s);
  }
  wire::Table t;
  if (reply.isOk()) {
    if (reply.value().type != wire::kTable) s = wire::failureOf(reply.value(), "the peer table");
    else s = wire::decodeTable(reply.value().payload, join.nranks, &t);
  } else {
    s = reply.status();
  }
  if (!s.isOk()) {
    ::close(fd);
    return s;
  }
  *linkFd = fd;
  return t.peers;
}

Status validateIds(const ncclUniqueId* ids, int nIds, int rank, int nranks) {
  if (ids == nullptr) return invalidArgument("unique id list is NULL");
  if (nranks < 1) return invalidArgument("nranks %d must be at least 1", nranks);
  if (rank < 0 || rank >= nranks) return invalidArgument("rank %d out of range [0, %d)", rank, nranks);
  if (nIds < 1 || nIds > nranks) return invalidArgument("nId %d out of range [1, %d]", nIds, nranks);
  return Status::ok();
}

Result<std::unique_ptr<Bootstrap>> fromUniqueIds(const ncclUniqueId* ids, int nIds, int rank, int nranks,
                                                 const InitOptions& options) {
  TH_CHECK(validateIds(ids, nIds, rank, nranks));
  for (int i = 0; i < nIds; ++i) {
    auto id = decodeRootId(ids[i]);
    if (!id.isOk()) return id.status().withContext("unique id " + std::to_string(i));
  }
  NetInterface ni;
  TH_ASSIGN(ni, bootstrapInterface());
  std::unique_ptr<TcpBootstrap> b;
  TH_ASSIGN(b, TcpBootstrap::open(ni.addr, options, nullptr));
  const int64_t timeoutMs = timeoutOf(options);

  wire::Table table;
  TH_ASSIGN(table, joinRoot(*b, ids, nIds, rank, nranks, timeoutMs));
  const uint64_t commHash = wire::hashValue(table.nonce, hashIds(ids, nIds));

  const Wait wait = b->controlWait(timeoutMs);
  std::vector<int> links(nranks, -1);
  if (rank == 0 && nranks > 1) {
    std::vector<int> from(nranks);
    for (int r = 0; r < nranks; ++r) from[r] = r;
    std::vector<std::string> addresses;
    for (const auto& p : table.peers) addresses.push_back(p.listenAddress);
    std::vector<PeerInfo> got;
    TH_ASSIGN(got, gatherMembers(*b, wire::ConnKind::kControl, 0, from, commHash, table.peers[0], wait, &links, "rank",
                                 &addresses));
  } else if (rank != 0) {
    wire::Hello h;
    h.kind = static_cast<uint32_t>(wire::ConnKind::kControl);
    h.commHash = commHash;
    h.fromRank = rank;
    wire::LinkJoin j{rank, nranks, commHash, table.peers[rank]};
    std::vector<PeerInfo> got;
    TH_ASSIGN(got, joinLeader(table.peers[0].listenAddress, h, j, wait, &links[0], nullptr));
  }
  b->install(rank, commHash, std::move(table.peers), links);
  TH_INFO(log::kBootstrap | log::kInit, "Bootstrap: rank %d of %d ready (comm %#llx, %d host(s))", rank, nranks,
          static_cast<unsigned long long>(commHash), b->nodeCount());
  return std::unique_ptr<Bootstrap>(std::move(b));
}

Result<std::unique_ptr<Bootstrap>> child(Bootstrap& parentBase, const std::vector<int>& members, uint64_t childId,
                                         const InitOptions& options) {
  auto* parent = dynamic_cast<TcpBootstrap*>(&parentBase);
  if (parent == nullptr) return internalError("createChild: the parent is not a TCP bootstrap");
  const int n = static_cast<int>(members.size());
  std::set<int> seen;
  int me = -1;
  for (int i = 0; i < n; ++i) {
    int m = members[i];
    if (m < 0 || m >= parent->nranks() || !seen.insert(m).second)
      return invalidArgument("createChild: member list has an invalid or repeated rank %d", m);
    if (m == parent->rank()) me = i;
  }
  if (me < 0) return invalidArgument("createChild: rank %d is not among the members", parent->rank());
  const uint64_t membersHash = wire::hashBytes(members.data(), members.size() * sizeof(int));
  const uint64_t childHash = wire::hashValue(childId, wire::hashValue(membersHash, parent->commHash()));

  SockAddr bindAddr = parent->listenAddress();
  bindAddr.setPort(0);
  std::unique_ptr<TcpBootstrap> b;
  TH_ASSIGN(b, TcpBootstrap::open(bindAddr, options, parent->options().abort));
  const Wait wait = b->controlWait(timeoutOf(options));
  std::vector<int> links(n, -1);
  std::vector<PeerInfo> peers;
  if (n == 1) {
    peers = {b->selfInfo(0)};
  } else if (me == 0) {
    TH_ASSIGN(peers, gatherMembers(*parent, wire::ConnKind::kChildJoin, childId, members, childHash, b->selfInfo(0),
                                   wait, &links, "parent"));
  } else {
    wire::Hello h;
    h.kind = static_cast<uint32_t>(wire::ConnKind::kChildJoin);
    h.commHash = parent->commHash();
    h.fromRank = parent->rank();
    h.tag = childId;
    wire::LinkJoin j{me, n, childHash, b->selfInfo(me)};
    // Any member's death ends the wait, not only the leader's: the leader may be waiting for it.
    auto membersAlive = [&]() -> Status {
      for (int m : members)
        TH_CHECK(parent->checkPeerAlive(m, m == members[0] ? "the new communicator's leader, parent"
                                                           : "a member of the new communicator, parent"));
      return Status::ok();
    };
    TH_ASSIGN(peers, joinLeader(parent->peers()[members[0]].listenAddress, h, j, wait, &links[0], membersAlive));
  }
  b->setParentRanks(members);
  b->install(me, childHash, std::move(peers), links);
  TH_INFO(log::kBootstrap | log::kInit, "Bootstrap: child %#llx of comm %#llx: rank %d of %d ready",
          static_cast<unsigned long long>(childHash), static_cast<unsigned long long>(parent->commHash()), me, n);
  return std::unique_ptr<Bootstrap>(std::move(b));
}

// Whatever failed while the user aborted, the answer is "aborted".
template <typename T>
Result<T> unlessAborted(Result<T> r, const InitOptions& options, const AbortFlag* parentAbort) {
  if (r.isOk()) return r;
  if ((options.abort && options.abort->isSet()) || (parentAbort && parentAbort->isSet()))
    return invalidUsage("communicator aborted during initialisation (%s)", r.status().message().c_str());
  return r;
}

}  // namespace

Result<std::unique_ptr<Bootstrap>> createFromUniqueIds(const ncclUniqueId* ids, int nIds, int rank, int nranks,
                                                       const InitOptions& options) {
  raiseOpenFileLimit();
  return unlessAborted(fromUniqueIds(ids, nIds, rank, nranks, options), options, nullptr);
}

Result<std::unique_ptr<Bootstrap>> createChild(Bootstrap& parent, const std::vector<int>& members, uint64_t childId,
                                               const InitOptions& options) {
  auto* tcp = dynamic_cast<TcpBootstrap*>(&parent);
  return unlessAborted(child(parent, members, childId, options), options, tcp ? tcp->options().abort : nullptr);
}

}  // namespace theseus::bootstrap
