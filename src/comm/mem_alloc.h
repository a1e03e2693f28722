// ncclMemAlloc / ncclMemFree. In host mode the memory comes from a shared
// segment that peers on the same host can map, so collectives on it need no
// staging copies (see SharedMemoryRegistry). With a usable CUDA device the
// allocation is device memory, as NCCL's is.
#pragma once

#include <cstddef>

#include "common/status.h"

namespace theseus::comm {

Result<void*> memAlloc(size_t size);
Status memFree(void* ptr);

}  // namespace theseus::comm
