// Send side of connections over an NCCL net plugin (see net_connection.h).
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "transport/netplugin/nccl_net_abi.h"
#include "transport/netplugin/net_connection.h"
#include "transport/peer_accept.h"
#include "transport/socket/socket_io.h"

namespace theseus::transport::netplugin {

uint32_t netTag(int channel) {
  // 0x7e in the top byte marks net-plugin handoffs among bootstrap tags (0x7d: TCP data).
  return 0x7e000000u | ((static_cast<uint32_t>(channel) & 0xffffu) << 8);
}

namespace {

// Filled by the helper thread that claims the receiver's handoff.
struct HandoffWait {
  std::atomic<bool> done{false};
  std::atomic<bool> cancel{false};
  Status status;
  wire::NetHandoff handoff{};
};

Status checkHandoff(const wire::NetHandoff& h, const NetParams& p, const NetApi& api) {
  const char* why = nullptr;
  if (h.magic != wire::kHandoffMagic) why = "not a Theseus net-plugin handoff (bad magic)";
  else if (h.rank != p.peer || h.channel != static_cast<uint32_t>(p.channel)) why = "for another rank or channel";
  else if (h.slotBytes < p.slotBytes) why = "its receive slots are smaller than this rank's send slots";
  else if ((h.flags & wire::kSplitPayloads) != 0 && !p.proxied) why = "split payloads on a host executor's channel";
  if (why != nullptr) return remoteError("rank %d channel %d: bad net-plugin handoff: %s", p.peer, p.channel, why);
  std::string theirs(h.plugin, strnlen(h.plugin, sizeof(h.plugin)));
  if (theirs != api.name())
    return invalidUsage("rank %d uses NCCL net plugin '%s' and this rank (%d) '%s': every rank must load the same "
                        "net plugin (NCCL_NET_PLUGIN)", p.peer, theirs.c_str(), p.rank, api.name().c_str());
  return Status::ok();
}

void claimHandoff(bootstrap::Bootstrap& boot, const NetParams& p, const NetApi& api, const AbortFlag* abort,
                  HandoffWait* w) {
  auto fd = acceptFromPeer(boot, p.peer, netTag(p.channel), Deadline::never(), abort, w->cancel, p.timeoutMs,
                           "its net-plugin connection (channel " + std::to_string(p.channel) + ")");
  if (!fd.isOk()) {
    w->status = fd.status();
    return;
  }
  Status s = readFully(fd.value(), &w->handoff, sizeof(w->handoff), Deadline::afterMs(p.timeoutMs), abort, &w->cancel,
                       "reading the net-plugin handoff");
  ::close(fd.value());
  w->status = s.isOk() ? checkHandoff(w->handoff, p, api) : s;
}

class NetSendConnection final : public SendConnection, public NetPumpClient, private NetEndpoint {
 public:
  NetSendConnection(const NetApi& api, bootstrap::Bootstrap& boot, const NetParams& p, RingMemory ring,
                    const AbortFlag* abort, ConnectionCounters* counters, NetPump* pump)
      : NetEndpoint(api, p, std::move(ring), counters, pump), abort_(abort), wait_(std::make_shared<HandoffWait>()) {
    std::shared_ptr<HandoffWait> w = wait_;
    NetPump* pumpPtr = pump_;
    helper_ = std::thread([&boot, p, &api, abort, w, pumpPtr] {
      claimHandoff(boot, p, api, abort, w.get());
      w->done.store(true, std::memory_order_release);
      pumpPtr->notify();
    });
    pump_->add(this);
  }

  ~NetSendConnection() override {
    pump_->remove(this);
    wait_->cancel.store(true);
    if (helper_.joinable()) helper_.join();
    std::unique_lock lock(mu_);
    flush(lock);
    if (comm_ != nullptr) {
      for (const UserMr& m : userMrs_)
        if (m.mhandle != nullptr) api_.deregMr(comm_, m.mhandle);
      for (const Region& r : regions_)
        if (r.mhandle != nullptr) api_.deregMr(comm_, r.mhandle);
      if (mhandle_ != nullptr) api_.deregMr(comm_, mhandle_);
      api_.closeSend(comm_);
    }
    TH_INFO(log::kNet, "closing the net-plugin connection to rank %d channel %d after %llu message(s)", p_.peer,
            p_.channel, static_cast<unsigned long long>(completed_.load()));
  }

  Kind kind() const override { return Kind::kNetPlugin; }
  int peer() const override { return p_.peer; }
  size_t slotBytes() const override { return p_.slotBytes; }

  bool tryAcquire(SendSlot* slot) override {
    // The device FIFO proxy's connection takes its first message once the receiver's handoff said
    // which format it wants (net_connection.h: GPUDirect RDMA receives).
    if (p_.proxied && !formatKnown_) {
      if (!wait_->done.load(std::memory_order_acquire)) return false;
      split_ = wait_->status.isOk() && (wait_->handoff.flags & wire::kSplitPayloads) != 0;
      formatKnown_ = true;
    }
    uint64_t next = committed_.load(std::memory_order_relaxed);  // only this thread commits
    const uint64_t entries = split_ ? 2 : 1;
    if (next + entries - completed_.load(std::memory_order_acquire) > p_.slots) {
      std::lock_guard lock(mu_);
      drive();
      if (next + entries - completed_.load(std::memory_order_relaxed) > p_.slots) return false;
    }
    acquired_ = true;
    slot->data = slotAt(next) + sizeof(wire::NetMessageHeader);
    slot->capacity = p_.slotBytes;
    return true;
  }

  uint64_t commitInline(size_t bytes, uint32_t tag) override {
    std::unique_lock lock(mu_);
    if (!acquired_ || bytes > p_.slotBytes) {
      fail(internalError("commitInline to rank %d: %s (%zu bytes, slot %zu)", p_.peer,
                         acquired_ ? "message larger than the slot" : "no slot acquired", bytes, p_.slotBytes));
      return 0;
    }
    acquired_ = false;
    const uint64_t n = committed_.load(std::memory_order_relaxed);
    if (split_) {  // the receiver lands payloads apart: the header, then the payload from this slot
      wire::NetMessageHeader h{wire::kDirectMagic, tag, bytes};
      std::memcpy(slotAt(n), &h, sizeof(h));
      setEntry(n, nullptr, sizeof(h), nullptr);
      setEntry(n + 1, slotAt(n) + sizeof(h), bytes, nullptr);
      return publish(lock, n, n + 2, bytes);
    }
    wire::NetMessageHeader h{wire::kMessageMagic, tag, bytes};
    std::memcpy(slotAt(n), &h, sizeof(h));
    setEntry(n, nullptr, sizeof(h) + bytes, nullptr);
    return publish(lock, n, n + 1, bytes);
  }

  // Zero-copy (see net_connection.h): the piece lies in a registered buffer the plugin took, and
  // the ring has room for the header and the payload entry.
  bool canSendDirect(const void* src, size_t bytes) const override {
    if (!acquired_ || bytes > p_.slotBytes) return false;
    if (committed_.load(std::memory_order_relaxed) + 2 - completed_.load(std::memory_order_acquire) > p_.slots)
      return false;
    auto* self = const_cast<NetSendConnection*>(this);
    if (hasRegions_.load(std::memory_order_acquire)) {
      std::lock_guard lock(self->mu_);
      for (const Region& r : regions_) {
        if (static_cast<const char*>(src) < r.base || static_cast<const char*>(src) + bytes > r.base + r.bytes)
          continue;
        self->directMh_ = r.state == RegionState::kDirect ? r.mhandle : nullptr;
        return self->directMh_ != nullptr;
      }
    }
    if (p_.userBuffers == nullptr || p_.userBuffers->empty()) return false;
    UserBuffers::Buffer b;
    if (!p_.userBuffers->find(src, bytes, &b)) return false;
    // Registering the buffer with this comm the first time it is used here is the only change.
    std::lock_guard lock(self->mu_);
    self->directMh_ = self->userMr(b);
    return self->directMh_ != nullptr;
  }

  uint64_t commitDirect(const void* src, size_t bytes, uint32_t tag) override {
    std::unique_lock lock(mu_);
    const uint64_t n = committed_.load(std::memory_order_relaxed);
    if (!acquired_ || directMh_ == nullptr || bytes > p_.slotBytes ||
        n + 2 - completed_.load(std::memory_order_relaxed) > p_.slots) {
      acquired_ = false;
      fail(internalError("commitDirect to rank %d: no zero-copy send was prepared (%zu bytes)", p_.peer, bytes));
      return 0;
    }
    acquired_ = false;
    wire::NetMessageHeader h{wire::kDirectMagic, tag, bytes};
    std::memcpy(slotAt(n), &h, sizeof(h));
    setEntry(n, nullptr, sizeof(h), nullptr);
    setEntry(n + 1, static_cast<const char*>(src), bytes, directMh_);
    directMh_ = nullptr;
    return publish(lock, n, n + 2, bytes);  // consumed once the payload's send completed
  }

  void forgetUserBuffer(uint64_t id) override {
    std::unique_lock lock(mu_);
    auto it = std::find_if(userMrs_.begin(), userMrs_.end(), [&](const UserMr& m) { return m.id == id; });
    if (it == userMrs_.end()) return;
    // A collective returns only after its zero-copy sends completed; a send still reading the
    // buffer here is one the user deregistered under a running operation: let it finish first.
    flush(lock);
    if (comm_ != nullptr && it->mhandle != nullptr) api_.deregMr(comm_, it->mhandle);
    userMrs_.erase(it);
  }
  bool consumed(uint64_t ticket) const override { return completed_.load(std::memory_order_acquire) >= ticket; }

  // Send regions (GPUDirect RDMA; net_connection.h).
  bool acceptsDeviceMemory(int cudaDev) const override {
    return gpuMemoryUsable(cudaDev);
  }
  void addRegion(void* base, size_t bytes, int cudaDev) override {
    std::lock_guard lock(mu_);
    addRegionLocked(comm_, base, bytes, cudaDev, "to");
    hasRegions_.store(true, std::memory_order_release);
  }
  RegionState regionState(const void* base) const override {
    return const_cast<NetSendConnection*>(this)->regionStateOf(base);
  }
  void removeRegion(void* base) override {
    std::unique_lock lock(mu_);
    auto it = std::find_if(regions_.begin(), regions_.end(), [&](const Region& r) { return r.base == base; });
    if (it == regions_.end()) return;
    flush(lock);  // nothing may still read it
    it = std::find_if(regions_.begin(), regions_.end(), [&](const Region& r) { return r.base == base; });
    if (it == regions_.end()) return;
    if (comm_ != nullptr && it->mhandle != nullptr) api_.deregMr(comm_, it->mhandle);
    regions_.erase(it);
  }

  Status progress() override {
    std::lock_guard lock(mu_);
    drive();
    return error_;
  }

  bool pump() override {
    std::unique_lock lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) return false;  // the executor is driving it
    uint64_t before = completed_.load(std::memory_order_relaxed);
    bool hadComm = comm_ != nullptr;
    drive();
    return completed_.load(std::memory_order_relaxed) != before || (comm_ != nullptr) != hadComm || !error_.isOk();
  }
  bool wantsPump() const override {
    if (failed_.load(std::memory_order_acquire)) return false;
    if (!connected_.load(std::memory_order_acquire)) return wait_->done.load(std::memory_order_acquire);
    return completed_.load(std::memory_order_acquire) < committed_.load(std::memory_order_acquire);
  }

 private:
  // Under mu_: set-up steps, then posts and completions, as far as the plugin goes now.
  void drive() {
    if (!error_.isOk()) return;
    if (comm_ == nullptr && !connect()) return;
    const uint64_t committed = committed_.load(std::memory_order_relaxed);
    while (posted_ < committed) {
      void* request = nullptr;
      uint64_t n = posted_;
      const uint32_t e = static_cast<uint32_t>(n % p_.slots);
      ncclResult_t r = api_.isend(comm_, src_[e] != nullptr ? const_cast<char*>(src_[e]) : slotAt(n), sizes_[e], 0,
                                  mh_[e] != nullptr ? mh_[e] : mhandle_, &request);
      if (r != ncclSuccess) return fail(pluginError("isend", "to", r));
      if (request == nullptr) break;  // the plugin asks to retry later
      requests_[n % p_.slots] = request;
      ++posted_;
    }
    uint64_t done = completed_.load(std::memory_order_relaxed);
    while (done < posted_) {
      int finished = 0;
      ncclResult_t r = api_.test(requests_[done % p_.slots], &finished, nullptr);
      if (r != ncclSuccess) return fail(pluginError("test (send)", "to", r));
      if (!finished) break;
      ++done;
    }
    if (done != completed_.load(std::memory_order_relaxed)) {
      completed_.store(done, std::memory_order_release);
      if (done == committed) busy_.end(*counters_);
    }
  }

  // Under mu_ (released here): entries n .. ticket - 1 are filled; commits them and returns the ticket.
  uint64_t publish(std::unique_lock<std::mutex>& lock, uint64_t n, uint64_t ticket, size_t bytes) {
    if (completed_.load(std::memory_order_relaxed) == n) busy_.begin();
    committed_.store(ticket, std::memory_order_release);
    drive();
    bool pending = completed_.load(std::memory_order_relaxed) < ticket;
    lock.unlock();
    counters_->addMessage(bytes);
    if (pending) pump_->notify();
    return ticket;
  }

  // Under mu_: ring entry n sends `bytes` from `src` with `mh` (null: from its own slot, with the ring's).
  void setEntry(uint64_t n, const char* src, size_t bytes, void* mh) {
    const uint32_t e = static_cast<uint32_t>(n % p_.slots);
    src_[e] = src;
    sizes_[e] = bytes;
    mh_[e] = mh;
  }

  // Under mu_: this comm's registration of user buffer `b`, made at its first use (null when the
  // plugin refused it: that buffer's pieces are copied, as unregistered ones).
  void* userMr(const UserBuffers::Buffer& b) {
    if (comm_ == nullptr || !error_.isOk()) return nullptr;
    for (const UserMr& m : userMrs_)
      if (m.id == b.id) return m.mhandle;
    void* mh = nullptr;
    ncclResult_t r = api_.regMr(comm_, const_cast<char*>(b.base), b.size, NCCL_PTR_HOST, &mh);
    if (r != ncclSuccess || mh == nullptr) {
      TH_INFO(log::kNet | log::kReg, "%s: registering a %zu-byte user buffer for rank %d failed (%d); its messages "
              "are copied", api_.label().c_str(), b.size, p_.peer, static_cast<int>(r));
      mh = nullptr;
    } else {
      TH_INFO(log::kNet | log::kReg, "%s: a %zu-byte registered buffer goes to rank %d channel %d zero-copy",
              api_.label().c_str(), b.size, p_.peer, p_.channel);
    }
    userMrs_.push_back(UserMr{b.id, mh});
    return mh;
  }

  // The comm, once the handoff is in and the plugin's connect() finished; registers the ring.
  bool connect() {
    if (!wait_->done.load(std::memory_order_acquire)) return false;
    if (!wait_->status.isOk()) {
      fail(wait_->status);
      return false;
    }
    ncclResult_t r = api_.connect(p_.device, wait_->handoff.handle, &comm_);
    if (r != ncclSuccess) {
      fail(pluginError("connect", "to", r));
      return false;
    }
    if (comm_ == nullptr) {
      if (!connecting_) {
        connecting_ = true;
        connectDeadline_ = Deadline::afterMs(p_.timeoutMs);
      } else if (connectDeadline_.expired()) {
        fail(remoteError("%s: connect to rank %d channel %d did not complete within %lld ms", api_.label().c_str(),
                         p_.peer, p_.channel, static_cast<long long>(p_.timeoutMs)));
      }
      return false;
    }
    if (!registerRing(comm_, &mhandle_, "to")) return false;
    for (Region& r : regions_) registerRegion(comm_, r, "to");
    return true;
  }

  // Sends what is committed before the comm closes (a collective completes once its
  // messages are queued). Bounded; skipped on abort or error.
  void flush(std::unique_lock<std::mutex>& lock) {
    constexpr int64_t kFlushMs = 10000;
    Deadline deadline = Deadline::afterMs(kFlushMs);
    while (error_.isOk() && completed_.load() < committed_.load() && !deadline.expired() &&
           !(abort_ != nullptr && abort_->isSet())) {
      drive();
      if (completed_.load() == committed_.load()) break;
      lock.unlock();
      usleep(50);
      lock.lock();
    }
    if (error_.isOk() && completed_.load() < committed_.load())
      TH_WARN("net-plugin connection to rank %d channel %d closed with %llu message(s) not sent", p_.peer,
              p_.channel, static_cast<unsigned long long>(committed_.load() - completed_.load()));
  }

  const AbortFlag* abort_;
  std::shared_ptr<HandoffWait> wait_;
  std::thread helper_;

  void* comm_ = nullptr;
  void* mhandle_ = nullptr;
  bool connecting_ = false;
  Deadline connectDeadline_;
  bool acquired_ = false;
  bool formatKnown_ = false;  // committing thread: the handoff's format is known (proxied connections)
  bool split_ = false;        // every message as a header, then its payload (kSplitPayloads)
  std::atomic<uint64_t> committed_{0};  // written under mu_; read by wantsPump()
  uint64_t posted_ = 0;
  std::atomic<uint64_t> completed_{0};
  size_t sizes_[kMaxNetSlots] = {};
  const char* src_[kMaxNetSlots] = {};  // zero-copy payloads: where they are sent from
  void* mh_[kMaxNetSlots] = {};         // and their registration
  void* requests_[kMaxNetSlots] = {};
  IntervalClock busy_;
  struct UserMr {
    uint64_t id;
    void* mhandle;  // null: the plugin refused the buffer
  };
  std::vector<UserMr> userMrs_;
  std::atomic<bool> hasRegions_{false};
  void* directMh_ = nullptr;  // canSendDirect's answer, for the commitDirect that follows
};

}  // namespace

Result<NetSendHandle> makeNetSend(const NetApi& api, bootstrap::Bootstrap& boot, const NetParams& params,
                                  const AbortFlag* abort, ConnectionCounters* counters, NetPump* pump) {
  TH_ASSIGN(RingMemory ring, allocNetRing(params));
  auto* c = new NetSendConnection(api, boot, params, std::move(ring), abort, counters, pump);
  return NetSendHandle{std::unique_ptr<SendConnection>(c), c};
}

}  // namespace theseus::transport::netplugin
