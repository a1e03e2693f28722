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
    if (comm_ != nullptr) {
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
    msg_ = {slotAt(want_), payload, h.tag, false};
    entries_ = 2;
    return Parsed::kOk;
  }

  // Under mu_: accept, register, keep every free slot's irecv posted, test the one wanted next.
  void drive() {
    if (!error_.isOk()) return;
    if (comm_ == nullptr && !accept()) return;
    // A plugin may refuse new receives once the peer closed after its last message; that is
    // an error only when a message beyond those posted is wanted (tryPeek).
    while (posted_ < next_ + p_.slots && postError_.isOk()) {
      void* request = nullptr;
      ncclResult_t r = api_.irecv(comm_, slotAt(posted_), stride(), 0, mhandle_, &request);
      if (r != ncclSuccess) {
        postError_ = pluginError("irecv", "from", r);
        break;
      }
      if (request == nullptr) break;
      requests_[posted_ % p_.slots] = request;
      ++posted_;
    }
    // Only up to the entry wanted next: one posted further ahead may fail when the peer
    // closed after its last message, which is no error while nothing needs that message.
    while (arrived_ <= want_ && arrived_ < posted_) {
      int finished = 0;
      size_t size = 0;
      ncclResult_t r = api_.test(requests_[arrived_ % p_.slots], &finished, &size);
      if (r != ncclSuccess) return fail(pluginError("test (receive)", "from", r));
      if (!finished) break;
      sizes_[arrived_ % p_.slots] = size;
      ++arrived_;
    }
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
    return registerRing(comm_, &mhandle_, "from");
  }

  void* listen_;

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
