// Collective set-up of a communicator's transports, run by every rank when the
// TransportManager is created.
//
// Round 1 (allGather): each rank publishes its pid, a random per-process
// cookie, whether it offers shared memory, its inbox locator and the locator of
// its zero-copy probe region (SharedMemoryRegistry::probeLocator).
// Each rank then tries, for every peer on its host that offers shm, to map the
// peer's inbox and to open the peer's probe region.
// Round 2 (allGather): each rank publishes, per peer, "I mapped your inbox" and
// "I can map your memory". A pair uses shm only when both mapped each other,
// so both sides always agree on the transport of the pair (a rank with
// NCCL_SHM_DISABLE=1, or a container that cannot see a peer's /dev/shm, makes
// the pair fall back to TCP instead of hanging). A sender sends zero-copy only
// when the receiver said it can map the sender's memory. Round 2 is also the
// barrier after which nobody needs an inbox's name, so every rank unlinks its
// own: from then on a crash leaves nothing behind in /dev/shm.
// Both rounds run only when some rank offers shm, which every rank can tell
// from round 1, so all ranks make the same number of bootstrap calls.
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <mutex>
#include <random>
#include <sstream>

#include "common/log.h"
#include "transport/shared_memory_registry.h"
#include "transport/transport_manager_impl.h"

namespace theseus::transport {

struct TransportManagerImpl::PeerSetup {
  int pid = 0;
  uint64_t cookie = 0;
  bool shm = false;
  std::string inbox;
  std::string probe;
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

constexpr const char* kSetupVersion = "theseus-transport 1";

std::string encodeSetup(int pid, uint64_t cookie, bool shm, const std::string& inbox, const std::string& probe) {
  char head[128];
  snprintf(head, sizeof(head), "%s\n%d\n%016" PRIx64 "\n%d\n", kSetupVersion, pid, cookie, shm ? 1 : 0);
  return std::string(head) + inbox + "\n" + probe + "\n";
}

bool decodeSetup(const std::string& text, int* pid, uint64_t* cookie, bool* shm, std::string* inbox,
                 std::string* probe) {
  std::istringstream in(text);
  std::string version, pidText, cookieText, shmText;
  if (!std::getline(in, version) || version != kSetupVersion) return false;
  if (!std::getline(in, pidText) || !std::getline(in, cookieText) || !std::getline(in, shmText)) return false;
  if (!std::getline(in, *inbox) || !std::getline(in, *probe)) return false;
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

Status TransportManagerImpl::setUp() {
  if (nranks_ == 1) return Status::ok();
  const auto& local = boot_.localRanks();
  bool offerShm = config_.mode == TransportMode::kAuto && local.size() > 1;
  std::string probe;
  if (offerShm) {
    ShmDomainParams p;
    p.commHash = boot_.commHash();
    p.rank = rank_;
    p.localIndex = boot_.localRank();
    p.nLocal = static_cast<int>(local.size());
    p.nChannels = channels_;
    p.slots = config_.shmSlots;
    p.slotBytes = config_.shmSlotBytes;
    auto d = ShmDomain::create(p);
    auto pr = SharedMemoryRegistry::instance().probeLocator();
    if (d.isOk() && pr.isOk()) {
      shm_ = d.take();
      probe = pr.value();
    } else {
      // Not fatal: this rank's peers on the host will use TCP with it.
      TH_WARN("shared-memory transport unavailable, using TCP for local peers: %s",
              (d.isOk() ? pr.status() : d.status()).message().c_str());
      offerShm = false;
    }
  }
  std::string mine = encodeSetup(getpid(), processCookie(), offerShm, shm_ ? shm_->locator() : "", probe);
  std::vector<std::string> gathered;
  TH_CHECK(boot_.allGather(mine, &gathered).withContext("exchanging transport set-up"));
  if (gathered.size() != static_cast<size_t>(nranks_))
    return internalError("transport set-up: allGather returned %zu entries for %d ranks", gathered.size(), nranks_);
  std::vector<PeerSetup> all(nranks_);
  bool anyShm = false;
  for (int r = 0; r < nranks_; ++r) {
    PeerSetup& s = all[r];
    if (!decodeSetup(gathered[r], &s.pid, &s.cookie, &s.shm, &s.inbox, &s.probe))
      return remoteError("rank %d published malformed transport set-up (a different library version?)", r);
    anyShm |= s.shm;
  }
  if (anyShm) TH_CHECK(setUpShm(all));
  int nShm = 0;
  for (int r = 0; r < nranks_; ++r) nShm += (r != rank_ && kinds_[r] == Kind::kShm);
  if (shm_ != nullptr && nShm == 0) shm_.reset();
  if (shm_ != nullptr) {
    bell_ = shm_->bell();
    regions_ = std::make_unique<RegionCache>(config_.regionCacheEntries);
  }
  spin_ = config_.spinUs > 0 && usableCpus() >= static_cast<int>(local.size());
  sharesCores_ = usableCpus() < static_cast<int>(local.size());
  spinBudgetNs_ = spin_ ? static_cast<uint64_t>(config_.spinUs) * 1000 : 0;
  TH_INFO(log::kInit | log::kShm | log::kNet, "rank %d transports: %d peers over shm, %d over TCP%s", rank_, nShm,
          nranks_ - 1 - nShm, spin_ ? " (spinning before sleeping)" : "");
  return Status::ok();
}

Status TransportManagerImpl::setUpShm(const std::vector<PeerSetup>& all) {
  const auto& peers = boot_.peers();
  const auto& local = boot_.localRanks();
  const PeerSetup& me = all[rank_];
  std::string flags(nranks_, '0');  // per peer: bit 0 = mapped its inbox, bit 1 = can map its memory
  for (size_t li = 0; li < local.size() && shm_ != nullptr; ++li) {
    int r = local[li];
    if (r == rank_ || r < 0 || r >= nranks_ || !all[r].shm) continue;
    if (peers[r].hostHash != peers[rank_].hostHash) continue;
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
    Status s = shm_->mapPeer(info, all[r].inbox);
    if (!s.isOk()) TH_WARN("cannot map rank %d's shared-memory inbox, using TCP with it: %s", r, s.message().c_str());
    flags[r] = static_cast<char>('0' + (s.isOk() ? 1 : 0) + (memOk ? 2 : 0));
  }
  std::vector<std::string> gathered;
  TH_CHECK(boot_.allGather(flags, &gathered).withContext("exchanging shared-memory mapping results"));
  if (gathered.size() != static_cast<size_t>(nranks_))
    return internalError("transport set-up: allGather returned %zu entries for %d ranks", gathered.size(), nranks_);
  for (int r = 0; r < nranks_; ++r) {
    if (r == rank_ || shm_ == nullptr || !shm_->hasPeer(r)) continue;
    const std::string& theirs = gathered[r];
    if (theirs.size() != static_cast<size_t>(nranks_))
      return remoteError("rank %d published malformed shared-memory mapping results", r);
    int bits = theirs[rank_] - '0';
    if ((bits & 1) && (flags[r] - '0') & 1) {
      kinds_[r] = Kind::kShm;
      shm_->setDirectOk(r, (bits & 2) != 0);
    } else {
      shm_->dropPeer(r);
    }
  }
  if (shm_ != nullptr) shm_->unlinkOwn();
  return Status::ok();
}

}  // namespace theseus::transport
