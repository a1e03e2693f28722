// The staging executor: device buffers on the host executor, a correct,
// synchronous fallback until the CUDA executor serves an operation.
//
// For a group whose plans address device memory it
//   1. refuses streams being captured into a CUDA graph (the copies below
//      cannot be captured), then waits for the work queued on every stream
//      of a device buffer (stream order: the inputs are final);
//   2. mirrors the device buffers in host memory: every device range any plan
//      of the group addresses is merged with those it overlaps, and each merged
//      range gets one host mirror (peer-shareable memory, so the zero-copy
//      path applies), filled from the device once. Operations of the group
//      that reuse a buffer — one writes what the next reads, or allgather in
//      place — therefore see each other's results, exactly as on device
//      memory, instead of a stale copy made before the group ran;
//   3. points the plans' steps at the mirrors and reads deferred PreMulSum
//      scalars from the device;
//   4. runs the host executor, and only when it succeeded copies the ranges
//      plans write back to the device (a failed group leaves device memory as
//      it was).
// The stream order NCCL promises holds (the call is complete when it
// returns); only the asynchrony is lost.
#pragma once

#include <string>

#include <memory>

#include "common/status.h"
#include "exec/executor.h"
#include "nccl.h"

namespace theseus::exec {

// What staging needs from the device (the CUDA driver; a fake in tests).
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual Status toHost(void* dst, const void* src, size_t bytes) const = 0;
  // Queued on `stream` (the operation's): done once synchronize(stream) returns.
  virtual Status toDevice(void* dst, const void* src, size_t bytes, cudaStream_t stream) const = 0;
  virtual Status synchronize(cudaStream_t stream) const = 0;
  virtual bool capturing(cudaStream_t stream) const = 0;
};

// A staging executor over `memory` (which must outlive it).
std::unique_ptr<Executor> makeStagingExecutor(const DeviceMemory& memory);
// The process's staging executor over the CUDA driver, or nullptr while the
// process has not loaded the driver (then no buffer can be device memory).
Executor* stagingExecutor();
// The error of a group on a stream being captured into a CUDA graph that would take the staging path
// (the engine refuses such a group before it runs; the executor refuses it too). `why`: why the group did
// not get the CUDA executor, when known.
Status stagingCaptureError(const std::string& why = {});

}  // namespace theseus::exec
