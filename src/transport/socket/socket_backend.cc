#include "transport/socket/socket_backend.h"

#include <algorithm>

namespace theseus::transport {

SocketBackend::~SocketBackend() {
  std::lock_guard lock(mu_);
  sockets_.clear();  // the connections (destroyed first, by the manager) left the pump
  pump_.reset();
}

void SocketBackend::assigned(const std::vector<bool>& mine) {
  peers_ = static_cast<int>(std::count(mine.begin(), mine.end(), true));
}

SocketParams SocketBackend::paramsFor(int peer, int channel) const {
  SocketParams p;
  p.rank = ctx_.rank;
  p.peer = peer;
  p.channel = channel;
  p.slots = ctx_.config.socketSlots;
  p.slotBytes = ctx_.config.socketSlotBytes;
  p.nsocks = ctx_.config.socketsPerConnection;
  p.stripeMinBytes = ctx_.config.stripeMinBytes;
  p.sendBuf = ctx_.config.socketSendBuf;
  p.recvBuf = ctx_.config.socketRecvBuf;
  return p;
}

Result<std::unique_ptr<SendConnection>> SocketBackend::connectSend(int peer, int channel,
                                                                   ConnectionCounters* counters) {
  std::lock_guard lock(mu_);
  if (pump_ == nullptr) pump_ = std::make_unique<SocketPump>(ctx_.wake, ctx_.wakeCtx);
  TH_ASSIGN(SocketSendHandle h, connectSocketSend(*ctx_.boot, paramsFor(peer, channel),
                                                  Deadline::afterMs(ctx_.connectTimeoutMs), ctx_.abort, counters,
                                                  pump_.get()));
  sockets_.push_back({h.waitable, peer, channel, false});
  count_.fetch_add(1);
  return std::move(h.connection);
}

Result<std::unique_ptr<RecvConnection>> SocketBackend::connectRecv(int peer, int channel,
                                                                   ConnectionCounters* counters) {
  std::lock_guard lock(mu_);
  // A lazy receive waits for the peer as long as the executor does (its stall
  // timeout), not the connect timeout: the peer may reach this step much later.
  SocketRecvHandle h = startSocketRecv(*ctx_.boot, paramsFor(peer, channel), Deadline::never(), ctx_.abort,
                                       ctx_.connectTimeoutMs, counters, ctx_.wake, ctx_.wakeCtx);
  sockets_.push_back({h.waitable, peer, channel, true});
  count_.fetch_add(1);
  return std::move(h.connection);
}

bool SocketBackend::addPollFds(std::vector<struct pollfd>* fds) {
  if (count_.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard lock(mu_);
  for (const Entry& e : sockets_) e.waitable->addPollFds(fds);
  return true;
}

std::string SocketBackend::pendingReceives(const std::vector<int>& peers, int channels) {
  std::lock_guard lock(mu_);
  std::string out;
  for (const Entry& e : sockets_) {
    if (!e.receive || e.channel >= channels || !e.waitable->settingUp()) continue;
    if (std::find(peers.begin(), peers.end(), e.peer) == peers.end()) continue;
    out += (out.empty() ? "" : ", ") + std::string("rank ") + std::to_string(e.peer) + " channel " +
           std::to_string(e.channel);
  }
  return out;
}

}  // namespace theseus::transport
