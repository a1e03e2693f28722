// An in-process transport for executor tests: ranks are threads of one
// process, each (sender, receiver, channel) is a bounded FIFO of slots. It
// implements the same contract as the real transports (non-blocking
// try-calls, inline slots, direct messages with tickets), so the executor's
// logic is tested without shared memory or sockets.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "transport/transport_manager.h"

namespace theseus::testing {

class FakeFabric;

struct FakeMessage {
  std::vector<char> inline_;
  const void* direct = nullptr;
  size_t bytes = 0;
  uint32_t tag = 0;
  uint64_t ticket = 0;
};

// One direction of one (sender, receiver, channel) link.
struct FakeLink {
  std::mutex mu;
  std::deque<FakeMessage> queue;
  size_t slots = 4;
  size_t slotBytes = 64 << 10;
  uint64_t nextTicket = 1;
  std::atomic<uint64_t> released{0};  // tickets released by the receiver, in order
};

class FakeSend final : public transport::SendConnection {
 public:
  FakeSend(FakeLink* link, int peer, bool direct) : link_(link), peer_(peer), direct_(direct) {}
  transport::Kind kind() const override { return transport::Kind::kShm; }
  int peer() const override { return peer_; }
  size_t slotBytes() const override { return link_->slotBytes; }
  bool tryAcquire(transport::SendSlot* slot) override {
    std::lock_guard<std::mutex> lock(link_->mu);
    if (link_->queue.size() >= link_->slots) return false;
    staging_.resize(link_->slotBytes);
    slot->data = staging_.data();
    slot->capacity = link_->slotBytes;
    return true;
  }
  uint64_t commitInline(size_t bytes, uint32_t tag) override {
    std::lock_guard<std::mutex> lock(link_->mu);
    FakeMessage m;
    m.inline_.assign(staging_.begin(), staging_.begin() + bytes);
    m.bytes = bytes;
    m.tag = tag;
    m.ticket = link_->nextTicket++;
    link_->queue.push_back(std::move(m));
    return link_->nextTicket - 1;
  }
  bool canSendDirect(const void*, size_t) const override { return direct_; }
  uint64_t commitDirect(const void* src, size_t bytes, uint32_t tag) override {
    std::lock_guard<std::mutex> lock(link_->mu);
    FakeMessage m;
    m.direct = src;
    m.bytes = bytes;
    m.tag = tag;
    m.ticket = link_->nextTicket++;
    link_->queue.push_back(std::move(m));
    return link_->nextTicket - 1;
  }
  bool consumed(uint64_t ticket) const override { return link_->released.load() >= ticket; }
  Status progress() override { return Status::ok(); }

 private:
  FakeLink* link_;
  int peer_;
  bool direct_;
  std::vector<char> staging_;
};

class FakeRecv final : public transport::RecvConnection {
 public:
  FakeRecv(FakeLink* link, int peer) : link_(link), peer_(peer) {}
  transport::Kind kind() const override { return transport::Kind::kShm; }
  int peer() const override { return peer_; }
  bool tryPeek(transport::RecvMessage* msg) override {
    std::lock_guard<std::mutex> lock(link_->mu);
    if (link_->queue.empty()) return false;
    FakeMessage& m = link_->queue.front();
    msg->data = m.direct ? m.direct : m.inline_.data();
    msg->bytes = m.bytes;
    msg->tag = m.tag;
    msg->direct = m.direct != nullptr;
    return true;
  }
  void release() override {
    std::lock_guard<std::mutex> lock(link_->mu);
    link_->released.store(link_->queue.front().ticket);
    link_->queue.pop_front();
  }
  Status progress() override { return Status::ok(); }

 private:
  FakeLink* link_;
  int peer_;
};

class FakeManager final : public transport::TransportManager {
 public:
  FakeManager(FakeFabric* fabric, int rank) : fabric_(fabric), rank_(rank) {}
  Result<transport::SendConnection*> sendConnection(int peer, int channel) override;
  Result<transport::RecvConnection*> recvConnection(int peer, int channel) override;
  Status prepare(const std::vector<int>&, int) override { return Status::ok(); }
  transport::Kind kindFor(int) const override { return transport::Kind::kShm; }
  uint64_t activityToken() const override { return 0; }
  void waitForActivity(uint64_t, int64_t) override { std::this_thread::yield(); }
  transport::PeerStats stats(int) const override { return {}; }

 private:
  FakeFabric* fabric_;
  int rank_;
  std::map<std::pair<int, int>, std::unique_ptr<FakeSend>> sends_;
  std::map<std::pair<int, int>, std::unique_ptr<FakeRecv>> recvs_;
};

class FakeFabric {
 public:
  FakeFabric(int nranks, size_t slots, size_t slotBytes, bool direct)
      : nranks_(nranks), slots_(slots), slotBytes_(slotBytes), direct_(direct) {
    for (int r = 0; r < nranks; ++r) managers_.push_back(std::make_unique<FakeManager>(this, r));
  }
  FakeManager* manager(int rank) { return managers_[rank].get(); }
  FakeLink* link(int from, int to, int channel) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& l = links_[{from, to, channel}];
    if (!l) {
      l = std::make_unique<FakeLink>();
      l->slots = slots_;
      l->slotBytes = slotBytes_;
    }
    return l.get();
  }
  bool direct() const { return direct_; }
  int nranks() const { return nranks_; }

 private:
  int nranks_;
  size_t slots_, slotBytes_;
  bool direct_;
  std::mutex mu_;
  std::map<std::tuple<int, int, int>, std::unique_ptr<FakeLink>> links_;
  std::vector<std::unique_ptr<FakeManager>> managers_;
};

inline Result<transport::SendConnection*> FakeManager::sendConnection(int peer, int channel) {
  if (peer < 0 || peer >= fabric_->nranks()) return invalidArgument("bad peer %d", peer);
  auto& s = sends_[{peer, channel}];
  if (!s) s = std::make_unique<FakeSend>(fabric_->link(rank_, peer, channel), peer, fabric_->direct());
  return static_cast<transport::SendConnection*>(s.get());
}

inline Result<transport::RecvConnection*> FakeManager::recvConnection(int peer, int channel) {
  if (peer < 0 || peer >= fabric_->nranks()) return invalidArgument("bad peer %d", peer);
  auto& r = recvs_[{peer, channel}];
  if (!r) r = std::make_unique<FakeRecv>(fabric_->link(peer, rank_, channel), peer);
  return static_cast<transport::RecvConnection*>(r.get());
}

}  // namespace theseus::testing
