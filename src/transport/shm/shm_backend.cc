// The shared-memory backend (shm_domain.h): its collective set-up, run by
// every rank when the TransportManager is created, and its connections.
//
// Round 1 (allGather): each rank publishes its pid, a random per-process
// cookie, whether it offers shared memory, its inbox locator and the locator of
// its zero-copy probe region (SharedMemoryRegistry::probeLocator).
// Each rank then tries, for every peer on its host that offers shm, to map the
// peer's inbox and to open the peer's probe region.
// Device FIFOs whose slots live in GPU memory (device_inbox.h) also publish
// their device inbox's locator in round 1, and each rank opens its peers'.
// Round 2 (allGather): each rank publishes, per peer, "I mapped your inbox",
// "I can map your memory" and "I opened your device inbox". A pair uses shm only when both mapped each other,
// so both sides always agree on the transport of the pair (a rank with
// NCCL_SHM_DISABLE=1, or a container that cannot see a peer's /dev/shm, makes
// the pair fall back to TCP instead of hanging). A sender sends zero-copy only
// when the receiver said it can map the sender's memory. Round 2 is also the
// barrier after which nobody needs an inbox's name, so every rank unlinks its
// own: from then on a crash leaves nothing behind in /dev/shm.
// Both rounds run only when some rank offers shm, which every rank can tell
// from round 1, so all ranks make the same number of bootstrap calls.
#include <unistd.h>

#include <tuple>

#include <cinttypes>
#include <cstdio>
#include <mutex>
#include <random>
#include <sstream>

#include "common/log.h"
#include "transport/shared_memory_registry.h"
#include "transport/shm/device_exports.h"
#include "transport/shm/device_inbox.h"
#include "transport/shm/shm_backend.h"

namespace theseus::transport {

struct ShmBackend::PeerSetup {
  int pid = 0;
  uint64_t cookie = 0;
  bool shm = false;
  std::string inbox;
  std::string probe;
  std::string deviceInbox;  // "" when its device FIFOs keep host slots
  std::string deviceExports;  // "" without zero-copy reads of registered device buffers
};

namespace {

// Random per process, regenerated after fork(): equal pid and cookie means the
// same address space (ranks as threads of one process).
uint64_t processCookie() {
  static std::mutex mu;
  static int pid = 0;
  static uint64_t cookie = 0;
  std::lock_guard lock(mu);
  if (pid != getpid()) {
    pid = getpid();
    std::random_device rd;
    cookie = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(pid);
  }
  return cookie;
}

constexpr const char* kSetupVersion = "theseus-transport 3";

std::string encodeSetup(int pid, uint64_t cookie, bool shm, const std::string& inbox, const std::string& probe,
                        const std::string& deviceInbox, const std::string& deviceExports) {
  char head[128];
  snprintf(head, sizeof(head), "%s\n%d\n%016" PRIx64 "\n%d\n", kSetupVersion, pid, cookie, shm ? 1 : 0);
  return std::string(head) + inbox + "\n" + probe + "\n" + deviceInbox + "\n" + deviceExports + "\n";
}

bool decodeSetup(const std::string& text, int* pid, uint64_t* cookie, bool* shm, std::string* inbox,
                 std::string* probe, std::string* deviceInbox, std::string* deviceExports) {
  std::istringstream in(text);
  std::string version, pidText, cookieText, shmText;
  if (!std::getline(in, version) || version != kSetupVersion) return false;
  if (!std::getline(in, pidText) || !std::getline(in, cookieText) || !std::getline(in, shmText)) return false;
  if (!std::getline(in, *inbox) || !std::getline(in, *probe) || !std::getline(in, *deviceInbox) ||
      !std::getline(in, *deviceExports))
    return false;
  char* end = nullptr;
  long p = strtol(pidText.c_str(), &end, 10);
  if (*end != '\0' || p <= 0) return false;
  *pid = static_cast<int>(p);
  *cookie = strtoull(cookieText.c_str(), &end, 16);
  if (*end != '\0' || (shmText != "0" && shmText != "1")) return false;
  *shm = shmText == "1";
  return true;
}

}  // namespace

ShmBackend::ShmBackend(const BackendContext& ctx, bool enabled, Role role, bool slotsOnDevice)
    : ctx_(ctx),
      enabled_(enabled),
      role_(role),
      slotsOnDevice_(slotsOnDevice && role == Role::kDeviceFifos),
      mine_(static_cast<size_t>(ctx.nranks), false),
      sendOnDevice_(static_cast<size_t>(ctx.nranks), false),
      recvOnDevice_(static_cast<size_t>(ctx.nranks), false),
      directOnDevice_(static_cast<size_t>(ctx.nranks), false) {}

ShmBackend::~ShmBackend() {
  deviceExports_.reset();
  deviceInbox_.reset();
  regions_.reset();  // unmaps peers' regions before the domain goes
  domain_.reset();
}

Status ShmBackend::setUp() {
  if (ctx_.nranks == 1) return Status::ok();
  bootstrap::Bootstrap& boot = *ctx_.boot;
  const auto& local = boot.localRanks();
  bool offerShm = enabled_ && (role_ == Role::kDeviceFifos || ctx_.config.mode == TransportMode::kAuto) &&
                  local.size() > 1;
  std::string probe;
  if (offerShm) {
    ShmDomainParams p;
    p.commHash = boot.commHash();
    p.rank = ctx_.rank;
    p.localIndex = boot.localRank();
    p.nLocal = static_cast<int>(local.size());
    p.nChannels = ctx_.channels;
    p.slots = ctx_.config.shmSlots;
    p.slotBytes = ctx_.config.shmSlotBytes;
    p.nameSuffix = role_ == Role::kDeviceFifos ? "-dev" : "";
    auto d = ShmDomain::create(p);
    auto pr = SharedMemoryRegistry::instance().probeLocator();
    if (d.isOk() && pr.isOk()) {
      domain_ = d.take();
      probe = pr.value();
    } else {
      // Not fatal: this rank's peers on the host will use the next backend (TCP) with it.
      TH_WARN("shared-memory transport unavailable, using TCP for local peers: %s",
              (d.isOk() ? pr.status() : d.status()).message().c_str());
      offerShm = false;
    }
  }
  if (offerShm && slotsOnDevice_) {
    auto d = DeviceInbox::create(domain_->deviceInboxBytes(-1), domain_->dataAreaBytes(-1), getpid(),
                                 processCookie());
    if (d.isOk())
      deviceInbox_ = d.take();
    else
      TH_WARN("device FIFOs keep their slots in host memory (no CUDA IPC): %s", d.status().message().c_str());
  }
  if (deviceInbox_ != nullptr) {
    auto x = DeviceExports::create(boot.commHash(), ctx_.rank, boot.localRank(), static_cast<int>(local.size()),
                                   getpid(), processCookie());
    if (x.isOk())
      deviceExports_ = x.take();
    else
      TH_INFO(log::kShm | log::kInit, "registered device buffers are not read in place by local peers: %s",
              x.status().message().c_str());
  }
  std::string mine = encodeSetup(getpid(), processCookie(), offerShm, domain_ ? domain_->locator() : "", probe,
                                 deviceInbox_ ? deviceInbox_->locator() : "",
                                 deviceExports_ ? deviceExports_->locator() : "");
  std::vector<std::string> gathered;
  TH_CHECK(boot.allGather(mine, &gathered).withContext("exchanging transport set-up"));
  if (gathered.size() != static_cast<size_t>(ctx_.nranks))
    return internalError("transport set-up: allGather returned %zu entries for %d ranks", gathered.size(),
                         ctx_.nranks);
  std::vector<PeerSetup> all(ctx_.nranks);
  bool anyShm = false;
  for (int r = 0; r < ctx_.nranks; ++r) {
    PeerSetup& s = all[r];
    if (!decodeSetup(gathered[r], &s.pid, &s.cookie, &s.shm, &s.inbox, &s.probe, &s.deviceInbox, &s.deviceExports))
      return remoteError("rank %d published malformed transport set-up (a different library version?)", r);
    anyShm |= s.shm;
  }
  if (anyShm) TH_CHECK(mapPeers(all));
  if (peerCount_ == 0) {
    deviceExports_.reset();
    deviceInbox_.reset();
    domain_.reset();
  }
  if (domain_ != nullptr) regions_ = std::make_unique<RegionCache>(ctx_.config.regionCacheEntries);
  return Status::ok();
}

Status ShmBackend::mapPeers(const std::vector<PeerSetup>& all) {
  bootstrap::Bootstrap& boot = *ctx_.boot;
  const int rank = ctx_.rank, nranks = ctx_.nranks;
  const auto& peers = boot.peers();
  const auto& local = boot.localRanks();
  const PeerSetup& me = all[rank];
  // Per peer: bit 0 = mapped its inbox, bit 1 = can map its memory, bit 2 = opened its device inbox,
  // bit 3 = mapped its device export table (zero-copy reads of its registered buffers).
  std::string flags(nranks, '0');
  for (size_t li = 0; li < local.size() && domain_ != nullptr; ++li) {
    int r = local[li];
    if (r == rank || r < 0 || r >= nranks || !all[r].shm) continue;
    if (peers[r].hostHash != peers[rank].hostHash) continue;
    ShmPeerInfo info;
    info.rank = r;
    info.localIndex = static_cast<int>(li);
    info.pid = all[r].pid;
    info.sameProcess = all[r].pid == me.pid && all[r].cookie == me.cookie;
    bool memOk = info.sameProcess;
    if (!memOk) {
      auto seg = ShmSegment::open(all[r].probe, 0, true);
      memOk = seg.isOk();
      if (!memOk)
        TH_INFO(log::kShm, "zero-copy from rank %d disabled: %s", r, seg.status().message().c_str());
    }
    info.checkLiveness = memOk && !info.sameProcess;  // its pid is meaningful in our namespace
    Status s = domain_->mapPeer(info, all[r].inbox);
    if (!s.isOk()) TH_WARN("cannot map rank %d's shared-memory inbox, using TCP with it: %s", r, s.message().c_str());
    bool deviceOk = false;
    if (s.isOk() && deviceInbox_ != nullptr && !all[r].deviceInbox.empty()) {
      Status d = deviceInbox_->openPeer(r, all[r].deviceInbox, domain_->deviceInboxBytes(r));
      deviceOk = d.isOk();
      if (!deviceOk)
        TH_WARN("device FIFOs to rank %d keep their slots in host memory: %s", r, d.message().c_str());
    }
    bool exportsOk = false;
    if (deviceOk && deviceExports_ != nullptr && !all[r].deviceExports.empty()) {
      Status x = deviceExports_->openPeer(r, static_cast<int>(li), all[r].deviceExports);
      exportsOk = x.isOk();
      if (!exportsOk)
        TH_INFO(log::kShm, "rank %d's registered device buffers are read through FIFO slots: %s", r,
                x.message().c_str());
    }
    flags[r] = static_cast<char>('0' + (s.isOk() ? 1 : 0) + (memOk ? 2 : 0) + (deviceOk ? 4 : 0) + (exportsOk ? 8 : 0));
  }
  std::vector<std::string> gathered;
  TH_CHECK(boot.allGather(flags, &gathered).withContext("exchanging shared-memory mapping results"));
  if (gathered.size() != static_cast<size_t>(nranks))
    return internalError("transport set-up: allGather returned %zu entries for %d ranks", gathered.size(), nranks);
  for (int r = 0; r < nranks; ++r) {
    if (r == rank || domain_ == nullptr || !domain_->hasPeer(r)) continue;
    const std::string& theirs = gathered[r];
    if (theirs.size() != static_cast<size_t>(nranks))
      return remoteError("rank %d published malformed shared-memory mapping results", r);
    int bits = theirs[rank] - '0';
    if ((bits & 1) && (flags[r] - '0') & 1) {
      mine_[r] = true;
      ++peerCount_;
      domain_->setDirectOk(r, (bits & 2) != 0);
      sendOnDevice_[r] = ((flags[r] - '0') & 4) != 0;  // this rank writes into r's device inbox
      recvOnDevice_[r] = (bits & 4) != 0;              // r writes into this rank's
      // Zero-copy both ways only when both mapped each other's export tables (so both sides agree).
      directOnDevice_[r] = sendOnDevice_[r] && recvOnDevice_[r] && (bits & 8) && ((flags[r] - '0') & 8);
    } else {
      domain_->dropPeer(r);
    }
  }
  if (domain_ != nullptr) domain_->unlinkOwn();
  if (deviceExports_ != nullptr) deviceExports_->unlinkOwn();
  return Status::ok();
}

bool ShmBackend::canConnect(int peer) const {
  return peer >= 0 && peer < ctx_.nranks && mine_[static_cast<size_t>(peer)];
}

Result<std::unique_ptr<SendConnection>> ShmBackend::connectSend(int peer, int channel, ConnectionCounters* counters) {
  if (!canConnect(peer)) return internalError("rank %d is not a shared-memory peer", peer);
  return domain_->connectSend(peer, channel, counters, ctx_.config.useDirect);
}

Result<std::unique_ptr<RecvConnection>> ShmBackend::connectRecv(int peer, int channel, ConnectionCounters* counters) {
  if (!canConnect(peer)) return internalError("rank %d is not a shared-memory peer", peer);
  return domain_->connectRecv(peer, channel, counters, regions_.get());
}

DoorbellWord* ShmBackend::doorbell() { return domain_ != nullptr ? domain_->bell() : nullptr; }

std::string ShmBackend::summary() const {
  if (role_ != Role::kDeviceFifos) return std::to_string(peerCount_) + " peers over shm";
  int onDevice = 0, direct = 0;
  for (int r = 0; r < ctx_.nranks; ++r) {
    onDevice += sendOnDevice_[r] && recvOnDevice_[r];
    direct += directOnDevice_[r];
  }
  return std::to_string(peerCount_) + " with device FIFOs" +
         (slotsOnDevice_ ? " (slots in GPU memory with " + std::to_string(onDevice) + ")" : "") +
         (direct > 0 ? ", registered buffers read in place by " + std::to_string(direct) : "");
}

uint64_t ShmBackend::memoryBytes() const { return domain_ ? domain_->inboxBytes() : 0; }

Result<DeviceFifo> ShmBackend::deviceFifo(int peer, int channel, bool send) {
  if (!canConnect(peer)) return invalidUsage("rank %d has no device FIFOs with rank %d", ctx_.rank, peer);
  shm::FifoView v;
  const bool onDevice = send ? sendOnDevice_[peer] : recvOnDevice_[peer];  // then the host data pages stay unused
  TH_ASSIGN(v, send ? domain_->sendFifo(peer, channel, !onDevice) : domain_->recvFifo(peer, channel, !onDevice));
  DeviceFifo f;
  f.control = v.ctl;
  f.headers = v.headers;
  f.data = v.data;
  f.slots = v.slots;
  f.slotBytes = v.slotBytes;
  f.memory = device::MemoryKind::kHost;
  std::tie(f.segmentBase, f.segmentBytes) = domain_->segmentOf(peer, send);
  if (onDevice) {
    // The whole FIFO in the receiver's GPU memory: slots, and after the data areas its control block (counters
    // and slot headers), so the flags the kernels poll never cross PCIe. Nothing of the host inbox is used
    // (its data pages are never allocated, nothing needs registering).
    char* area = send ? deviceInbox_->peerBase(peer) : deviceInbox_->base();
    f.data = area + v.areaOffset;
    char* control = area + domain_->dataAreaBytes(send ? peer : -1) + v.controlAreaOffset;
    f.control = control;
    f.headers = control + sizeof(shm::FifoControl);
    f.memory = device::MemoryKind::kDevice;
    f.segmentBase = nullptr;
    f.segmentBytes = 0;
  }
  if (directOnDevice_[peer]) {
    if (send) f.directAcks = deviceExports_->acksFrom(peer);
    else f.directImports = deviceExports_->importsOf(peer);
    std::tie(f.directTablesBase, f.directTablesBytes) = deviceExports_->segment();
  }
  return f;
}

}  // namespace theseus::transport
