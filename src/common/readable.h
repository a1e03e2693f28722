// Whether an address range is readable memory of this process, asked of the
// kernel rather than found out by dereferencing it (which would crash on a
// freed or made-up pointer).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace theseus {

// True when the first and the last byte of [p, p + bytes) can be read: one
// system call each (about a microsecond each on a virtual machine) (process_vm_readv on this process, which fails with EFAULT
// for an unmapped or PROT_NONE page, such as the address space CUDA reserves
// for device memory; where that call is not allowed, mincore: mapped at all).
// A hole in the middle of a large range is not seen. bytes == 0: true.
bool rangeIsReadable(const void* p, size_t bytes);

// rangeIsReadable for the buffers of repeated calls: the last 16 ranges found
// readable are taken as still readable without a system call. One per thread.
// What it cannot see: a range found readable, then unmapped and passed again
// (a crash, as without any check).
class ReadableRanges {
 public:
  bool check(const void* p, size_t bytes);

 private:
  struct Range {
    uintptr_t begin = 0, end = 0;
  };
  std::array<Range, 16> known_{};
  size_t next_ = 0;  // the entry the next range found readable replaces
};

}  // namespace theseus
