#include "transport/shm/shm_domain.h"

#include <cinttypes>
#include <cstdio>
#include <mutex>
#include <new>

#include "common/log.h"
#include "transport/shm/shm_fifo.h"

namespace theseus::transport {

using shm::FifoControl;
using shm::InboxHeader;

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

  static std::once_flag swept;
  std::call_once(swept, [] { ShmSegment::removeStaleNamed("theseus-"); });
  char name[96];
  snprintf(name, sizeof(name), "theseus-%016" PRIx64 "-r%d%s", p.commHash, p.rank, p.nameSuffix);
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

Result<shm::FifoView> ShmDomain::sendFifo(int peer, int channel, bool withData) {
  Peer* p = findPeer(peer);
  if (p == nullptr) return internalError("rank %d is not a shared-memory peer", peer);
  if (channel < 0 || static_cast<uint32_t>(channel) >= p->nChannels)
    return invalidArgument("channel %d is beyond rank %d's %u shared-memory channels", channel, peer, p->nChannels);
  size_t index = static_cast<size_t>(params_.localIndex) * p->nChannels + static_cast<size_t>(channel);
  shm::FifoView f = shm::fifoAt(p->inbox->base(), p->controlOffset, p->controlStride, p->dataOffset, p->dataStride,
                                p->slots, p->slotBytes, index);
  f.syncKey = shm::tsanKey(params_.commHash, params_.rank, peer, channel);
  if (withData)
    TH_CHECK(p->inbox->populateRange(f.dataOffset, f.dataBytes).withContext("connecting to rank " + std::to_string(peer)));
  return f;
}

Result<shm::FifoView> ShmDomain::recvFifo(int peer, int channel, bool withData) {
  Peer* p = findPeer(peer);
  if (p == nullptr) return internalError("rank %d is not a shared-memory peer", peer);
  if (channel < 0 || channel >= params_.nChannels)
    return invalidArgument("channel %d is beyond the %d shared-memory channels", channel, params_.nChannels);
  size_t index = static_cast<size_t>(p->info.localIndex) * params_.nChannels + static_cast<size_t>(channel);
  shm::FifoView f = shm::fifoAt(inbox_->base(), controlOffset_, controlStride_, dataOffset_, dataStride_, params_.slots,
                                params_.slotBytes, index);
  f.syncKey = shm::tsanKey(params_.commHash, peer, params_.rank, channel);
  if (withData)
    TH_CHECK(inbox_->populateRange(f.dataOffset, f.dataBytes).withContext("connecting from rank " + std::to_string(peer)));
  return f;
}

size_t ShmDomain::dataAreaBytes(int peer) const {
  if (peer < 0) return static_cast<size_t>(params_.nLocal) * params_.nChannels * dataStride_;
  Peer* p = findPeer(peer);
  return p != nullptr ? static_cast<size_t>(params_.nLocal) * p->nChannels * p->dataStride : 0;
}

size_t ShmDomain::deviceInboxBytes(int peer) const {
  if (peer < 0) return dataAreaBytes(-1) + static_cast<size_t>(params_.nLocal) * params_.nChannels * controlStride_;
  Peer* p = findPeer(peer);
  return p != nullptr ? dataAreaBytes(peer) + static_cast<size_t>(params_.nLocal) * p->nChannels * p->controlStride : 0;
}

std::pair<void*, size_t> ShmDomain::segmentOf(int peer, bool send) const {
  if (!send) return {inbox_->base(), inbox_->size()};
  Peer* p = findPeer(peer);
  return p != nullptr ? std::pair<void*, size_t>{p->inbox->base(), p->inbox->size()} : std::pair<void*, size_t>{};
}

Result<std::unique_ptr<SendConnection>> ShmDomain::connectSend(int peer, int channel, ConnectionCounters* counters,
                                                               bool useDirect) {
  TH_ASSIGN(shm::FifoView f, sendFifo(peer, channel));
  Peer* p = findPeer(peer);
  bool direct = useDirect && (p->info.sameProcess || p->info.directOk);
  return shm::makeSendConnection(peer, f, &p->header->bell, counters, p->liveness.get(), direct, p->info.sameProcess);
}

Result<std::unique_ptr<RecvConnection>> ShmDomain::connectRecv(int peer, int channel, ConnectionCounters* counters,
                                                               RegionCache* regions) {
  TH_ASSIGN(shm::FifoView f, recvFifo(peer, channel));
  Peer* p = findPeer(peer);
  return shm::makeRecvConnection(peer, p->info.pid, f, &p->header->bell, counters, p->liveness.get(), regions,
                                 p->info.sameProcess);
}

}  // namespace theseus::transport
