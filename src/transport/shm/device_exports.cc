#include "transport/shm/device_exports.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <new>

#include <fcntl.h>
#include <unistd.h>

#include "common/log.h"
#include "device/cuda_driver.h"
#include "device/vmm.h"
#include "transport/shm/fd_mailbox.h"
#include "transport/shm_segment.h"

namespace theseus::transport {

namespace {
constexpr uint64_t kMagic = 0x5850584548545454ull;  // "TTTHEXPX"
constexpr uint32_t kVersion = 1;
constexpr const char* kPrefix = "devexp";
enum : uint32_t { kShareLegacyIpc = 0, kShareVmmFd = 1 };
}  // namespace

struct alignas(64) DeviceExports::Header {
  uint64_t magic;
  uint32_t version;
  int32_t rank;
  uint64_t commHash;
  uint32_t nLocal;
  uint32_t maxEntries;
  alignas(64) std::atomic<uint64_t> changes;  // bumped after every export and withdrawal
};

struct alignas(64) DeviceExports::Entry {
  std::atomic<uint64_t> generation;  // 0: free; written last (release)
  uint64_t base;                     // the allocation, in the owner's address space
  uint64_t bytes;
  int32_t device;
  uint32_t sharing;                  // kShareLegacyIpc or kShareVmmFd (for peers in other processes)
  unsigned char handle[64];          // cuIpcGetMemHandle of `base` (kShareLegacyIpc)
  uint64_t pad[4];
};

struct DeviceExports::Peer {
  int rank = -1;
  int localIndex = -1;
  bool sameProcess = false;
  int device = -1;
  std::unique_ptr<ShmSegment> segment;
  uint64_t seenChanges = ~uint64_t(0);
  struct Imported {
    uint64_t generation = 0;
    void* mapped = nullptr;
    bool ipc = false;
    device::Vmm::Mapping vmm;  // base set: mapped from a file descriptor
  } imported[kMaxEntries];
};

namespace {

size_t entriesOffset() { return 128; }  // after the header
size_t acksOffset() { return entriesOffset() + DeviceExports::kMaxEntries * 128; }
size_t importsOffset(int nLocal) {
  return acksOffset() + static_cast<size_t>(nLocal) * DeviceExports::kMaxEntries * sizeof(uint64_t);
}
size_t segmentBytes(int nLocal) {
  size_t end = importsOffset(nLocal) + static_cast<size_t>(nLocal) * DeviceExports::kMaxEntries * sizeof(DeviceImport);
  return (end + 4095) / 4096 * 4096;
}

}  // namespace

DeviceExports::Entry* DeviceExports::entries(char* base) const {
  return reinterpret_cast<Entry*>(base + entriesOffset());
}
std::atomic<uint64_t>* DeviceExports::acks(char* base, int localIndex) const {
  return reinterpret_cast<std::atomic<uint64_t>*>(base + acksOffset()) +
         static_cast<size_t>(localIndex) * kMaxEntries;
}
DeviceImport* DeviceExports::imports(int localIndex) const {
  return reinterpret_cast<DeviceImport*>(own_->base() + importsOffset(nLocal_)) +
         static_cast<size_t>(localIndex) * kMaxEntries;
}

Result<std::unique_ptr<DeviceExports>> DeviceExports::create(uint64_t commHash, int rank, int localIndex, int nLocal,
                                                             int pid, uint64_t processCookie) {
  static_assert(sizeof(Header) <= 128 && sizeof(Entry) == 128, "the layout entriesOffset/acksOffset assume");
  if (nLocal < 1 || localIndex < 0 || localIndex >= nLocal)
    return internalError("bad device export geometry (local %d of %d)", localIndex, nLocal);
  const device::CudaDriver* cuda = device::CudaDriver::get();
  if (cuda == nullptr || cuda->currentDevice() < 0) return invalidUsage("no CUDA device is current");
  std::unique_ptr<DeviceExports> x(new DeviceExports());
  x->rank_ = rank;
  x->localIndex_ = localIndex;
  x->nLocal_ = nLocal;
  x->pid_ = pid;
  x->commHash_ = commHash;
  x->cookie_ = processCookie;
  x->device_ = cuda->currentDevice();
  char name[96];
  snprintf(name, sizeof(name), "theseus-%016" PRIx64 "-r%d-exp", commHash, rank);
  const size_t bytes = segmentBytes(nLocal);
  auto named = ShmSegment::createNamed(name, bytes);
  if (named.isOk()) {
    x->own_ = named.take();
  } else {
    TH_ASSIGN(x->own_, ShmSegment::createMemfd(name, bytes));
  }
  TH_CHECK(x->own_->reserve(0, bytes));
  char* base = x->own_->base();
  memset(base, 0, bytes);
  auto* h = new (base) Header();
  h->version = kVersion;
  h->rank = rank;
  h->commHash = commHash;
  h->nLocal = static_cast<uint32_t>(nLocal);
  h->maxEntries = kMaxEntries;
  h->changes.store(0, std::memory_order_relaxed);
  for (uint32_t e = 0; e < kMaxEntries; ++e) new (&x->entries(base)[e]) Entry();
  __atomic_store_n(&h->magic, kMagic, __ATOMIC_RELEASE);
  char head[96];
  snprintf(head, sizeof(head), "%s:%d:%" PRIx64 ":%d:", kPrefix, pid, processCookie, x->device_);
  x->locator_ = std::string(head) + x->own_->locator();
  if (device::Vmm::get() != nullptr) {
    auto mailbox = FdMailbox::open(commHash, rank);
    if (mailbox.isOk()) {
      x->mailbox_ = mailbox.take();
    } else {
      TH_INFO(log::kShm | log::kReg, "rank %d: registered VMM device buffers are read through FIFO slots by peers in "
              "other processes: %s", rank, mailbox.status().message().c_str());
    }
  }
  return x;
}

DeviceExports::~DeviceExports() {
  for (auto& p : peers_)
    for (uint32_t e = 0; e < kMaxEntries; ++e)
      if (p->imported[e].generation != 0) unmap(*p, e);
  for (const Undelivered& u : undelivered_) close(u.fd);
}

Status DeviceExports::openPeer(int rank, int localIndex, const std::string& locator) {
  int pid = 0, dev = -1, consumed = 0;
  unsigned long long cookie = 0;
  if (sscanf(locator.c_str(), "devexp:%d:%llx:%d:%n", &pid, &cookie, &dev, &consumed) != 3 || consumed <= 0 ||
      localIndex < 0 || localIndex >= nLocal_)
    return remoteError("rank %d published a malformed device export locator", rank);
  auto seg = ShmSegment::open(locator.substr(static_cast<size_t>(consumed)), segmentBytes(nLocal_), false);
  if (!seg.isOk()) return seg.status();
  const auto* h = reinterpret_cast<const Header*>(seg.value()->base());
  if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != kMagic || h->version != kVersion || h->rank != rank ||
      h->commHash != commHash_ || h->nLocal != static_cast<uint32_t>(nLocal_) || h->maxEntries != kMaxEntries)
    return remoteError("rank %d's device export table does not match this communicator", rank);
  auto peer = std::make_unique<Peer>();
  peer->rank = rank;
  peer->localIndex = localIndex;
  peer->sameProcess = pid == pid_ && cookie == cookie_;
  peer->device = dev;
  peer->segment = seg.take();
  peer->segment->closeFd();
  peers_.push_back(std::move(peer));
  return Status::ok();
}

DeviceExports::Peer* DeviceExports::findPeer(int rank) const {
  for (const auto& p : peers_)
    if (p->rank == rank) return p.get();
  return nullptr;
}

Status DeviceExports::exportBuffer(uint64_t id, const void* p, size_t bytes) {
  const device::CudaDriver* cuda = device::CudaDriver::get();
  if (cuda == nullptr) return invalidUsage("the CUDA driver is not loaded");
  void* allocBase = nullptr;
  size_t allocBytes = 0;
  TH_CHECK(cuda->allocationRange(p, &allocBase, &allocBytes));
  const auto* b = static_cast<const char*>(allocBase);
  if (static_cast<const char*>(p) + bytes > b + allocBytes)
    return invalidArgument("the registered range of %zu bytes at %p runs past its CUDA allocation", bytes, p);
  std::lock_guard<std::mutex> lock(mu_);
  Entry* table = entries(own_->base());
  uint32_t slot = kMaxEntries;
  for (uint32_t e = 0; e < kMaxEntries && slot == kMaxEntries; ++e)
    if (refs_[e] > 0 && table[e].base == reinterpret_cast<uintptr_t>(allocBase)) slot = e;
  if (slot == kMaxEntries) {
    for (uint32_t e = 0; e < kMaxEntries && slot == kMaxEntries; ++e)
      if (refs_[e] == 0) slot = e;
    if (slot == kMaxEntries)
      return invalidUsage("%u CUDA allocations are already exported for zero-copy; this one is read through FIFO "
                          "slots", kMaxEntries);
    device::CudaDriver::IpcHandle handle{};
    bool sharedWithOtherProcesses = false;
    for (const auto& peer : peers_) sharedWithOtherProcesses |= !peer->sameProcess;
    const device::Vmm* vmm = device::Vmm::get();
    const bool viaFd = sharedWithOtherProcesses && vmm != nullptr && !vmm->legacyIpcCapable(allocBase);
    int fd = -1;
    if (viaFd) {
      if (mailbox_ == nullptr)
        return invalidUsage("this VMM allocation needs its file descriptor passed to local peers, and this rank has "
                            "no mailbox for that");
      TH_ASSIGN(fd, vmm->exportFd(allocBase));
    } else if (sharedWithOtherProcesses) {
      TH_ASSIGN(handle, cuda->ipcExport(allocBase));
    }
    Entry& en = table[slot];
    en.base = reinterpret_cast<uintptr_t>(allocBase);
    en.bytes = allocBytes;
    en.device = cuda->deviceOf(allocBase);
    en.sharing = viaFd ? kShareVmmFd : kShareLegacyIpc;
    memcpy(en.handle, handle.bytes, sizeof(en.handle));
    const uint64_t generation = nextGeneration_++;
    if (viaFd) {
      // One copy of the descriptor per peer in another process; delivered now or at a later refresh.
      for (const auto& peer : peers_)
        if (!peer->sameProcess) {
          const int dup = fcntl(fd, F_DUPFD_CLOEXEC, 0);
          if (dup >= 0) undelivered_.push_back(Undelivered{peer->rank, slot, generation, allocBytes, dup});
        }
      close(fd);
    }
    en.generation.store(generation, std::memory_order_release);
    reinterpret_cast<Header*>(own_->base())->changes.fetch_add(1, std::memory_order_release);
    deliverLocked();
  }
  ++refs_[slot];
  registrations_.push_back(Registration{id, slot, static_cast<const char*>(p), bytes});
  live_.fetch_add(1, std::memory_order_relaxed);
  return Status::ok();
}

void DeviceExports::withdraw(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = registrations_.begin(); it != registrations_.end(); ++it) {
    if (it->id != id) continue;
    const uint32_t e = it->entry;
    registrations_.erase(it);
    live_.fetch_sub(1, std::memory_order_relaxed);
    if (--refs_[e] == 0) {
      std::erase_if(undelivered_, [e](const Undelivered& u) {  // nothing left to map
        if (u.entry == e) close(u.fd);
        return u.entry == e;
      });
      anyUndelivered_.store(!undelivered_.empty(), std::memory_order_relaxed);
      entries(own_->base())[e].generation.store(0, std::memory_order_release);
      reinterpret_cast<Header*>(own_->base())->changes.fetch_add(1, std::memory_order_release);
    }
    return;
  }
}

DeviceExportRef DeviceExports::find(const void* p, size_t bytes) const {
  DeviceExportRef ref;
  if (live_.load(std::memory_order_relaxed) == 0 || p == nullptr) return ref;
  const auto* c = static_cast<const char*>(p);
  std::lock_guard<std::mutex> lock(mu_);
  for (const Registration& r : registrations_)
    if (c >= r.begin && c + bytes <= r.begin + r.bytes) {
      const Entry& en = entries(own_->base())[r.entry];
      ref.entry = static_cast<int32_t>(r.entry);
      ref.generation = en.generation.load(std::memory_order_relaxed);
      ref.base = reinterpret_cast<const char*>(static_cast<uintptr_t>(en.base));
      return ref;
    }
  return ref;
}

// Passes the descriptors peers have not received yet; a peer whose queue is full gets them later.
void DeviceExports::deliverLocked() {
  for (auto u = undelivered_.begin(); u != undelivered_.end();) {
    auto sent = mailbox_->send(u->toRank, FdMailbox::Note{rank_, u->entry, u->generation, u->bytes}, u->fd);
    if (sent.isOk() && !sent.value()) {
      ++u;  // full: next time
      continue;
    }
    if (!sent.isOk())
      TH_INFO(log::kShm | log::kReg, "rank %d reads this rank's registered VMM buffer through FIFO slots: %s", u->toRank,
              sent.status().message().c_str());
    close(u->fd);
    u = undelivered_.erase(u);
  }
  anyUndelivered_.store(!undelivered_.empty(), std::memory_order_relaxed);
}

void DeviceExports::unmap(Peer& peer, uint32_t e) {
  Peer::Imported& im = peer.imported[e];
  imports(peer.localIndex)[e] = DeviceImport{};
  acks(peer.segment->base(), localIndex_)[e].store(0, std::memory_order_release);
  if (im.ipc && im.mapped != nullptr) {
    Status s = device::CudaDriver::get()->ipcClose(im.mapped);
    if (!s.isOk()) TH_INFO(log::kShm, "closing rank %d's exported buffer: %s", peer.rank, s.message().c_str());
  }
  if (im.vmm.base != nullptr) {
    Status s = device::Vmm::get()->unmap(im.vmm);
    if (!s.isOk()) TH_INFO(log::kShm, "unmapping rank %d's exported buffer: %s", peer.rank, s.message().c_str());
  }
  im = Peer::Imported{};
}

// Maps what each peer exported since the last look and acks it (see the header).
void DeviceExports::refresh() {
  if (anyUndelivered_.load(std::memory_order_relaxed)) {  // one load per group while everything was delivered
    std::lock_guard<std::mutex> owner(mu_);
    deliverLocked();
  }
  std::lock_guard<std::mutex> lock(importMu_);
  for (auto& pp : peers_) {
    Peer& peer = *pp;
    char* theirs = peer.segment->base();
    const uint64_t changes = reinterpret_cast<Header*>(theirs)->changes.load(std::memory_order_acquire);
    if (changes == peer.seenChanges) continue;
    peer.seenChanges = changes;
    Entry* table = entries(theirs);
    for (uint32_t e = 0; e < kMaxEntries; ++e) {
      const uint64_t g = table[e].generation.load(std::memory_order_acquire);
      if (g == peer.imported[e].generation) continue;
      if (peer.imported[e].generation != 0) unmap(peer, e);
      if (g == 0) continue;
      const uint64_t base = table[e].base, bytes = table[e].bytes;
      const int dev = table[e].device;
      const uint32_t sharing = table[e].sharing;
      device::CudaDriver::IpcHandle handle;
      memcpy(handle.bytes, table[e].handle, sizeof(handle.bytes));
      std::atomic_thread_fence(std::memory_order_acquire);
      if (table[e].generation.load(std::memory_order_relaxed) != g) continue;  // rewritten meanwhile: next change
      int fd = -1;
      if (!peer.sameProcess && sharing == kShareVmmFd) {
        uint64_t noted = 0;
        fd = mailbox_ != nullptr ? mailbox_->take(peer.rank, e, g, &noted) : -1;
        if (fd < 0 && mailbox_ != nullptr) {
          peer.seenChanges = ~uint64_t(0);  // not here yet: look again at the next refresh
          continue;
        }
        if (fd >= 0 && noted != bytes) {
          close(fd);
          fd = -1;
        }
      }
      Peer::Imported& im = peer.imported[e];
      im.generation = g;  // also when mapping fails: tried once per export
      if (peer.sameProcess) {
        // The address as is: on another device, peer access was enabled when this rank opened the peer's
        // device inbox (a pair reads in place only with device slots both ways).
        (void)dev;
        im.mapped = reinterpret_cast<void*>(static_cast<uintptr_t>(base));
      } else {
        // Mapped into this rank's device's context (the caller may have another device current).
        const device::CudaDriver* cuda = device::CudaDriver::get();
        void* mapped = nullptr;
        Status opened = cuda->withDevice(device_, [&]() -> Status {
          if (sharing == kShareLegacyIpc) {
            TH_ASSIGN(mapped, cuda->ipcOpen(handle));
          } else if (fd < 0) {
            return remoteError("its file descriptor was not passed (no mailbox here, or a mismatched size)");
          } else {
            TH_ASSIGN(im.vmm, device::Vmm::get()->importFd(fd, bytes, device_));
            mapped = im.vmm.base;
          }
          return Status::ok();
        });
        if (fd >= 0) close(fd);
        if (!opened.isOk()) {
          TH_WARN("rank %d reads rank %d's registered buffer of %" PRIu64 " bytes through FIFO slots: %s", rank_,
                  peer.rank, bytes, opened.message().c_str());
          continue;
        }
        im.mapped = mapped;
        im.ipc = sharing == kShareLegacyIpc;
      }
      imports(peer.localIndex)[e] = DeviceImport{static_cast<char*>(im.mapped), bytes};
      acks(theirs, localIndex_)[e].store(g, std::memory_order_release);
      TH_INFO(log::kShm | log::kReg, "rank %d reads rank %d's registered device buffer (%" PRIu64
              " bytes) in place (%s)", rank_, peer.rank, bytes,
              im.vmm.base != nullptr ? "CUDA VMM, file descriptor" : im.ipc ? "CUDA IPC" : "same process");
    }
  }
}

uint64_t* DeviceExports::acksFrom(int rank) const {
  const Peer* p = findPeer(rank);
  if (p == nullptr) return nullptr;
  return reinterpret_cast<uint64_t*>(acks(own_->base(), p->localIndex));
}

const DeviceImport* DeviceExports::importsOf(int rank) const {
  const Peer* p = findPeer(rank);
  return p == nullptr ? nullptr : imports(p->localIndex);
}

void DeviceExports::unlinkOwn() { own_->unlinkName(); }

std::pair<void*, size_t> DeviceExports::segment() const { return {own_->base(), own_->size()}; }

}  // namespace theseus::transport
