#include "transport/transport_manager_impl.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "common/log.h"
#include "transport/backend_order.h"
#include "transport/shm/shm_backend.h"

namespace theseus::transport {

const char* kindName(Kind k) {
  switch (k) {
    case Kind::kShm: return "shm";
    case Kind::kSocket: return "socket";
    case Kind::kCudaIpc: return "cuda_ipc";
    case Kind::kIb: return "ib";
    case Kind::kNetPlugin: return "netplugin";
  }
  return "unknown";
}

namespace {
void wakeManager(void* ctx) { static_cast<TransportManagerImpl*>(ctx)->wakeLocal(); }
}  // namespace

TransportManagerImpl::TransportManagerImpl(bootstrap::Bootstrap& boot, const TransportOptions& options,
                                           const TransportConfig& config)
    : boot_(boot), options_(options), config_(config) {
  config_.net = options.net;
  rank_ = boot.rank();
  nranks_ = boot.nranks();
  channels_ = std::max(1, options.maxChannels);
  // With device FIFOs, a second set of channels carries the proxied FIFOs of peers on other hosts.
  connChannels_ = options.deviceFifos ? 2 * channels_ : channels_;
  byPeer_.assign(static_cast<size_t>(std::max(nranks_, 0)), nullptr);
  size_t n = static_cast<size_t>(nranks_) * static_cast<size_t>(connChannels_);
  send_.reset(new std::atomic<SendConnection*>[n]);
  recv_.reset(new std::atomic<RecvConnection*>[n]);
  for (size_t i = 0; i < n; ++i) {
    send_[i].store(nullptr, std::memory_order_relaxed);
    recv_[i].store(nullptr, std::memory_order_relaxed);
  }
  if (options.deviceFifos) {
    const size_t fifos = static_cast<size_t>(std::max(nranks_, 0)) * static_cast<size_t>(channels_) * 2;
    deviceFifoCache_.resize(fifos);
    deviceFifoReady_.reset(new std::atomic<bool>[fifos]);
    for (size_t i = 0; i < fifos; ++i) deviceFifoReady_[i].store(false, std::memory_order_relaxed);
  }
  sendCounters_.reset(new ConnectionCounters[n]);
  recvCounters_.reset(new ConnectionCounters[n]);
  wakeFd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

TransportManagerImpl::~TransportManagerImpl() {
  // Connections first (they join their helper threads and leave the socket
  // pump), then the backends, last set up first (the pump, the shm mappings
  // the connections pointed into).
  proxy_.reset();  // forwards what the device committed, then stops using the connections
  {
    std::lock_guard lock(mu_);
    ownedRecv_.clear();
    ownedSend_.clear();
  }
  while (!backends_.empty()) backends_.pop_back();
  deviceFifos_.reset();
  if (wakeFd_ >= 0) close(wakeFd_);
}

void TransportManagerImpl::wakeLocal() {
  ringDoorbell(bell_);
  if (pollSleepers_.load(std::memory_order_seq_cst) != 0 && wakeFd_ >= 0) {
    uint64_t one = 1;
    (void)!write(wakeFd_, &one, sizeof(one));
  }
}

Status TransportManagerImpl::checkEndpoint(int peer, int channel) const {
  if (peer < 0 || peer >= nranks_)
    return invalidArgument("peer rank %d is out of range [0, %d)", peer, nranks_);
  if (peer == rank_) return invalidArgument("rank %d cannot connect to itself", peer);
  if (channel < 0 || channel >= channels_)
    return invalidArgument("channel %d is out of range [0, %d)", channel, channels_);
  return Status::ok();
}

Result<SendConnection*> TransportManagerImpl::sendConnection(int peer, int channel) {
  TH_CHECK(checkEndpoint(peer, channel));
  SendConnection* c = send_[peer * connChannels_ + channel].load(std::memory_order_acquire);
  if (c != nullptr) return c;
  return createSend(peer, channel);
}

Result<RecvConnection*> TransportManagerImpl::recvConnection(int peer, int channel) {
  TH_CHECK(checkEndpoint(peer, channel));
  RecvConnection* c = recv_[peer * connChannels_ + channel].load(std::memory_order_acquire);
  if (c != nullptr) return c;
  return createRecv(peer, channel);
}

Result<Backend*> TransportManagerImpl::backendFor(int peer) const {
  Backend* b = byPeer_[static_cast<size_t>(peer)];
  if (b != nullptr) return b;
  std::string names;
  for (const auto& be : backends_) names += (names.empty() ? "" : ", ") + std::string(kindName(be->kind()));
  return invalidUsage("no transport backend connects rank %d with rank %d (backends: %s)", rank_, peer,
                      names.empty() ? "none" : names.c_str());
}

Result<SendConnection*> TransportManagerImpl::createSend(int peer, int channel) {
  std::lock_guard lock(mu_);
  size_t idx = static_cast<size_t>(peer) * connChannels_ + channel;
  if (SendConnection* c = send_[idx].load(std::memory_order_acquire)) return c;
  TH_ASSIGN(Backend * backend, backendFor(peer));
  std::unique_ptr<SendConnection> conn;
  TH_ASSIGN(conn, backend->connectSend(peer, channel, &sendCounters_[idx]));
  if (emulation_) conn = emulation_->wrapSend(std::move(conn), peer, &sendCounters_[idx]);
  SendConnection* raw = conn.get();
  ownedSend_.push_back(std::move(conn));
  send_[idx].store(raw, std::memory_order_release);
  return raw;
}

Result<RecvConnection*> TransportManagerImpl::createRecv(int peer, int channel) {
  std::lock_guard lock(mu_);
  size_t idx = static_cast<size_t>(peer) * connChannels_ + channel;
  if (RecvConnection* c = recv_[idx].load(std::memory_order_acquire)) return c;
  TH_ASSIGN(Backend * backend, backendFor(peer));
  std::unique_ptr<RecvConnection> conn;
  TH_ASSIGN(conn, backend->connectRecv(peer, channel, &recvCounters_[idx]));
  if (emulation_) conn = emulation_->wrapRecv(std::move(conn), peer);
  RecvConnection* raw = conn.get();
  ownedRecv_.push_back(std::move(conn));
  recv_[idx].store(raw, std::memory_order_release);
  return raw;
}

int64_t TransportManagerImpl::connectTimeoutMs() const {
  return options_.connectTimeoutMs > 0 ? options_.connectTimeoutMs : config_.connectTimeoutMs;
}

std::string TransportManagerImpl::pendingReceives(const std::vector<int>& peers, int channels) {
  std::string out;
  for (const auto& b : backends_) {
    std::string part = b->pendingReceives(peers, channels);
    if (!part.empty()) out += (out.empty() ? "" : ", ") + part;
  }
  return out;
}

// Eager connection set-up: both directions to every listed peer. Sends first:
// connectTo never waits for the peer, so every rank gets its own connections out
// before it waits (up to the connect timeout) for the peers' ones.
Status TransportManagerImpl::prepare(const std::vector<int>& peers, int channels) {
  if (channels < 1 || channels > channels_)
    return invalidArgument("prepare: %d channels requested, the communicator has %d", channels, channels_);
  for (int peer : peers) {
    if (peer == rank_) continue;
    for (int c = 0; c < channels; ++c) TH_CHECK(sendConnection(peer, c).status().withContext("prepare"));
  }
  std::vector<RecvConnection*> recvs;
  for (int peer : peers) {
    if (peer == rank_) continue;
    for (int c = 0; c < channels; ++c) {
      auto r = recvConnection(peer, c);
      if (!r.isOk()) return r.status().withContext("prepare");
      recvs.push_back(r.value());
    }
  }
  int64_t timeout = connectTimeoutMs();
  Deadline deadline = Deadline::afterMs(timeout);
  for (;;) {
    uint32_t token = doorbellToken(bell_);
    std::string pending = pendingReceives(peers, channels);
    if (pending.empty()) break;
    if (options_.abort != nullptr && options_.abort->isSet())
      return remoteError("prepare: communicator aborted while waiting for connections from %s", pending.c_str());
    if (deadline.expired())
      return remoteError("prepare: no TCP connection from %s within %lld ms", pending.c_str(),
                         static_cast<long long>(timeout));
    sleepOnDoorbell(bell_, token, 10000);
  }
  for (RecvConnection* r : recvs) TH_CHECK(r->progress().withContext("prepare"));
  return Status::ok();
}

Kind TransportManagerImpl::kindFor(int peer) const {
  if (peer < 0 || peer >= nranks_ || byPeer_[static_cast<size_t>(peer)] == nullptr) return Kind::kSocket;
  return byPeer_[static_cast<size_t>(peer)]->kind();
}

uint64_t TransportManagerImpl::activityToken() const { return doorbellToken(bell_); }

// An idle pass polls every connection of the plan; over TCP each poll is a recv() system
// call. When this machine's ranks outnumber its cores, the thousands of passes before a
// sleep take the core the peers (and the kernel's TCP processing for them) need, while a
// sleep in ppoll() wakes as soon as data arrives. So with sockets on shared cores the
// executor sleeps after a few passes (4 ranks on 2 cores in network namespaces, 16 MiB
// allreduce over TCP: 0.16 GB/s busbw after 2,000 yielding passes, 0.24-0.28 after 20).
// Shared memory alone keeps the configured passes: its peers' doorbell is a futex whose
// wake-ups cost more than the yields (progress.cc).
int64_t TransportManagerImpl::idlePassesBeforeSleep(int64_t configured) const {
  constexpr int64_t kSharedCoresSocketPasses = 16;
  return sleepEarly_ ? std::min(configured, kSharedCoresSocketPasses) : configured;
}

// Sleeps until the doorbell moves past `token`, a backend's descriptor becomes
// ready, or the timeout passes. Shared-memory peers ring the futex; sockets
// need poll(). With both, poll() runs in 100 us slices with the doorbell
// checked in between (socket latency across hosts dwarfs the slice).
void TransportManagerImpl::waitForActivity(uint64_t token, int64_t timeoutUs) {
  if (emulation_) timeoutUs = emulation_->clampWaitUs(timeoutUs);
  if (timeoutUs <= 0) return;
  uint32_t tok = static_cast<uint32_t>(token);
  uint64_t start = nowNs();
  uint64_t deadlineNs = start + static_cast<uint64_t>(timeoutUs) * 1000;
  if (spin_ && spinOnce(tok, start, timeoutUs)) return;
  thread_local std::vector<struct pollfd> fds;
  fds.clear();
  fds.push_back({wakeFd_, POLLIN, 0});
  bool polls = false;
  for (const auto& b : backends_) polls |= b->addPollFds(&fds);
  if (!polls) {
    uint64_t now = nowNs();
    if (now < deadlineNs) sleepOnDoorbell(bell_, tok, static_cast<int64_t>((deadlineNs - now) / 1000));
    return;
  }
  waitPolling(fds, tok, deadlineNs);
}

// Adaptive spinning. Spinning pays only while the peers really run at the same
// time as we do; on a machine whose cores are busy with other work it burns the
// time slice the peer is waiting for (measured: 8-byte ping-pong p50 4 us with
// futex sleeps alone, 45 us with a fixed 20 us spin, under load). So the budget
// halves after every spin that ended in a sleep and grows back after spins that
// saw the doorbell; at zero, every 64th wait probes with a short spin.
bool TransportManagerImpl::spinOnce(uint32_t token, uint64_t start, int64_t timeoutUs) {
  uint64_t maxNs = static_cast<uint64_t>(config_.spinUs) * 1000;
  uint64_t budget = spinBudgetNs_;
  if (budget == 0 && (++spinProbe_ & 63) == 0) budget = std::min<uint64_t>(maxNs, 2000);
  budget = std::min<uint64_t>(budget, static_cast<uint64_t>(timeoutUs) * 1000);
  if (budget == 0) return false;
  uint64_t end = start + budget;
  for (int i = 0;; ++i) {
    if (doorbellToken(bell_) != token) {
      spinBudgetNs_ = std::min<uint64_t>(maxNs, spinBudgetNs_ * 2 + 1000);
      return true;
    }
    if ((i & 63) == 63 && nowNs() >= end) break;
    cpuRelax();
  }
  spinBudgetNs_ /= 2;
  if (spinBudgetNs_ < 500) spinBudgetNs_ = 0;
  return false;
}

void TransportManagerImpl::waitPolling(std::vector<struct pollfd>& fds, uint32_t token, uint64_t deadlineNs) {
  bool mixed = bell_ != &localBell_;  // peers also ring the doorbell
  pollSleepers_.fetch_add(1, std::memory_order_seq_cst);
  for (;;) {
    if (doorbellToken(bell_) != token) break;
    uint64_t now = nowNs();
    if (now >= deadlineNs) break;
    uint64_t sliceNs = deadlineNs - now;
    if (mixed) sliceNs = std::min<uint64_t>(sliceNs, 100000);
    struct timespec ts = {static_cast<time_t>(sliceNs / 1000000000), static_cast<long>(sliceNs % 1000000000)};
    int rc = ppoll(fds.data(), fds.size(), &ts, nullptr);
    if (rc > 0 || (rc < 0 && errno != EINTR)) break;
  }
  pollSleepers_.fetch_sub(1, std::memory_order_seq_cst);
  uint64_t drain;
  (void)!read(wakeFd_, &drain, sizeof(drain));
}

uint64_t TransportManagerImpl::memoryBytes() const {
  uint64_t bytes = deviceFifos_ ? deviceFifos_->memoryBytes() : 0;
  for (const auto& b : backends_) bytes += b->memoryBytes();
  return bytes;
}

// Registered device buffers: the device FIFOs' export tables (shm/device_exports.h), when there are any.
DeviceExports* TransportManagerImpl::deviceExports() const {
  return deviceFifos_ != nullptr ? deviceFifos_->deviceExports() : nullptr;
}

Status TransportManagerImpl::registerDeviceBuffer(uint64_t id, const void* base, size_t size) {
  DeviceExports* x = deviceExports();
  return x != nullptr ? x->exportBuffer(id, base, size) : Status::ok();
}

void TransportManagerImpl::deregisterDeviceBuffer(uint64_t id) {
  if (DeviceExports* x = deviceExports()) x->withdraw(id);
}

DeviceExportRef TransportManagerImpl::deviceExport(const void* p, size_t bytes) const {
  DeviceExports* x = deviceExports();
  return x != nullptr ? x->find(p, bytes) : DeviceExportRef{};
}

void TransportManagerImpl::refreshDeviceImports() {
  if (DeviceExports* x = deviceExports()) x->refresh();
}

// Local peers: the shm backend's device FIFOs. Peers on other hosts: a proxied FIFO
// (fifo_proxy.h) over a connection of the second channel set (channel + channels_).
Result<DeviceFifo> TransportManagerImpl::deviceFifo(int peer, int channel, bool send) {
  if (deviceFifos_ == nullptr) return invalidUsage("this communicator has no device FIFOs (THESEUS_DEVICE_EXECUTOR)");
  if (peer < 0 || peer >= nranks_ || peer == rank_ || channel < 0 || channel >= channels_)
    return checkEndpoint(peer, channel);
  const size_t idx = (static_cast<size_t>(peer) * channels_ + channel) * 2 + (send ? 1 : 0);
  if (deviceFifoReady_[idx].load(std::memory_order_acquire)) return deviceFifoCache_[idx];  // every warm call
  FifoProxy* proxy = nullptr;
  {
    std::lock_guard lock(mu_);
    if (deviceFifoReady_[idx].load(std::memory_order_relaxed)) return deviceFifoCache_[idx];
    if (deviceFifos_->canConnect(peer)) {
      TH_ASSIGN(deviceFifoCache_[idx], deviceFifos_->deviceFifo(peer, channel, send));
      deviceFifoReady_[idx].store(true, std::memory_order_release);
      return deviceFifoCache_[idx];
    }
    if (proxy_ == nullptr) {
      const int base = channels_;
      proxy_ = std::make_unique<FifoProxy>(
          [this, base](int p, int c) { return createSend(p, base + c); },
          [this, base](int p, int c) { return createRecv(p, base + c); }, config_.shmSlots, config_.shmSlotBytes,
          options_.deviceFifoSlotsOnGpu && config_.netGdrRead ? options_.cudaDev : -1,
          options_.deviceFifoSlotsOnGpu ? options_.cudaDev : -1);
      proxy_->setFailureSink(&failures_);
    }
    proxy = proxy_.get();
  }
  // Outside mu_: making the connection takes it.
  TH_ASSIGN(DeviceFifo f, proxy->fifo(peer, channel, send));
  std::lock_guard lock(mu_);
  if (!deviceFifoReady_[idx].load(std::memory_order_relaxed)) {
    deviceFifoCache_[idx] = f;
    deviceFifoReady_[idx].store(true, std::memory_order_release);
  }
  return f;
}

Status TransportManagerImpl::asyncFailure() const {
  TH_CHECK(failures_.get());
  return proxy_ != nullptr ? proxy_->failure() : Status::ok();
}

std::vector<std::pair<std::string, double>> TransportManagerImpl::setUpAttributes() const {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& b : backends_) b->setUpAttributes(&out);
  return out;
}

std::vector<std::pair<std::string, double>> TransportManagerImpl::liveAttributes() const {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& b : backends_) b->liveAttributes(&out);
  return out;
}

void TransportManagerImpl::deregisterUserBuffer(uint64_t id) {
  userBuffers_.remove(id);  // no new zero-copy send from it ...
  for (const auto& b : backends_) b->forgetUserBuffer(id);  // ... and what the networks registered goes
}

void TransportManagerImpl::setNicMove(int move) {
  for (const auto& b : backends_) b->setNicMove(move);
}

PeerStats TransportManagerImpl::stats(int peer) const {
  PeerStats s;
  if (peer < 0 || peer >= nranks_) return s;
  for (int c = 0; c < connChannels_; ++c) {  // proxied device FIFOs' connections included
    const ConnectionCounters& out = sendCounters_[static_cast<size_t>(peer) * connChannels_ + c];
    const ConnectionCounters& in = recvCounters_[static_cast<size_t>(peer) * connChannels_ + c];
    s.bytesSent += out.bytes.load(std::memory_order_relaxed);
    s.messagesSent += out.messages.load(std::memory_order_relaxed);
    s.sendBusyNs += out.timeNs.load(std::memory_order_relaxed);
    s.linkBusyNs += out.linkBusyNs.load(std::memory_order_relaxed);
    s.bytesReceived += in.bytes.load(std::memory_order_relaxed);
    s.messagesReceived += in.messages.load(std::memory_order_relaxed);
    s.recvWaitNs += in.timeNs.load(std::memory_order_relaxed);
  }
  return s;
}

// Backends set up in order; each peer goes to the first that can connect it
// (both ranks of a pair decide alike: every backend's answer is symmetric).
Status TransportManagerImpl::setUp() {
  BackendContext ctx;
  ctx.boot = &boot_;
  ctx.config = config_;
  ctx.rank = rank_;
  ctx.nranks = nranks_;
  ctx.channels = channels_;
  ctx.connectTimeoutMs = connectTimeoutMs();
  ctx.abort = options_.abort;
  ctx.wake = &wakeManager;
  ctx.wakeCtx = this;
  ctx.failures = &failures_;
  ctx.userBuffers = &userBuffers_;
  ctx.gdrDevice = options_.deviceFifos && options_.deviceFifoSlotsOnGpu ? options_.cudaDev : -1;
  TH_ASSIGN(backends_, makeBackends(ctx, options_.backends));
  for (const auto& b : backends_) TH_CHECK(b->setUp().withContext(std::string(kindName(b->kind())) + " set-up"));
  for (const auto& b : backends_) {
    std::vector<bool> mine(static_cast<size_t>(nranks_), false);
    for (int p = 0; p < nranks_; ++p) {
      if (p == rank_ || byPeer_[p] != nullptr || !b->canConnect(p)) continue;
      byPeer_[p] = b.get();
      mine[p] = true;
    }
    b->assigned(mine);
    if (DoorbellWord* bell = b->doorbell(); bell != nullptr && bell_ == &localBell_) bell_ = bell;
  }
  if (options_.deviceFifos) {
    deviceFifos_ = std::make_unique<ShmBackend>(ctx, true, ShmBackend::Role::kDeviceFifos,
                                                options_.deviceFifoSlotsOnGpu && !ctx.config.p2pDisable);
    TH_CHECK(deviceFifos_->setUp().withContext("device FIFO set-up"));
  }
  // Ranks on this machine share its cores whatever host they count as (network namespaces,
  // containers): spinning pays only when each of them has a core of its own.
  const auto& peers = boot_.peers();
  int onMachine = 0;
  for (const auto& p : peers) onMachine += p.machineHash == peers[static_cast<size_t>(rank_)].machineHash;
  onMachine = std::max(onMachine, static_cast<int>(boot_.localRanks().size()));
  spin_ = config_.spinUs > 0 && usableCpus() >= onMachine;
  sharesCores_ = usableCpus() < onMachine;
  spinBudgetNs_ = spin_ ? static_cast<uint64_t>(config_.spinUs) * 1000 : 0;
  for (int p = 0; p < nranks_; ++p)
    sleepEarly_ |= sharesCores_ && byPeer_[static_cast<size_t>(p)] != nullptr &&
                   byPeer_[static_cast<size_t>(p)]->wakesThroughDescriptors();
  std::string summary;
  for (const auto& b : backends_) {
    std::string part = b->summary();
    if (!part.empty()) summary += (summary.empty() ? "" : ", ") + part;
  }
  if (deviceFifos_ != nullptr) summary += ", " + deviceFifos_->summary();
  TH_INFO(log::kInit | log::kShm | log::kNet, "rank %d transports: %s%s", rank_, summary.c_str(),
          spin_ ? " (spinning before sleeping)" : "");
  return Status::ok();
}

Result<std::unique_ptr<TransportManager>> createTransportManager(bootstrap::Bootstrap& bootstrap,
                                                                 const TransportOptions& options) {
  TH_ASSIGN(TransportConfig config, readTransportConfig());
  if (options.maxChannels > 256) return invalidArgument("maxChannels %d is more than 256", options.maxChannels);
  auto m = std::make_unique<TransportManagerImpl>(bootstrap, options, config);
  std::unique_ptr<LinkEmulation> emulation;
  TH_ASSIGN(emulation, LinkEmulation::fromEnv(bootstrap.rank(), bootstrap.nranks()));
  m->setEmulation(std::move(emulation));
  TH_CHECK(m->setUp().withContext("transport set-up"));
  return std::unique_ptr<TransportManager>(std::move(m));
}

}  // namespace theseus::transport
