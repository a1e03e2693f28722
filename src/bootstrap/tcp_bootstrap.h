// TcpBootstrap: the Bootstrap implementation over TCP.
//
// Each rank of each communicator owns one listen socket and one control thread.
// The control thread accepts every incoming connection, reads its 40-byte
// hello without blocking (a silent or garbage connection costs nothing but a
// slot until its 10 s hello deadline) and parks it by (kind, from-rank, tag)
// until the rendezvous code (control links) or acceptFrom (data) claims it.
// Wrong magic, wrong communicator, bad rank or kind: dropped.
//
// After the rendezvous, the control thread also reads the control links (the
// leader has one per rank, every other rank one to the leader) and:
//  * completes out-of-band allGather rounds (star through the leader: every
//    rank sends {seq, bytes}, the leader answers all contributions once it has
//    them; a rank that fails or leaves meanwhile fails the round everywhere);
//  * delivers typed messages to handlers (queued while no handler is set);
//  * keeps liveness: BYE then EOF is a clean leave; EOF without BYE, a read
//    error or a malformed frame marks the rank failed, the leader tells the
//    others (kPeerFailed) and the failure callback runs. A failure does not
//    stop the communicator: the engine decides what it means.
// A process that exits without destroying its communicators says BYE from an
// atexit hook, so its peers do not see a failure.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <tuple>

#include "bootstrap/admission.h"
#include "bootstrap/bootstrap.h"
#include "bootstrap/socket.h"
#include "bootstrap/wire.h"

namespace theseus::bootstrap {

class TcpBootstrap final : public Bootstrap {
 public:
  // A bootstrap listening on `bindAddr` (port 0 = any) with its control thread
  // running, before the rendezvous. `parentAbort` is also honoured (children).
  static Result<std::unique_ptr<TcpBootstrap>> open(const SockAddr& bindAddr, const InitOptions& options,
                                                    const AbortFlag* parentAbort);
  ~TcpBootstrap() override;

  int rank() const override { return rank_; }
  int nranks() const override { return nranks_; }
  uint64_t commHash() const override { return commHash_; }
  const std::vector<PeerInfo>& peers() const override { return peers_; }
  const std::vector<int>& localRanks() const override { return localRanks_; }
  int localRank() const override { return localRank_; }
  int nodeCount() const override { return nodeCount_; }

  Status allGather(const std::string& mine, std::vector<std::string>* all) override;
  Status barrier() override;
  void setHandler(MsgType type, Handler handler) override;
  Status sendToLeader(MsgType type, std::string_view payload) override;
  Status sendToRank(int rank, MsgType type, std::string_view payload) override;
  void setPeerFailureCallback(std::function<void(int rank, const Status& why)> callback,
                              FailureListener listener = FailureListener::kEpochs) override;
  void setPeerDepartureCallback(std::function<void(int rank)> callback) override;
  std::vector<int> failedRanks() const override;
  int parentRankOf(int rank) const override;
  std::vector<int> departedRanks() const override;
  Result<int> connectTo(int peer, uint32_t tag, Deadline deadline) override;
  Result<int> acceptFrom(int peer, uint32_t tag, Deadline deadline) override;
  void close() override { shutdown(/*clean=*/true); }
  void abandon() override { shutdown(/*clean=*/false); }

  // ---- rendezvous support (rendezvous.cc) ----
  const SockAddr& listenAddress() const { return listenAddr_; }
  const InitOptions& options() const { return options_; }
  // Its control-plane waits: InitOptions::timeoutMs, else THESEUS_BOOTSTRAP_TIMEOUT_MS.
  int64_t timeoutMs() const;
  // The wait of one rendezvous/control step: bootstrap timeout, abort flags.
  Wait controlWait(int64_t timeoutMs) const { return Wait::forMs(timeoutMs, options_.abort, parentAbort_); }
  // This rank's PeerInfo before the rendezvous (rank filled in by the caller).
  PeerInfo selfInfo(int rank) const;
  // Installs identity, table and the control links made by the rendezvous
  // (`links[r]`: a connected fd to rank r, or -1) and lets the control thread
  // watch them.
  void install(int rank, uint64_t commHash, std::vector<PeerInfo> peers, const std::vector<int>& links);
  // A child's ranks in its parent, set before install().
  void setParentRanks(std::vector<int> parentRanks) { parentRanks_ = std::move(parentRanks); }
  // "rank 2", or "rank 2 (parent rank 5)" in a child, for messages.
  std::string rankName(int rank) const;
  // Takes a parked incoming connection (non-blocking fd) with its hello.
  Result<std::pair<int, wire::Hello>> claimParked(wire::ConnKind kind, int from, uint64_t tag, const Wait& wait,
                                                  const std::string& what, const std::function<Status()>& check);
  // Error if `rank` failed or left (used to stop waiting for it early).
  Status checkPeerAlive(int rank, const char* role) const;
  // Sends BYE on every link so peers see a clean leave (atexit, close).
  void sayBye();

 private:
  // A control link to one rank.
  struct Link {
    Link(int p, int f, size_t maxMessage) : peer(p), fd(f), parser(maxMessage) {}
    int peer;
    int fd;                     // closed under sendMu
    std::mutex sendMu;
    wire::FrameParser parser;   // control thread only
    bool bye = false;           // control thread only: the peer said BYE
    std::atomic<bool> down{false};
  };
  // An incoming connection still sending its hello.
  struct Pending {
    int fd = -1;
    wire::Hello hello{};
    size_t have = 0;
    Deadline deadline;
    bool heard = false;  // sent at least one byte (admission.h)
  };
  // Leader: one allGather round being collected.
  struct Round {
    std::vector<std::optional<std::string>> parts;
    int have = 0;
  };
  using ParkKey = std::tuple<uint32_t, int, uint64_t>;

  TcpBootstrap(int listenFd, const SockAddr& listenAddr, const InitOptions& options, const AbortFlag* parentAbort);
  void shutdown(bool clean);
  void wake();

  // Control thread (tcp_bootstrap.cc).
  void controlLoop();
  void acceptIncoming();
  void readPending(Pending& p);
  void parkOrDrop(int fd, const wire::Hello& h);
  void readLink(Link& link);
  void onFrame(Link& link, wire::Frame& f);
  void linkDown(Link& link, const std::string& why);
  void markFailed(int rank, const std::string& why, bool tellOthers);
  void deliver(uint32_t type, int from, std::string payload);
  void flushQueued();

  // Out-of-band collectives (control_plane.cc).
  void addContribution(uint64_t seq, int from, std::string bytes);
  void failRoundsWaitingFor(int rank, const std::string& why);
  void finishRound(uint64_t seq, Result<std::vector<std::string>> result);
  Status sendOnLink(int rank, uint32_t type, std::string_view payload, int64_t timeoutMs);

  // Fixed at creation.
  InitOptions options_;
  const AbortFlag* parentAbort_ = nullptr;
  int listenFd_ = -1;
  SockAddr listenAddr_;
  int wakeFd_ = -1;
  size_t maxMessage_ = 0;

  // Fixed by install().
  int rank_ = -1;
  int nranks_ = 0;
  uint64_t commHash_ = 0;
  std::vector<PeerInfo> peers_;
  std::vector<int> localRanks_;
  int localRank_ = 0;
  int nodeCount_ = 0;
  std::vector<int> parentRanks_;  // a child's members in the parent (empty: not a child)
  std::vector<std::unique_ptr<Link>> links_;  // by rank; null where there is no link
  std::atomic<bool> installed_{false};

  // Shared with the control thread.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> leaving_{false};  // BYE sent: later link losses are not failures
  std::atomic<bool> closed_{false};
  std::vector<std::unique_ptr<Pending>> pending_;  // oldest first
  static constexpr size_t kMaxPending = 256;  // connections still introducing themselves
  Admission admission_{"Bootstrap", kMaxPending};
  std::map<ParkKey, std::deque<std::pair<int, wire::Hello>>> parked_;
  size_t parkedCount_ = 0;
  std::set<int> failed_;
  std::vector<int> failedOrder_;  // failed_ in the order this rank learnt of them (the leader's, relayed)
  std::set<int> departed_;
  std::map<uint32_t, Handler> handlers_;
  std::map<uint32_t, std::deque<std::pair<int, std::string>>> queued_;  // messages waiting for a handler
  std::deque<std::tuple<uint32_t, int, std::string>> local_;           // messages to self
  std::mutex callbackMu_;  // held while callbacks run, so removing one waits for them
  std::map<FailureListener, std::function<void(int, const Status&)>> failureCallbacks_;
  std::function<void(int)> departureCallback_;  // under callbackMu_
  std::map<uint64_t, Round> rounds_;                                    // leader: open allGather rounds
  std::map<uint64_t, Result<std::vector<std::string>>> results_;        // finished rounds not yet collected

  std::mutex agMu_;       // one allGather at a time per communicator
  uint64_t agSeq_ = 0;    // guarded by agMu_
  std::thread control_;
};

}  // namespace theseus::bootstrap
