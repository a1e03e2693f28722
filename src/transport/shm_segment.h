// ShmSegment: memory that other processes of this host can map.
//
// Two backings, named by a *locator* string that travels to peers:
//   "shm:/name"              a POSIX shared-memory object (/dev/shm/name);
//   "fd:<pid>:<fd>:<name>"   a memfd of process <pid>, opened by peers through
//                            /proc/<pid>/fd/<fd> (needs the same user; nothing
//                            ever lingers in /dev/shm, even after a crash).
// Opening a memfd locator checks that the file behind the descriptor is still
// the memfd called <name>, so a closed and reused descriptor number is an
// error, never somebody else's memory.
//
// Pages of tmpfs/shmem are allocated on first touch; touching a page the
// filesystem cannot provide raises SIGBUS. reserve() (fallocate) and
// populateRange() (MADV_POPULATE_WRITE, which also maps the pages) allocate a
// range up front, so "no space in /dev/shm" is a clean error instead.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "common/status.h"

namespace theseus::transport {

class ShmSegment {
 public:
  // A new POSIX shm object "/<name>" of `bytes` (a stale object of that name,
  // left by a crashed run, is replaced). Its name stays until unlinkName().
  static Result<std::unique_ptr<ShmSegment>> createNamed(const std::string& name, size_t bytes);
  // Names created by createNamed end in "-p<pid of the creator>". Removes, once per process,
  // the /dev/shm objects with `prefix` whose creator no longer exists: what a job killed
  // between creating and unlinking its segments (kill -9 during init) left behind. Returns
  // how many it removed.
  static int removeStaleNamed(const std::string& prefix);
  // A new anonymous memfd of `bytes` (`name` is its label, checked by open()).
  static Result<std::unique_ptr<ShmSegment>> createMemfd(const std::string& name, size_t bytes);
  // Maps a segment another process (or this one) created, from its locator.
  // `minBytes`: the segment must be at least that large.
  static Result<std::unique_ptr<ShmSegment>> open(const std::string& locator, size_t minBytes, bool readOnly);

  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // For a memfd locator: false once the owner closed (freed) the region, so a
  // mapping of it only keeps dead memory alive. Always true for named segments.
  static bool ownerStillHas(const std::string& locator);

  char* base() const { return base_; }
  size_t size() const { return size_; }
  int fd() const { return fd_; }
  const std::string& locator() const { return locator_; }

  // Allocates [offset, offset + bytes) now; ncclSystemError with a hint when the
  // filesystem is full. Idempotent.
  Status reserve(size_t offset, size_t bytes);
  // Maps every page now (first touches later cost no page faults).
  void populate();
  // Allocates and maps [offset, offset + bytes) through the mapping (works
  // after closeFd()); falls back to reserve() on kernels without
  // MADV_POPULATE_WRITE. Writable mappings only.
  Status populateRange(size_t offset, size_t bytes);
  // Drops the descriptor once mapped (the mapping stays): a communicator maps
  // every local peer's inbox, and descriptors are a limited resource.
  void closeFd();
  // Removes the /dev/shm name (existing mappings stay valid). No-op for memfds.
  void unlinkName();

 private:
  ShmSegment() = default;
  Status mapFd(size_t bytes, bool readOnly);

  char* base_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;
  std::string locator_;
  std::string shmName_;  // "/name" while linked
};

size_t pageSize();
size_t roundUpToPage(size_t bytes);

}  // namespace theseus::transport
