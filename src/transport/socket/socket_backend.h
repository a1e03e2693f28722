// SocketBackend: TCP sockets (socket_transport.h) as a transport backend
// (backend.h), NCCL's "Socket" network. It can connect any two ranks (the
// bootstrap knows every rank's address) and needs no set-up round; between
// hosts it is today's only network, and it serves local peers when shared
// memory is disabled or unusable.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/backend.h"
#include "transport/socket/socket_transport.h"

namespace theseus::transport {

class SocketBackend final : public Backend {
 public:
  explicit SocketBackend(const BackendContext& ctx) : ctx_(ctx) {}
  ~SocketBackend() override;

  Kind kind() const override { return Kind::kSocket; }
  Status setUp() override { return Status::ok(); }
  bool canConnect(int peer) const override { return peer >= 0 && peer < ctx_.nranks && peer != ctx_.rank; }
  void assigned(const std::vector<bool>& mine) override;
  Result<std::unique_ptr<SendConnection>> connectSend(int peer, int channel, ConnectionCounters* counters) override;
  Result<std::unique_ptr<RecvConnection>> connectRecv(int peer, int channel, ConnectionCounters* counters) override;
  bool addPollFds(std::vector<struct pollfd>* fds) override;
  bool wakesThroughDescriptors() const override { return true; }
  std::string pendingReceives(const std::vector<int>& peers, int channels) override;
  std::string summary() const override { return std::to_string(peers_) + " over TCP"; }

 private:
  SocketParams paramsFor(int peer, int channel) const;

  BackendContext ctx_;
  int peers_ = 0;
  std::mutex mu_;  // connections are made by the executor and the epoch thread
  std::unique_ptr<SocketPump> pump_;
  struct Entry {
    SocketWaitable* waitable;
    int peer;
    int channel;
    bool receive;
  };
  std::vector<Entry> sockets_;
  std::atomic<size_t> count_{0};
};

}  // namespace theseus::transport
