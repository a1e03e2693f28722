#include "transport/shm/region_cache.h"

#include "common/log.h"

namespace theseus::transport {

Result<const char*> RegionCache::pin(const SharedRegionRef& ref, uint64_t bytes) {
  std::lock_guard lock(mu_);
  Key key{ref.pid, ref.id};
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    ++misses_;
    dropFreedRegionsOf(ref.pid);
    auto seg = ShmSegment::open(SharedMemoryRegistry::locatorFor(ref), 0, true);
    if (!seg.isOk()) return seg.status().withContext("mapping a peer's buffer for a zero-copy receive");
    Entry e;
    e.segment = seg.take();
    lru_.push_front(key);
    e.lru = lru_.begin();
    it = entries_.emplace(key, std::move(e)).first;
  } else {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
  }
  Entry& e = it->second;
  size_t size = e.segment->size();
  if (ref.offset > size || bytes > size - ref.offset)
    return remoteError("zero-copy message names bytes [%llu, %llu) of region %s, which has only %zu bytes",
                       static_cast<unsigned long long>(ref.offset), static_cast<unsigned long long>(ref.offset + bytes),
                       SharedMemoryRegistry::regionName(ref.id).c_str(), size);
  ++e.pins;
  const char* p = e.segment->base() + ref.offset;
  evictIfNeeded();  // after pinning, so the entry just used stays
  return p;
}

void RegionCache::unpin(int32_t pid, uint64_t id) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(Key{pid, id});
  if (it == entries_.end() || it->second.pins == 0) return;
  --it->second.pins;
  evictIfNeeded();
}

// A miss usually means the owner allocated a new region, maybe after freeing
// others: mappings of regions it has freed only pin dead memory, so drop them
// (one readlink per cached region of that owner, on misses only).
void RegionCache::dropFreedRegionsOf(int32_t pid) {
  for (auto it = lru_.begin(); it != lru_.end();) {
    auto e = entries_.find(*it);
    if (it->first != pid || e->second.pins != 0 || ShmSegment::ownerStillHas(e->second.segment->locator())) {
      ++it;
      continue;
    }
    entries_.erase(e);
    it = lru_.erase(it);
  }
}

void RegionCache::evictIfNeeded() {
  // Walk from the least recently used end; pinned entries stay (a message is being read).
  auto it = lru_.end();
  while (entries_.size() > maxEntries_ && it != lru_.begin()) {
    --it;
    auto e = entries_.find(*it);
    if (e->second.pins != 0) continue;
    TH_TRACE(log::kShm, "unmapping peer region %s (cache full)", SharedMemoryRegistry::regionName(it->second).c_str());
    entries_.erase(e);
    it = lru_.erase(it);
  }
}

size_t RegionCache::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

uint64_t RegionCache::misses() const {
  std::lock_guard lock(mu_);
  return misses_;
}

}  // namespace theseus::transport
