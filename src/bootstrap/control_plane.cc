// TcpBootstrap: out-of-band collectives, typed messages, liveness queries and
// data connections (the parts user threads call).
//
// allGather protocol (star through the leader). Calls are numbered per
// communicator (seq 1, 2, ...; every rank calls in the same order). A rank
// sends kAgContribution{seq, bytes} to the leader; the leader's own
// contribution goes straight into the round. When the round holds all nranks
// contributions the leader sends kAgResult{seq, all} to every rank and keeps a
// copy for itself. If a rank fails or leaves while a round waits for it, the
// leader sends kAgFailed{seq, why} instead, so nobody waits for the timeout.
// Non-leaders give up early when the leader itself fails or leaves.
#include <chrono>

#include "bootstrap/bootstrap_settings.h"
#include "bootstrap/root.h"
#include "bootstrap/tcp_bootstrap.h"
#include "common/log.h"

namespace theseus::bootstrap {

namespace {
constexpr auto kWaitSlice = std::chrono::milliseconds(20);
}  // namespace

Status TcpBootstrap::allGather(const std::string& mine, std::vector<std::string>* all) {
  if (!installed_.load(std::memory_order_acquire)) return internalError("allGather before the bootstrap was set up");
  if (all == nullptr) return invalidArgument("allGather: output is NULL");
  if (mine.size() > maxMessage_)
    return invalidArgument("allGather contribution of %zu bytes exceeds THESEUS_BOOTSTRAP_MAX_MSG_BYTES=%zu",
                           mine.size(), maxMessage_);
  std::lock_guard<std::mutex> serial(agMu_);
  const uint64_t seq = ++agSeq_;
  if (nranks_ == 1) {
    *all = {mine};
    return Status::ok();
  }
  const Wait wait = controlWait(timeoutMs());
  if (rank_ == 0) {
    addContribution(seq, 0, mine);
  } else {
    wire::Writer w;
    w.put<uint64_t>(seq);
    std::string payload = w.take() + mine;
    Status s = sendOnLink(0, wire::kAgContribution, payload, timeoutMs());
    if (!s.isOk()) {
      Status leader = checkPeerAlive(0, "the leader");
      return (leader.isOk() ? s : leader).withContext("out-of-band allGather #" + std::to_string(seq));
    }
  }
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (auto it = results_.find(seq); it != results_.end()) {
      Result<std::vector<std::string>> r = std::move(it->second);
      results_.erase(it);
      if (!r.isOk()) return r.status();
      *all = r.take();
      return Status::ok();
    }
    if (closed_.load()) return invalidUsage("the communicator's bootstrap was closed during an allGather");
    if (rank_ != 0 && (failed_.count(0) || departed_.count(0)))
      return remoteError("the leader (%s) %s during out-of-band allGather #%llu", rankName(0).c_str(),
                         failed_.count(0) ? "failed" : "left the communicator", static_cast<unsigned long long>(seq));
    if (wait.over()) {
      std::string what = "out-of-band allGather #" + std::to_string(seq);
      if (auto it = rounds_.find(seq); rank_ == 0 && it != rounds_.end()) {
        std::vector<int> missing;
        for (int r = 0; r < nranks_; ++r)
          if (!it->second.parts[r]) missing.push_back(r);
        what += " (" + describeRanks(missing) + " did not take part)";
        rounds_.erase(it);
      } else if (rank_ != 0) {
        what += " to complete at the leader (" + rankName(0) + ")";
      }
      return waitEnded(wait, what);
    }
    cv_.wait_for(lock, kWaitSlice);
  }
}

Status TcpBootstrap::barrier() {
  std::vector<std::string> ignored;
  return allGather(std::string(), &ignored);
}

void TcpBootstrap::addContribution(uint64_t seq, int from, std::string bytes) {
  std::vector<std::string> complete;
  std::string failure;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Round& round = rounds_[seq];
    if (round.parts.empty()) round.parts.resize(nranks_);
    if (round.parts[from]) {
      TH_INFO(log::kBootstrap, "Bootstrap: rank %d contributed twice to allGather #%llu; ignoring", from,
              static_cast<unsigned long long>(seq));
      return;
    }
    round.parts[from] = std::move(bytes);
    if (++round.have == nranks_) {
      for (auto& p : round.parts) complete.push_back(std::move(*p));
      rounds_.erase(seq);
    } else {
      // A round that waits for a rank already gone can never complete.
      for (int r = 0; r < nranks_ && failure.empty(); ++r)
        if (!round.parts[r] && (failed_.count(r) || departed_.count(r)))
          failure = rankName(r) + (failed_.count(r) ? " has failed" : " has left the communicator");
      if (!failure.empty()) rounds_.erase(seq);
    }
  }
  if (!failure.empty()) {
    finishRound(seq, remoteError("out-of-band allGather #%llu cannot complete: %s", static_cast<unsigned long long>(seq),
                                 failure.c_str()));
  } else if (!complete.empty()) {
    finishRound(seq, std::move(complete));
  }
}

void TcpBootstrap::failRoundsWaitingFor(int rank, const std::string& why) {
  std::vector<uint64_t> dead;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = rounds_.begin(); it != rounds_.end();) {
      if (!it->second.parts[rank]) {
        dead.push_back(it->first);
        it = rounds_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (uint64_t seq : dead)
    finishRound(seq, remoteError("out-of-band allGather #%llu cannot complete: %s",
                                 static_cast<unsigned long long>(seq), why.c_str()));
}

void TcpBootstrap::finishRound(uint64_t seq, Result<std::vector<std::string>> result) {
  wire::Writer w;
  w.put<uint64_t>(seq);
  if (result.isOk()) {
    size_t total = 0;
    for (const auto& p : result.value()) total += p.size() + 4;
    if (total > maxMessage_) {
      result = invalidArgument("out-of-band allGather #%llu: result of %zu bytes exceeds "
                               "THESEUS_BOOTSTRAP_MAX_MSG_BYTES=%zu", static_cast<unsigned long long>(seq), total,
                               maxMessage_);
    }
  }
  if (result.isOk()) {
    w.put<uint32_t>(static_cast<uint32_t>(nranks_));
    for (const auto& p : result.value()) w.putStr(p);
  } else {
    w.putStr(result.status().message());
  }
  const uint32_t type = result.isOk() ? wire::kAgResult : wire::kAgFailed;
  for (int r = 1; r < nranks_; ++r) {
    if (!links_[r] || links_[r]->down.load()) continue;
    Status s = sendOnLink(r, type, w.data(), timeoutMs());
    if (!s.isOk()) TH_INFO(log::kBootstrap, "Bootstrap: allGather result to rank %d: %s", r, s.message().c_str());
  }
  std::lock_guard<std::mutex> lock(mu_);
  results_.emplace(seq, std::move(result));
  cv_.notify_all();
}

Status TcpBootstrap::sendOnLink(int rank, uint32_t type, std::string_view payload, int64_t timeoutMs) {
  Link* link = (rank >= 0 && rank < static_cast<int>(links_.size())) ? links_[rank].get() : nullptr;
  if (link == nullptr) return internalError("no control link to rank %d", rank);
  std::lock_guard<std::mutex> lock(link->sendMu);
  if (link->down.load() || link->fd < 0) return remoteError("the control link to rank %d is down", rank);
  return wire::sendFrame(link->fd, type, payload, Wait::forMs(timeoutMs, options_.abort, parentAbort_),
                         "rank " + std::to_string(rank));
}

// ---------------------------------------------------------------- typed messages

void TcpBootstrap::setHandler(MsgType type, Handler handler) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    handlers_[static_cast<uint32_t>(type)] = std::move(handler);
  }
  wake();  // the control thread delivers what was queued for this type
}

Status TcpBootstrap::sendToLeader(MsgType type, std::string_view payload) {
  if (static_cast<uint32_t>(type) < wire::kFirstUserType)
    return invalidArgument("message type %u is reserved for the bootstrap", static_cast<unsigned>(type));
  if (payload.size() > maxMessage_) return invalidArgument("message of %zu bytes is too large", payload.size());
  if (!installed_.load(std::memory_order_acquire)) return internalError("bootstrap not set up");
  if (rank_ == 0) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      local_.emplace_back(static_cast<uint32_t>(type), 0, std::string(payload));
    }
    wake();
    return Status::ok();
  }
  return sendOnLink(0, static_cast<uint32_t>(type), payload, timeoutMs());
}

Status TcpBootstrap::sendToRank(int rank, MsgType type, std::string_view payload) {
  if (rank_ != 0) return invalidUsage("sendToRank is for the leader (rank 0); this is rank %d", rank_);
  if (rank < 0 || rank >= nranks_) return invalidArgument("sendToRank: rank %d out of range [0, %d)", rank, nranks_);
  if (static_cast<uint32_t>(type) < wire::kFirstUserType)
    return invalidArgument("message type %u is reserved for the bootstrap", static_cast<unsigned>(type));
  if (payload.size() > maxMessage_) return invalidArgument("message of %zu bytes is too large", payload.size());
  if (rank == 0) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      local_.emplace_back(static_cast<uint32_t>(type), 0, std::string(payload));
    }
    wake();
    return Status::ok();
  }
  TH_CHECK(checkPeerAlive(rank, "destination"));
  return sendOnLink(rank, static_cast<uint32_t>(type), payload, timeoutMs());
}

void TcpBootstrap::setPeerFailureCallback(std::function<void(int, const Status&)> callback, FailureListener listener) {
  std::lock_guard<std::mutex> lock(callbackMu_);  // none of them runs once this returns
  if (callback) failureCallbacks_[listener] = std::move(callback);
  else failureCallbacks_.erase(listener);
}

void TcpBootstrap::setPeerDepartureCallback(std::function<void(int)> callback) {
  std::lock_guard<std::mutex> lock(callbackMu_);
  departureCallback_ = std::move(callback);
}

int64_t TcpBootstrap::timeoutMs() const { return options_.timeoutMs > 0 ? options_.timeoutMs : bootstrapTimeoutMs(); }

int TcpBootstrap::parentRankOf(int rank) const {
  return rank >= 0 && rank < static_cast<int>(parentRanks_.size()) ? parentRanks_[static_cast<size_t>(rank)] : -1;
}

std::string TcpBootstrap::rankName(int rank) const {
  const int p = parentRankOf(rank);
  return "rank " + std::to_string(rank) + (p >= 0 ? " (parent rank " + std::to_string(p) + ")" : "");
}

std::vector<int> TcpBootstrap::failedRanks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failedOrder_;
}

std::vector<int> TcpBootstrap::departedRanks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::vector<int>(departed_.begin(), departed_.end());
}

Status TcpBootstrap::checkPeerAlive(int rank, const char* role) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (failed_.count(rank)) return remoteError("%s %s has failed", role, rankName(rank).c_str());
  if (departed_.count(rank)) return remoteError("%s %s has left the communicator", role, rankName(rank).c_str());
  if (closed_.load()) return invalidUsage("the communicator's bootstrap is closed");
  return Status::ok();
}

// ---------------------------------------------------------------- connections

Result<std::pair<int, wire::Hello>> TcpBootstrap::claimParked(wire::ConnKind kind, int from, uint64_t tag,
                                                              const Wait& wait, const std::string& what,
                                                              const std::function<Status()>& check) {
  const ParkKey key(static_cast<uint32_t>(kind), from, tag);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    auto it = parked_.find(key);
    while (it != parked_.end() && !it->second.empty()) {
      auto entry = it->second.front();
      it->second.pop_front();
      --parkedCount_;
      bool sameComm = entry.second.commHash == commHash_;
      if (kind != wire::ConnKind::kControl && !sameComm) {
        TH_INFO(log::kBootstrap, "Bootstrap: dropping a connection for another communicator");
        ::close(entry.first);
        continue;
      }
      return entry;
    }
    if (closed_.load()) return invalidUsage("the bootstrap was closed while waiting for %s", what.c_str());
    if (wait.over()) return waitEnded(wait, what);
    if (check) {
      lock.unlock();
      Status s = check();
      lock.lock();
      if (!s.isOk()) return s;
    }
    cv_.wait_for(lock, kWaitSlice);
  }
}

Result<int> TcpBootstrap::connectTo(int peer, uint32_t tag, Deadline deadline) {
  if (!installed_.load(std::memory_order_acquire)) return internalError("connectTo before the bootstrap was set up");
  if (peer < 0 || peer >= nranks_) return invalidArgument("connectTo: rank %d out of range [0, %d)", peer, nranks_);
  TH_CHECK(checkPeerAlive(peer, "peer"));
  SockAddr addr;
  TH_ASSIGN(addr, SockAddr::parse(peers_[peer].listenAddress));
  Wait wait{deadline, deadline.remainingMs(), options_.abort, parentAbort_};
  std::string who = rankName(peer);
  int fd;
  TH_ASSIGN(fd, bootstrap::connectTo(addr, wait, who, [&] { return checkPeerAlive(peer, "peer"); }));
  wire::Hello h;
  h.kind = static_cast<uint32_t>(wire::ConnKind::kData);
  h.commHash = commHash_;
  h.fromRank = rank_;
  h.tag = tag;
  Status s = wire::sendHello(fd, h, wait, who);
  if (!s.isOk()) {
    ::close(fd);
    return s;
  }
  return fd;
}

Result<int> TcpBootstrap::acceptFrom(int peer, uint32_t tag, Deadline deadline) {
  if (!installed_.load(std::memory_order_acquire)) return internalError("acceptFrom before the bootstrap was set up");
  if (peer < 0 || peer >= nranks_) return invalidArgument("acceptFrom: rank %d out of range [0, %d)", peer, nranks_);
  Wait wait{deadline, deadline.remainingMs(), options_.abort, parentAbort_};
  std::pair<int, wire::Hello> got;
  TH_ASSIGN(got, claimParked(wire::ConnKind::kData, peer, tag, wait,
                             "a data connection from rank " + std::to_string(peer) + " (tag " + std::to_string(tag) + ")",
                             [&] { return checkPeerAlive(peer, "peer"); }));
  setNonBlocking(got.first, false);
  return got.first;
}

}  // namespace theseus::bootstrap
