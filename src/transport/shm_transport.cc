#include "transport/shm_transport.h"

#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "common/deadline.h"
#include "common/log.h"
#include "transport/shared_memory_registry.h"

namespace theseus::transport {

using shm::FifoControl;
using shm::InboxHeader;
using shm::SlotHeader;

// ---------------------------------------------------------------------------
// PeerLiveness

namespace {

// State letter and start time (clock ticks since boot) of a process; false when it is gone.
bool readProcStat(int pid, char* state, uint64_t* startTime) {
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE* f = fopen(path, "re");
  if (f == nullptr) return false;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  // "pid (comm) S ppid ...": comm may hold spaces or ')', so parse after the last ')'.
  const char* p = strrchr(buf, ')');
  if (p == nullptr || p[1] != ' ') return false;
  *state = p[2];
  // Field 22 (starttime) is the 20th field after the state.
  const char* q = p + 2;
  for (int field = 3; field < 22 && q != nullptr; ++field) {
    q = strchr(q, ' ');
    if (q != nullptr) ++q;
  }
  *startTime = q != nullptr ? strtoull(q, nullptr, 10) : 0;
  return true;
}

}  // namespace

PeerLiveness::PeerLiveness(int rank, int pid) : rank_(rank), pid_(pid) {
  char state;
  if (!readProcStat(pid, &state, &startTime_)) startTime_ = 0;
}

Status PeerLiveness::check() {
  if (!exited_) {
    if ((++calls_ & 63) != 0) return Status::ok();  // the clock itself only every 64th call (idle spins call this)
    uint64_t now = nowNs();
    if (now < nextCheckNs_) return Status::ok();
    nextCheckNs_ = now + 100 * 1000 * 1000;
    char state = 0;
    uint64_t start = 0;
    exited_ = !readProcStat(pid_, &state, &start) || state == 'Z' || state == 'X' ||
              (startTime_ != 0 && start != startTime_);
    if (!exited_) return Status::ok();
  }
  return remoteError("rank %d (pid %d on this host) exited while connected through shared memory", rank_, pid_);
}

// ---------------------------------------------------------------------------
// Peer state and the FIFO geometry both sides agree on.

struct ShmDomain::Peer {
  ShmPeerInfo info;
  std::unique_ptr<ShmSegment> inbox;  // the peer's inbox, mapped here
  InboxHeader* header = nullptr;
  // Geometry copied from the validated header (never re-read from shared memory).
  uint32_t nChannels = 0;
  uint32_t slots = 0;
  uint64_t slotBytes = 0;
  uint64_t controlOffset = 0, controlStride = 0, dataOffset = 0, dataStride = 0;
  std::unique_ptr<PeerLiveness> liveness;
};

namespace {

// ThreadSanitizer tracks memory by virtual address; the two ends of a FIFO
// reach its counters through two different mappings of the same pages, so it
// cannot see their release/acquire pairs. Under TSAN both ends also release and
// acquire a key derived from the FIFO's identity (ranks as threads of one process).
#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
char gTsanKeys[4096];
void* tsanKey(uint64_t commHash, int sender, int receiver, int channel) {
  uint64_t h = commHash ^ (uint64_t(sender) * 0x9e3779b97f4a7c15ull) ^ (uint64_t(receiver) << 20) ^ uint64_t(channel);
  return &gTsanKeys[(h ^ (h >> 29)) % sizeof(gTsanKeys)];
}
inline void tsanRelease(void* key) { __tsan_release(key); }
inline void tsanAcquire(void* key) { __tsan_acquire(key); }
#else
inline void* tsanKey(uint64_t, int, int, int) { return nullptr; }
inline void tsanRelease(void*) {}
inline void tsanAcquire(void*) {}
#endif

struct FifoView {
  FifoControl* ctl;
  SlotHeader* headers;
  char* data;
  uint32_t slots;
  uint64_t slotBytes;
  size_t dataOffset;  // within its segment, for reserve()
  size_t dataBytes;
  void* syncKey;      // see tsanKey()
};

FifoView fifoAt(char* base, uint64_t controlOffset, uint64_t controlStride, uint64_t dataOffset, uint64_t dataStride,
                uint32_t slots, uint64_t slotBytes, size_t index) {
  FifoView v;
  char* ctl = base + controlOffset + index * controlStride;
  v.ctl = reinterpret_cast<FifoControl*>(ctl);
  v.headers = reinterpret_cast<SlotHeader*>(ctl + sizeof(FifoControl));
  v.dataOffset = dataOffset + index * dataStride;
  v.data = base + v.dataOffset;
  v.slots = slots;
  v.slotBytes = slotBytes;
  v.dataBytes = static_cast<size_t>(slots) * slotBytes;
  v.syncKey = nullptr;
  return v;
}

// ---------------------------------------------------------------------------
// Send side: writes into the peer's inbox.

class ShmSendConnection final : public SendConnection {
 public:
  ShmSendConnection(int peer, const FifoView& fifo, DoorbellWord* peerBell, ConnectionCounters* counters,
                    PeerLiveness* liveness, bool direct, bool sameProcess)
      : peer_(peer), fifo_(fifo), peerBell_(peerBell), counters_(counters), liveness_(liveness), direct_(direct),
        sameProcess_(sameProcess) {
    head_ = fifo_.ctl->head.load(std::memory_order_relaxed);
    cachedTail_ = fifo_.ctl->tail.load(std::memory_order_acquire);
  }

  Kind kind() const override { return Kind::kShm; }
  int peer() const override { return peer_; }
  size_t slotBytes() const override { return fifo_.slotBytes; }

  bool tryAcquire(SendSlot* slot) override {
    if (head_ - cachedTail_ >= fifo_.slots) {
      refreshTail();
      if (head_ - cachedTail_ >= fifo_.slots) return false;
    }
    acquired_ = true;
    slot->data = fifo_.data + (head_ % fifo_.slots) * fifo_.slotBytes;
    slot->capacity = fifo_.slotBytes;
    return true;
  }

  uint64_t commitInline(size_t bytes, uint32_t tag) override {
    if (!checkCommit(bytes, "commitInline")) return 0;
    SlotHeader& h = fifo_.headers[head_ % fifo_.slots];
    h.bytes = bytes;
    h.tag = tag;
    h.kind = shm::kSlotInline;
    return publish(bytes);
  }

  bool canSendDirect(const void* src, size_t bytes) const override {
    if (!direct_) return false;
    if (sameProcess_) return true;
    SharedRegionRef ref;
    return SharedMemoryRegistry::instance().find(src, bytes, &ref);
  }

  uint64_t commitDirect(const void* src, size_t bytes, uint32_t tag) override {
    // No slot payload: a direct message may be larger than a slot.
    if (!checkCommit(0, "commitDirect")) return 0;
    SlotHeader& h = fifo_.headers[head_ % fifo_.slots];
    h.bytes = bytes;
    h.tag = tag;
    if (sameProcess_ && direct_) {
      h.kind = shm::kSlotDirectAddress;
      h.address = reinterpret_cast<uint64_t>(src);
    } else {
      SharedRegionRef ref;
      if (!direct_ || !SharedMemoryRegistry::instance().find(src, bytes, &ref)) {
        acquired_ = false;
        error_ = internalError("commitDirect to rank %d: [%p, +%zu) is not memory the peer can map", peer_, src, bytes);
        TH_WARN("%s", error_.message().c_str());
        return 0;
      }
      h.kind = shm::kSlotDirectRegion;
      h.pid = ref.pid;
      h.fd = ref.fd;
      h.regionId = ref.id;
      h.offset = ref.offset;
      h.regionBytes = ref.regionBytes;
    }
    return publish(bytes);
  }

  bool consumed(uint64_t ticket) const override {
    if (cachedTail_ >= ticket) return true;
    refreshTail();
    return cachedTail_ >= ticket;
  }

  Status progress() override {
    if (!error_.isOk()) return error_;
    refreshTail();
    if (cachedTail_ != head_) {
      Status s = liveness_ != nullptr ? liveness_->check() : Status::ok();
      if (!s.isOk()) error_ = s;
    }
    return error_;
  }

 private:
  bool checkCommit(size_t bytes, const char* what) {
    if (acquired_ && bytes <= fifo_.slotBytes) return true;
    error_ = internalError("%s to rank %d: %s", what, peer_,
                           acquired_ ? "message larger than the slot" : "no slot acquired");
    TH_WARN("%s (%zu bytes, slot %llu)", error_.message().c_str(), bytes,
            static_cast<unsigned long long>(fifo_.slotBytes));
    return false;
  }

  uint64_t publish(size_t bytes) {
    acquired_ = false;
    if (head_ == cachedTail_) busy_.begin();
    tsanRelease(fifo_.syncKey);
    fifo_.ctl->head.store(++head_, std::memory_order_release);
    ringDoorbell(peerBell_);
    counters_->addMessage(bytes);
    return head_;
  }

  void refreshTail() const {
    cachedTail_ = fifo_.ctl->tail.load(std::memory_order_acquire);
    tsanAcquire(fifo_.syncKey);
    if (cachedTail_ == head_) busy_.end(*counters_);
  }

  int peer_;
  FifoView fifo_;
  DoorbellWord* peerBell_;
  ConnectionCounters* counters_;
  PeerLiveness* liveness_;
  bool direct_;
  bool sameProcess_;
  bool acquired_ = false;
  uint64_t head_ = 0;
  mutable uint64_t cachedTail_ = 0;
  mutable IntervalClock busy_;
  Status error_;
};

// ---------------------------------------------------------------------------
// Receive side: reads this rank's own inbox.

class ShmRecvConnection final : public RecvConnection {
 public:
  ShmRecvConnection(int peer, int peerPid, const FifoView& fifo, DoorbellWord* peerBell, ConnectionCounters* counters,
                    PeerLiveness* liveness, RegionCache* regions, bool sameProcess)
      : peer_(peer), peerPid_(peerPid), fifo_(fifo), peerBell_(peerBell), counters_(counters), liveness_(liveness),
        regions_(regions), sameProcess_(sameProcess) {
    tail_ = fifo_.ctl->tail.load(std::memory_order_relaxed);
    cachedHead_ = fifo_.ctl->head.load(std::memory_order_acquire);
  }
  ~ShmRecvConnection() override { unpin(); }

  Kind kind() const override { return Kind::kShm; }
  int peer() const override { return peer_; }

  bool tryPeek(RecvMessage* msg) override {
    if (peeked_) {
      *msg = msg_;
      return true;
    }
    if (!error_.isOk()) return false;
    if (tail_ == cachedHead_) {
      cachedHead_ = fifo_.ctl->head.load(std::memory_order_acquire);
      if (tail_ == cachedHead_) {
        wait_.begin();
        return false;
      }
      if (cachedHead_ - tail_ > fifo_.slots) {
        error_ = remoteError("shared-memory FIFO from rank %d is corrupt (head %llu, tail %llu, %u slots)", peer_,
                             static_cast<unsigned long long>(cachedHead_), static_cast<unsigned long long>(tail_),
                             fifo_.slots);
        return false;
      }
    }
    wait_.end(*counters_);
    tsanAcquire(fifo_.syncKey);
    // A copy: the sender cannot touch this header until we release the slot, but
    // reading it once keeps validation and use consistent.
    SlotHeader h = fifo_.headers[tail_ % fifo_.slots];
    Status s = decode(h);
    if (!s.isOk()) {
      error_ = s;
      return false;
    }
    peeked_ = true;
    *msg = msg_;
    return true;
  }

  void release() override {
    if (!peeked_) return;
    unpin();
    peeked_ = false;
    tsanRelease(fifo_.syncKey);
    fifo_.ctl->tail.store(++tail_, std::memory_order_release);
    ringDoorbell(peerBell_);
    counters_->addMessage(msg_.bytes);
  }

  Status progress() override {
    if (!error_.isOk() || peeked_ || tail_ != cachedHead_ || liveness_ == nullptr) return error_;
    if (fifo_.ctl->head.load(std::memory_order_acquire) != tail_) return error_;
    Status s = liveness_->check();
    if (!s.isOk()) error_ = s;
    return error_;
  }

 private:
  Status decode(const SlotHeader& h) {
    msg_.bytes = h.bytes;
    msg_.tag = h.tag;
    switch (h.kind) {
      case shm::kSlotInline:
        if (h.bytes > fifo_.slotBytes) break;
        msg_.data = fifo_.data + (tail_ % fifo_.slots) * fifo_.slotBytes;
        msg_.direct = false;
        return Status::ok();
      case shm::kSlotDirectAddress:
        if (!sameProcess_) break;
        msg_.data = reinterpret_cast<const void*>(h.address);
        msg_.direct = true;
        return Status::ok();
      case shm::kSlotDirectRegion: {
        if (h.pid != peerPid_ || regions_ == nullptr) break;
        SharedRegionRef ref{h.pid, h.fd, h.regionId, h.offset, h.regionBytes};
        auto p = regions_->pin(ref, h.bytes);
        if (!p.isOk()) return p.status().withContext("receiving from rank " + std::to_string(peer_));
        pinned_ = true;
        pinPid_ = h.pid;
        pinId_ = h.regionId;
        msg_.data = p.value();
        msg_.direct = true;
        return Status::ok();
      }
      default:
        break;
    }
    return remoteError("rank %d wrote a malformed shared-memory message header (kind %u, %llu bytes, slot %llu bytes)",
                       peer_, h.kind, static_cast<unsigned long long>(h.bytes),
                       static_cast<unsigned long long>(fifo_.slotBytes));
  }

  void unpin() {
    if (!pinned_) return;
    regions_->unpin(pinPid_, pinId_);
    pinned_ = false;
  }

  int peer_;
  int peerPid_;
  FifoView fifo_;
  DoorbellWord* peerBell_;
  ConnectionCounters* counters_;
  PeerLiveness* liveness_;
  RegionCache* regions_;
  bool sameProcess_;
  uint64_t tail_ = 0;
  uint64_t cachedHead_ = 0;
  bool peeked_ = false;
  RecvMessage msg_;
  bool pinned_ = false;
  int32_t pinPid_ = 0;
  uint64_t pinId_ = 0;
  IntervalClock wait_;
  Status error_;
};

}  // namespace

// ---------------------------------------------------------------------------
// ShmDomain

ShmDomain::ShmDomain(const ShmDomainParams& p) : params_(p) {}
ShmDomain::~ShmDomain() = default;

Result<std::unique_ptr<ShmDomain>> ShmDomain::create(const ShmDomainParams& p) {
  if (p.nLocal < 1 || p.localIndex < 0 || p.localIndex >= p.nLocal || p.nChannels < 1)
    return internalError("bad shm domain geometry (local %d of %d, %d channels)", p.localIndex, p.nLocal, p.nChannels);
  std::unique_ptr<ShmDomain> d(new ShmDomain(p));
  size_t nFifos = static_cast<size_t>(p.nLocal) * static_cast<size_t>(p.nChannels);
  size_t controlOffset = roundUpToPage(sizeof(InboxHeader));
  size_t controlStride = shm::controlStride(p.slots);
  size_t dataOffset = roundUpToPage(controlOffset + nFifos * controlStride);
  size_t dataStride = roundUpToPage(static_cast<size_t>(p.slots) * p.slotBytes);
  size_t total = dataOffset + nFifos * dataStride;

  char name[96];
  snprintf(name, sizeof(name), "theseus-%016" PRIx64 "-r%d", p.commHash, p.rank);
  auto named = ShmSegment::createNamed(name, total);
  Status reserved = named.isOk() ? named.value()->reserve(0, dataOffset) : named.status();
  if (reserved.isOk()) {
    d->inbox_ = named.take();
  } else {
    // /dev/shm missing, read-only or full: a memfd lives outside it.
    TH_INFO(log::kShm | log::kInit, "shm inbox in /dev/shm failed (%s); using a memfd", reserved.message().c_str());
    TH_ASSIGN(d->inbox_, ShmSegment::createMemfd(name, total));
    TH_CHECK(d->inbox_->reserve(0, dataOffset));
  }

  char* base = d->inbox_->base();
  auto* h = new (base) InboxHeader();
  h->version = shm::kInboxVersion;
  h->rank = p.rank;
  h->commHash = p.commHash;
  h->nLocal = static_cast<uint32_t>(p.nLocal);
  h->nChannels = static_cast<uint32_t>(p.nChannels);
  h->slots = p.slots;
  h->slotBytes = p.slotBytes;
  h->controlOffset = controlOffset;
  h->controlStride = controlStride;
  h->dataOffset = dataOffset;
  h->dataStride = dataStride;
  h->totalBytes = total;
  for (size_t i = 0; i < nFifos; ++i) {
    auto* ctl = new (base + controlOffset + i * controlStride) FifoControl();
    ctl->head.store(0, std::memory_order_relaxed);
    ctl->tail.store(0, std::memory_order_relaxed);
  }
  // The magic goes last, with release: a peer that sees it sees the whole layout.
  __atomic_store_n(&h->magic, shm::kInboxMagic, __ATOMIC_RELEASE);
  d->header_ = h;
  d->controlOffset_ = controlOffset;
  d->controlStride_ = controlStride;
  d->dataOffset_ = dataOffset;
  d->dataStride_ = dataStride;
  TH_INFO(log::kShm | log::kInit, "shm inbox %s: %d local ranks x %d channels x %u slots x %zu bytes",
          d->inbox_->locator().c_str(), p.nLocal, p.nChannels, p.slots, p.slotBytes);
  return d;
}

Status ShmDomain::mapPeer(const ShmPeerInfo& info, const std::string& locator) {
  auto seg = ShmSegment::open(locator, sizeof(InboxHeader), false);
  if (!seg.isOk()) return seg.status();
  auto peer = std::make_unique<Peer>();
  peer->info = info;
  peer->inbox = seg.take();
  const auto* h = reinterpret_cast<const InboxHeader*>(peer->inbox->base());
  size_t size = peer->inbox->size();
  auto bad = [&](const char* what) {
    return remoteError("rank %d's shared-memory inbox %s is not usable: %s", info.rank, locator.c_str(), what);
  };
  if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != shm::kInboxMagic || h->version != shm::kInboxVersion)
    return bad("bad magic/version");
  if (h->rank != info.rank || h->commHash != params_.commHash) return bad("belongs to another rank or communicator");
  if (h->nLocal != static_cast<uint32_t>(params_.nLocal) || h->nChannels < 1 || h->slots < 2 ||
      h->slots > 1u << 16 || h->slotBytes < 64 || h->slotBytes > (uint64_t(1) << 32))
    return bad("inconsistent geometry");
  uint64_t nFifos = uint64_t(h->nLocal) * h->nChannels;
  if (h->controlStride < shm::controlStride(h->slots) || h->dataStride < uint64_t(h->slots) * h->slotBytes ||
      h->controlOffset < sizeof(InboxHeader) || h->controlOffset + nFifos * h->controlStride > h->dataOffset ||
      h->dataOffset + nFifos * h->dataStride > size || h->totalBytes > size || h->controlOffset % 64 != 0 ||
      h->controlStride % 64 != 0)
    return bad("layout does not fit the segment");
  peer->inbox->closeFd();  // the mapping is all we need
  peer->header = const_cast<InboxHeader*>(h);
  peer->nChannels = h->nChannels;
  peer->slots = h->slots;
  peer->slotBytes = h->slotBytes;
  peer->controlOffset = h->controlOffset;
  peer->controlStride = h->controlStride;
  peer->dataOffset = h->dataOffset;
  peer->dataStride = h->dataStride;
  if (info.checkLiveness) peer->liveness = std::make_unique<PeerLiveness>(info.rank, info.pid);
  dropPeer(info.rank);
  peers_.push_back(std::move(peer));
  return Status::ok();
}

ShmDomain::Peer* ShmDomain::findPeer(int rank) const {
  for (const auto& p : peers_)
    if (p->info.rank == rank) return p.get();
  return nullptr;
}

bool ShmDomain::hasPeer(int rank) const { return findPeer(rank) != nullptr; }

void ShmDomain::dropPeer(int rank) {
  for (auto it = peers_.begin(); it != peers_.end(); ++it)
    if ((*it)->info.rank == rank) {
      peers_.erase(it);
      return;
    }
}

void ShmDomain::setDirectOk(int rank, bool ok) {
  if (Peer* p = findPeer(rank)) p->info.directOk = ok;
}

Result<std::unique_ptr<SendConnection>> ShmDomain::connectSend(int peer, int channel, ConnectionCounters* counters,
                                                               bool useDirect) {
  Peer* p = findPeer(peer);
  if (p == nullptr) return internalError("rank %d is not a shared-memory peer", peer);
  if (channel < 0 || static_cast<uint32_t>(channel) >= p->nChannels)
    return invalidArgument("channel %d is beyond rank %d's %u shared-memory channels", channel, peer, p->nChannels);
  size_t index = static_cast<size_t>(params_.localIndex) * p->nChannels + static_cast<size_t>(channel);
  FifoView f = fifoAt(p->inbox->base(), p->controlOffset, p->controlStride, p->dataOffset, p->dataStride, p->slots,
                      p->slotBytes, index);
  f.syncKey = tsanKey(params_.commHash, params_.rank, peer, channel);
  TH_CHECK(p->inbox->populateRange(f.dataOffset, f.dataBytes).withContext("connecting to rank " + std::to_string(peer)));
  bool direct = useDirect && (p->info.sameProcess || p->info.directOk);
  return std::unique_ptr<SendConnection>(new ShmSendConnection(peer, f, &p->header->bell, counters,
                                                               p->liveness.get(), direct, p->info.sameProcess));
}

Result<std::unique_ptr<RecvConnection>> ShmDomain::connectRecv(int peer, int channel, ConnectionCounters* counters,
                                                               RegionCache* regions) {
  Peer* p = findPeer(peer);
  if (p == nullptr) return internalError("rank %d is not a shared-memory peer", peer);
  if (channel < 0 || channel >= params_.nChannels)
    return invalidArgument("channel %d is beyond the %d shared-memory channels", channel, params_.nChannels);
  size_t index = static_cast<size_t>(p->info.localIndex) * params_.nChannels + static_cast<size_t>(channel);
  FifoView f = fifoAt(inbox_->base(), controlOffset_, controlStride_, dataOffset_, dataStride_, params_.slots,
                      params_.slotBytes, index);
  f.syncKey = tsanKey(params_.commHash, peer, params_.rank, channel);
  TH_CHECK(inbox_->populateRange(f.dataOffset, f.dataBytes).withContext("connecting from rank " + std::to_string(peer)));
  return std::unique_ptr<RecvConnection>(new ShmRecvConnection(peer, p->info.pid, f, &p->header->bell, counters,
                                                               p->liveness.get(), regions, p->info.sameProcess));
}

}  // namespace theseus::transport
