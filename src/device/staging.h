// Device buffers on the host path: a correct, synchronous fallback until the
// CUDA executor exists. When an operation's buffers are device memory, the
// group waits for the work queued on the operation's stream, copies the inputs
// into host staging buffers (peer-shareable, so the zero-copy path applies),
// runs the host schedule, and copies the results back before returning. The
// stream order NCCL promises holds (the call is complete when it returns);
// only the asynchrony is lost. Capturing such a call into a CUDA graph is
// refused with a clear error. Processes that never loaded the CUDA driver pay
// one atomic load per group.
#pragma once

#include <vector>

#include "comm/group.h"
#include "common/status.h"

namespace theseus::device {

class Staging {
 public:
  // Rewrites the device pointers of `work` to host staging buffers and copies the inputs.
  Status stageIn(std::vector<comm::CommOps>& work);
  // Copies staged results back to the device buffers (after the host operations ran).
  Status stageOut();
  bool active() const { return !staged_.empty(); }

 private:
  struct Staged {
    void* deviceRecv = nullptr;
    char* hostRecv = nullptr;
    size_t recvBytes = 0;
  };
  std::vector<Staged> staged_;
};

}  // namespace theseus::device
