// Receive side of connections over an NCCL net plugin (see net_connection.h).
#include <unistd.h>

#include <cstring>

#include "common/log.h"
#include "transport/netplugin/nccl_net_abi.h"
#include "transport/netplugin/net_connection.h"
#include "transport/socket/socket_io.h"

namespace theseus::transport::netplugin {
namespace {

class NetRecvConnection final : public RecvConnection, public NetPumpClient, private NetEndpoint {
 public:
  NetRecvConnection(const NetApi& api, const NetParams& p, RingMemory ring, void* listenComm,
                    ConnectionCounters* counters, NetPump* pump)
      : NetEndpoint(api, p, std::move(ring), counters, pump), listen_(listenComm) {
    pump_->add(this);
  }
  ~NetRecvConnection() override {
    pump_->remove(this);
    std::lock_guard lock(mu_);
    if (split_)
      TH_INFO(log::kNet, "closing the net-plugin connection from rank %d channel %d after %llu message(s), %llu "
              "landed in GPU memory, %llu flushed", p_.peer, p_.channel, static_cast<unsigned long long>(next_ / 2),
              static_cast<unsigned long long>(landedInGpu_), static_cast<unsigned long long>(flushes_));
    if (comm_ != nullptr) {
      for (const Region& r : regions_)
        if (r.mhandle != nullptr) api_.deregMr(comm_, r.mhandle);
      if (mhandle_ != nullptr) api_.deregMr(comm_, mhandle_);
      api_.closeRecv(comm_);
    }
    if (listen_ != nullptr) api_.closeListen(listen_);
  }

  Kind kind() const override { return Kind::kNetPlugin; }
  int peer() const override { return p_.peer; }

  bool tryPeek(RecvMessage* msg) override {
    if (peeked_) {
      *msg = msg_;
      return true;
    }
    std::unique_lock lock(mu_);
    drive();
    if (arrived_ == next_ && next_ == posted_ && !postError_.isOk()) fail(postError_);
    if (arrived_ == next_) {  // nothing yet, or an error (progress() reports it)
      if (!waiting_.exchange(true)) {
        wait_.begin();
        lock.unlock();
        pump_->notify();
      }
      return false;
    }
    if (Parsed r = parse(); r != Parsed::kOk) {
      if (r == Parsed::kWait && !waiting_.exchange(true)) {  // a zero-copy payload still on its way
        wait_.begin();
        lock.unlock();
        pump_->notify();
      }
      return false;
    }
    waiting_.store(false, std::memory_order_relaxed);
    wait_.end(*counters_);
    counters_->addMessage(msg_.bytes);
    peeked_ = true;
    *msg = msg_;
    return true;
  }

  void release() override {
    if (!peeked_) return;
    peeked_ = false;
    std::lock_guard lock(mu_);
    next_ += entries_;  // a zero-copy message took two entries
    want_ = next_;
    drive();  // posts the slots again
  }

  Status progress() override {
    std::lock_guard lock(mu_);
    drive();
    return error_;
  }

  // Receive regions (GPUDirect RDMA; net_connection.h).
  bool acceptsDeviceMemory(int cudaDev) const override { return split_ && cudaDev == p_.gdrRecvDevice; }
  void addRegion(void* base, size_t bytes, int cudaDev) override {
    std::lock_guard lock(mu_);
    addRegionLocked(comm_, base, bytes, cudaDev, "from");
  }
  RegionState regionState(const void* base) const override {
    return const_cast<NetRecvConnection*>(this)->regionStateOf(base);
  }
  // A receive posted into it may still complete (the plugin cannot take it back): it lands in
  // memory the registration keeps, and the registration goes when the comm closes.
  void removeRegion(void* base) override {
    std::lock_guard lock(mu_);
    for (Region& r : regions_)
      if (r.base == base) r.removed = true;
  }
  bool offer(void* dst, size_t capacity) override {
    if (!split_) return false;
    std::lock_guard lock(mu_);
    if (offered_ - next_ / 2 >= kMaxOffers) return false;
    offers_[offered_ % kMaxOffers] = Offer{static_cast<char*>(dst), capacity};
    ++offered_;
    drive();
    return true;
  }

  bool pump() override {
    std::unique_lock lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    uint64_t before = arrived_;
    bool hadComm = comm_ != nullptr;
    drive();
    return arrived_ != before || (comm_ != nullptr) != hadComm || !error_.isOk();
  }
  bool wantsPump() const override {
    if (failed_.load(std::memory_order_acquire)) return false;
    return !connected_.load(std::memory_order_acquire) || waiting_.load(std::memory_order_acquire);
  }
  bool settingUp() const override { return !connected_.load(std::memory_order_acquire) && !failed_.load(); }

 private:
  // Under mu_: the message at next_ (complete) as msg_, after checking its header; a zero-copy
  // header waits for its payload, the next entry (kWait).
  enum class Parsed { kOk, kWait, kBad };
  Parsed parse() {
    size_t got = sizes_[next_ % p_.slots];
    const char* slot = slotAt(next_);
    wire::NetMessageHeader h;
    if (got < sizeof(h)) {
      fail(remoteError("rank %d channel %d: net-plugin message of %zu bytes, shorter than its header", p_.peer,
                       p_.channel, got));
      return Parsed::kBad;
    }
    std::memcpy(&h, slot, sizeof(h));
    const bool direct = h.magic == wire::kDirectMagic;
    if ((h.magic != wire::kMessageMagic && !direct) || h.bytes > p_.slotBytes ||
        (direct ? got != sizeof(h) || p_.slots < 2 : h.bytes + sizeof(h) != got)) {
      fail(remoteError("rank %d channel %d: corrupt net-plugin message (magic %08x, %llu bytes in a %zu-byte "
                       "receive of a %zu-byte slot)", p_.peer, p_.channel, h.magic,
                       static_cast<unsigned long long>(h.bytes), got, p_.slotBytes));
      return Parsed::kBad;
    }
    if (!direct) {
      if (split_) {
        fail(remoteError("rank %d channel %d: a net-plugin message with its payload inline where this rank asked "
                         "for them apart (GPUDirect RDMA receives)", p_.peer, p_.channel));
        return Parsed::kBad;
      }
      msg_ = {slot + sizeof(h), static_cast<size_t>(h.bytes), h.tag, false};
      entries_ = 1;
      return Parsed::kOk;
    }
    want_ = next_ + 1;
    if (arrived_ <= want_) {
      drive();
      if (!error_.isOk()) return Parsed::kBad;
      if (arrived_ <= want_) return Parsed::kWait;
    }
    const size_t payload = sizes_[want_ % p_.slots];
    if (payload != h.bytes) {
      fail(remoteError("rank %d channel %d: corrupt net-plugin message (a zero-copy payload of %zu bytes where its "
                       "header announced %llu)", p_.peer, p_.channel, payload,
                       static_cast<unsigned long long>(h.bytes)));
      return Parsed::kBad;
    }
    char* landed = landed_[want_ % p_.slots];
    msg_ = {landed != nullptr ? landed : slotAt(want_), payload, h.tag, false};
    entries_ = 2;
    return Parsed::kOk;
  }

  // Under mu_: accept, register, keep every free slot's irecv posted, test the one wanted next.
  void drive() {
    if (!error_.isOk()) return;
    if (comm_ == nullptr && !accept()) return;
    // A plugin may refuse new receives once the peer closed after its last message; that is
    // an error only when a message beyond those posted is wanted (tryPeek).
    // Split payloads (GPUDirect RDMA receives): even entries are headers, odd ones payloads, each
    // posted once a destination was offered for it.
    while (posted_ < next_ + p_.slots && postError_.isOk()) {
      const uint32_t e = static_cast<uint32_t>(posted_ % p_.slots);
      char* dst = slotAt(posted_);
      size_t size = stride();
      void* mh = mhandle_;
      landed_[e] = nullptr;
      if (split_ && posted_ % 2 == 0) {
        size = sizeof(wire::NetMessageHeader);
      } else if (split_) {
        if (posted_ / 2 >= offered_) break;  // no FIFO slot offered for this payload yet
        const Offer& o = offers_[(posted_ / 2) % kMaxOffers];
        for (const Region& r : regions_) {
          if (r.state != RegionState::kDirect || r.removed || !r.holds(o.dst, o.capacity)) continue;
          dst = o.dst;
          size = o.capacity;
          mh = r.mhandle;
          landed_[e] = o.dst;
          landedMh_[e] = r.mhandle;
          break;
        }
      }
      void* request = nullptr;
      ncclResult_t r = api_.irecv(comm_, dst, size, 0, mh, &request);
      if (r != ncclSuccess) {
        postError_ = pluginError("irecv", "from", r);
        break;
      }
      if (request == nullptr) break;
      requests_[e] = request;
      ++posted_;
    }
    // Only up to the entry wanted next: one posted further ahead may fail when the peer
    // closed after its last message, which is no error while nothing needs that message.
    while (arrived_ <= want_ && arrived_ < posted_) {
      const uint32_t e = static_cast<uint32_t>(arrived_ % p_.slots);
      if (flush_ == nullptr) {
        int finished = 0;
        size_t size = 0;
        ncclResult_t r = api_.test(requests_[e], &finished, &size);
        // A payload that fails after its header came is no goodbye: the peer was sending it.
        if (r != ncclSuccess)
          return split_ && arrived_ % 2 == 1 ? fatal(pluginError("test (receive)", "from", r))
                                             : fail(pluginError("test (receive)", "from", r));
        if (!finished) break;
        sizes_[e] = size;
        if (landed_[e] != nullptr) ++landedInGpu_;
        // A payload the network wrote into GPU memory is made visible to the GPU before the proxy
        // publishes it (NetParams::gdrFlush).
        if (landed_[e] != nullptr && p_.gdrFlush && size > 0) {
          r = api_.iflush(comm_, landed_[e], static_cast<int>(size), landedMh_[e], &flush_);
          if (r != ncclSuccess) return fatal(pluginError("iflush", "from", r));
          if (flush_ != nullptr) ++flushes_;  // none: the network needs no flush here
        }
      }
      if (flush_ != nullptr) {
        int finished = 0;
        ncclResult_t r = api_.test(flush_, &finished, nullptr);
        if (r != ncclSuccess) return fatal(pluginError("test (flush)", "from", r));
        if (!finished) break;
        flush_ = nullptr;
      }
      ++arrived_;
    }
  }

  // Under mu_: a failure of a receive into GPU memory that is not the peer's goodbye (which a
  // receive connection's errors may be, net_connection.h): also the communicator's asynchronous
  // error, or the kernel waiting for the message would only learn of it from its peers.
  void fatal(Status s) {
    fail(std::move(s));
    if (p_.gdrFailures != nullptr) p_.gdrFailures->report(error_);
  }

  bool accept() {
    ncclResult_t r = api_.accept(listen_, &comm_);
    if (r != ncclSuccess) {
      fail(pluginError("accept", "from", r));
      return false;
    }
    if (comm_ == nullptr) return false;  // the peer has not connected yet (it may come much later)
    api_.closeListen(listen_);
    listen_ = nullptr;
    if (!registerRing(comm_, &mhandle_, "from")) return false;
    for (Region& r : regions_) registerRegion(comm_, r, "from");
    return true;
  }

  struct Offer {
    char* dst = nullptr;
    size_t capacity = 0;
  };
  static constexpr uint64_t kMaxOffers = 64;

  void* listen_;
  const bool split_ = p_.gdrRecvDevice >= 0;  // payloads apart from their headers (GPUDirect RDMA)
  Offer offers_[kMaxOffers];                   // under mu_: message k's destination at k % kMaxOffers
  uint64_t offered_ = 0;                       // messages offered a destination
  char* landed_[kMaxNetSlots] = {};            // a posted payload's destination in GPU memory (null: its slot)
  void* landedMh_[kMaxNetSlots] = {};          // and the region's registration it was posted with
  void* flush_ = nullptr;                      // the flush of the entry at arrived_, in flight
  uint64_t landedInGpu_ = 0;
  uint64_t flushes_ = 0;

  void* comm_ = nullptr;
  void* mhandle_ = nullptr;
  Status postError_;
  std::atomic<bool> waiting_{false};
  uint64_t next_ = 0;     // the message tryPeek returns next
  uint64_t arrived_ = 0;  // messages complete
  uint64_t posted_ = 0;   // irecvs posted
  uint64_t want_ = 0;     // the last entry the message at next_ needs (next_ + 1: a zero-copy payload)
  uint32_t entries_ = 1;  // entries of the peeked message
  size_t sizes_[kMaxNetSlots] = {};
  void* requests_[kMaxNetSlots] = {};
  bool peeked_ = false;   // executor thread only
  RecvMessage msg_;
  IntervalClock wait_;
};

// Sends the handle to the peer (the sender); connectTo never waits for the peer's code.
Status handOff(bootstrap::Bootstrap& boot, const NetParams& p, const NetApi& api, const unsigned char* handle,
               const AbortFlag* abort) {
  wire::NetHandoff h{};
  h.magic = wire::kHandoffMagic;
  h.rank = p.rank;
  h.channel = static_cast<uint32_t>(p.channel);
  h.slotBytes = p.slotBytes;
  h.flags = p.gdrRecvDevice >= 0 ? wire::kSplitPayloads : 0;
  std::snprintf(h.plugin, sizeof(h.plugin), "%s", api.name().c_str());
  std::memcpy(h.handle, handle, sizeof(h.handle));
  TH_ASSIGN(int fd, boot.connectTo(p.peer, netTag(p.channel), Deadline::afterMs(p.timeoutMs)));
  Status s = writeFully(fd, &h, sizeof(h), Deadline::afterMs(p.timeoutMs), abort, "sending the net-plugin handoff");
  ::close(fd);
  return s;
}

}  // namespace

Result<NetRecvHandle> makeNetRecv(const NetApi& api, bootstrap::Bootstrap& boot, const NetParams& params,
                                  const AbortFlag* abort, ConnectionCounters* counters, NetPump* pump) {
  TH_ASSIGN(RingMemory ring, allocNetRing(params));
  unsigned char handle[128] = {};
  void* listenComm = nullptr;
  ncclResult_t r = api.listen(params.device, handle, &listenComm);
  if (r != ncclSuccess || listenComm == nullptr)
    return remoteError("%s: listen on device %d for rank %d channel %d failed with %d (%s)%s", api.label().c_str(),
                       params.device, params.peer, params.channel, static_cast<int>(r), resultName(r),
                       api.detail().c_str());
  Status s = handOff(boot, params, api, handle, abort);
  if (!s.isOk()) {
    api.closeListen(listenComm);
    return s.withContext("net-plugin connection from rank " + std::to_string(params.peer));
  }
  auto* c = new NetRecvConnection(api, params, std::move(ring), listenComm, counters, pump);
  return NetRecvHandle{std::unique_ptr<RecvConnection>(c), c};
}

}  // namespace theseus::transport::netplugin
