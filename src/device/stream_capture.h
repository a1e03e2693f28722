// A stream's capture into a CUDA graph, as the driver says it at one moment.
//
// The enqueue path reads it once per stream and group, before lowering
// (CudaDriver::captureState: one driver call), and hands it to the executor,
// which needs the same answer (the graph to attach the group's images to) and
// would otherwise ask the driver again on every enqueue.
#pragma once

#include <cstdint>
#include <vector>

#include "nccl.h"

namespace theseus::device {

struct StreamCapture {
  enum class Status : uint8_t {
    kNone,         // not being captured
    kActive,       // being captured: `id` and `graph` say into what
    kInvalidated,  // a capture that an earlier call broke (cudaStreamEndCapture will fail)
  };
  cudaStream_t stream = nullptr;
  Status status = Status::kNone;
  uint64_t id = 0;        // the capture sequence's id (kActive)
  void* graph = nullptr;  // the cudaGraph_t being built (kActive); null when the driver could not say
};

// The entry for `stream` in a group's table, or null.
inline const StreamCapture* findCapture(const std::vector<StreamCapture>* table, cudaStream_t stream) {
  if (table == nullptr) return nullptr;
  for (const StreamCapture& c : *table)
    if (c.stream == stream) return &c;
  return nullptr;
}

}  // namespace theseus::device
