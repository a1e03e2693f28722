#include "common/readable.h"

#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace theseus {
namespace {

bool byteIsReadable(uintptr_t address) {
  unsigned char byte = 0;
  iovec local{&byte, 1};
  iovec remote{reinterpret_cast<void*>(address), 1};
  if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == 1) return true;
  if (errno == EFAULT) return false;
  // Not allowed here (seccomp, an old kernel): mincore fails with ENOMEM for a page not mapped, and never
  // touches the page.
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  unsigned char resident = 0;
  return mincore(reinterpret_cast<void*>(address & ~(page - 1)), 1, &resident) == 0 || errno != ENOMEM;
}

}  // namespace

bool rangeIsReadable(const void* p, size_t bytes) {
  if (bytes == 0) return true;
  const uintptr_t first = reinterpret_cast<uintptr_t>(p);
  const uintptr_t last = first + (bytes - 1);
  if (last < first) return false;  // wraps around the address space
  return byteIsReadable(first) && (last == first || byteIsReadable(last));
}

bool ReadableRanges::check(const void* p, size_t bytes) {
  if (bytes == 0) return true;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p), end = begin + bytes;
  for (const Range& r : known_)
    if (r.begin <= begin && end <= r.end && end > begin) return true;
  if (!rangeIsReadable(p, bytes)) return false;
  known_[next_] = Range{begin, end};
  next_ = (next_ + 1) % known_.size();
  return true;
}

}  // namespace theseus
