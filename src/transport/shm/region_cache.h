// RegionCache: the receiver's side of direct (zero-copy) shm messages.
//
// A direct message names a peer's region (SharedRegionRef). The first message
// from a region maps it read-only; later ones reuse the mapping. Entries are
// keyed by (pid, region id); an owner never reuses an id, so a hit is always
// the right memory even after the owner freed and reallocated buffers. The
// cache holds at most `maxEntries` mappings: beyond that the least recently
// used entry that no message is reading (pin count 0) is unmapped. A mapping of
// a region its owner has freed would keep that memory alive, so every miss also
// drops the cached regions its owner no longer has (see dropFreedRegionsOf).
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "common/status.h"
#include "transport/shared_memory_registry.h"
#include "transport/shm_segment.h"

namespace theseus::transport {

class RegionCache {
 public:
  explicit RegionCache(size_t maxEntries) : maxEntries_(maxEntries < 1 ? 1 : maxEntries) {}

  // Pins the region and returns the address of ref.offset in this process.
  // `bytes` past the offset must lie inside the region.
  Result<const char*> pin(const SharedRegionRef& ref, uint64_t bytes);
  void unpin(int32_t pid, uint64_t id);

  size_t size() const;
  uint64_t misses() const;

 private:
  using Key = std::pair<int32_t, uint64_t>;
  struct Entry {
    std::unique_ptr<ShmSegment> segment;
    uint32_t pins = 0;
    std::list<Key>::iterator lru;  // position in lru_ (front = most recent)
  };
  void evictIfNeeded();
  void dropFreedRegionsOf(int32_t pid);

  mutable std::mutex mu_;
  size_t maxEntries_;
  std::map<Key, Entry> entries_;
  std::list<Key> lru_;
  uint64_t misses_ = 0;
};

}  // namespace theseus::transport
