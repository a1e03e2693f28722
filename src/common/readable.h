// Whether an address range is readable memory of this process, asked of the
// kernel rather than found out by dereferencing it (which would crash on a
// freed or made-up pointer).
#pragma once

#include <cstddef>

namespace theseus {

// True when the first and the last byte of [p, p + bytes) can be read: one
// system call each (process_vm_readv on this process, which fails with EFAULT
// for an unmapped or PROT_NONE page, such as the address space CUDA reserves
// for device memory; where that call is not allowed, mincore: mapped at all).
// A hole in the middle of a large range is not seen. bytes == 0: true.
bool rangeIsReadable(const void* p, size_t bytes);

}  // namespace theseus
