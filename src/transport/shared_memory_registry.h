// SharedMemoryRegistry: the process-wide table of memory that peers on this
// host can map, so a direct (zero-copy) message can name where its bytes live.
//
// Every region is a memfd of its own (ncclMemAlloc buffers in host mode, the
// executor's shared scratch), mapped here and described to peers by
// (pid, fd, region id). A receiver opens /proc/<pid>/fd/<fd>, checks the file
// is the memfd named after the id, and maps it once (RegionCache). Region ids
// embed the creating pid and a counter that never repeats, so a peer's cached
// mapping can never be mistaken for a later region. Nothing is left in
// /dev/shm when a process dies: the kernel frees a memfd with its last user.
//
// Thread safety: allocate/free take a writer lock; find() (the executor asks
// it for every slice it might send direct) takes a reader lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <shared_mutex>
#include <string>

#include "common/status.h"
#include "transport/shm_segment.h"

namespace theseus::transport {

// Where a range of shared memory lives, as a peer needs it to map the range.
struct SharedRegionRef {
  int32_t pid = 0;           // process whose descriptor table holds `fd`
  int32_t fd = -1;
  uint64_t id = 0;           // never reused; names the memfd
  uint64_t offset = 0;       // of the range within the region
  uint64_t regionBytes = 0;  // size of the whole region
};

class SharedMemoryRegistry {
 public:
  static SharedMemoryRegistry& instance();

  // A page-aligned shared region of at least `size` bytes (size > 0).
  Result<void*> allocate(size_t size);
  // Frees a region allocate() returned; other pointers are ncclInvalidArgument.
  Status free(void* ptr);
  // True when [p, p + bytes) lies inside one region; fills `out`.
  bool find(const void* p, size_t bytes, SharedRegionRef* out) const;
  size_t regionCount() const;

  // The memfd label of region `id` (what /proc/<pid>/fd/<fd> must point to).
  static std::string regionName(uint64_t id);
  static std::string locatorFor(const SharedRegionRef& ref);

  // A small region this process keeps so peers can test, at communicator
  // creation, whether they are able to map its memory (same user, /proc visible).
  Result<std::string> probeLocator();

 private:
  SharedMemoryRegistry() = default;
  struct Region {
    std::unique_ptr<ShmSegment> segment;
    uint64_t id = 0;
  };
  Result<Region> makeRegion(size_t size, bool prefault);

  mutable std::shared_mutex mu_;
  std::map<uintptr_t, Region> regions_;  // by base address
  uint64_t nextCounter_ = 1;
  std::unique_ptr<ShmSegment> probe_;
  uint64_t probeId_ = 0;
};

// Shared scratch for the executor: memory peers can read in place.
Result<void*> allocShared(size_t size);
Status freeShared(void* ptr);

}  // namespace theseus::transport
