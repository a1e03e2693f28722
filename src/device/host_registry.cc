// Host ranges registered for the GPU, and their release (host_registry.h).
#include "device/host_registry.h"

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "common/log.h"
#include "device/cuda_driver.h"

namespace theseus::device {
namespace {

// One base's registrations: the pieces registered from it, in order (the first at the base, each
// later one where the previous ended), and the device whose context registered them.
struct Entry {
  size_t bytes = 0;  // [base, base + bytes) is registered
  int device = -1;
  struct Piece {
    void* at = nullptr;
    size_t bytes = 0;
    bool owned = false;  // registered by us (false: the driver had it already; not ours to undo)
  };
  std::vector<Piece> pieces;
};

struct Registry {
  std::mutex mu;
  std::map<uintptr_t, Entry> byBase;
  std::atomic<size_t> entries{0};
  std::atomic<size_t> bytes{0};
  std::atomic<uint64_t> releases{0};  // hostRegistryReleases()
};

// Never destroyed: segments may be released during static destruction.
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

}  // namespace

Status registerHostRange(int cudaDev, void* base, size_t bytes) {
  if (base == nullptr || bytes == 0) return Status::ok();
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto [it, fresh] = r.byBase.try_emplace(reinterpret_cast<uintptr_t>(base));
  Entry& e = it->second;
  if (bytes <= e.bytes) return Status::ok();
  const CudaDriver* driver = CudaDriver::get();
  Status s = driver == nullptr
                 ? Status(ncclUnhandledCudaError, "registering host memory for the GPU: the CUDA driver is not loaded")
                 : Status::ok();
  Entry::Piece piece{static_cast<char*>(base) + e.bytes, bytes - e.bytes, false};
  if (s.isOk()) {
    s = driver->withDevice(cudaDev, [&]() -> Status {
      TH_ASSIGN(piece.owned, driver->hostRegister(piece.at, piece.bytes));
      return Status::ok();
    });
  }
  if (!s.isOk()) {
    if (fresh) r.byBase.erase(it);
    return Status(s.code(), s.message() + " (" + std::to_string(piece.bytes) + " bytes of host memory for the GPU)");
  }
  if (fresh) r.entries.fetch_add(1, std::memory_order_relaxed);
  if (e.pieces.empty()) e.device = cudaDev;
  e.pieces.push_back(piece);
  e.bytes = bytes;
  r.bytes.fetch_add(piece.bytes, std::memory_order_relaxed);
  return Status::ok();
}

void releaseHostRange(const void* base, size_t bytes) {
  Registry& r = registry();
  if (base == nullptr || bytes == 0 || r.entries.load(std::memory_order_acquire) == 0) return;
  const uintptr_t lo = reinterpret_cast<uintptr_t>(base), hi = lo + bytes;
  std::lock_guard<std::mutex> lock(r.mu);
  // Entries overlapping [lo, hi): the last one starting before lo, and those starting inside.
  auto it = r.byBase.lower_bound(lo);
  if (it != r.byBase.begin()) {
    auto before = std::prev(it);
    if (before->first + before->second.bytes > lo) it = before;
  }
  const CudaDriver* driver = CudaDriver::get();
  while (it != r.byBase.end() && it->first < hi) {
    Entry& e = it->second;
    for (const Entry::Piece& p : e.pieces) {
      r.bytes.fetch_sub(p.bytes, std::memory_order_relaxed);
      if (!p.owned || driver == nullptr) continue;
      Status s = driver->withDevice(e.device, [&] { return driver->hostUnregister(p.at); });
      if (!s.isOk()) TH_WARN("host memory at %p (%zu bytes) stays page-locked: %s", p.at, p.bytes, s.message().c_str());
    }
    it = r.byBase.erase(it);
    r.entries.fetch_sub(1, std::memory_order_release);
    r.releases.fetch_add(1, std::memory_order_release);
  }
}

uint64_t hostRegistryReleases() { return registry().releases.load(std::memory_order_acquire); }

size_t registeredHostBytes() { return registry().bytes.load(std::memory_order_relaxed); }

}  // namespace theseus::device
