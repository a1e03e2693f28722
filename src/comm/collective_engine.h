// CollectiveEngine: the per-communicator state of the collective path —
// sequence numbers, the schedule choice for each request, cached programs,
// executor scratch, user reduction ops (PreMulSum) and registered buffers.
// Created by the init path once bootstrap and transports exist.
#pragma once

#include <memory>

#include "common/status.h"
#include "nccl.h"

namespace theseus::comm {

class Communicator;

class CollectiveEngine {
 public:
  virtual ~CollectiveEngine() = default;

  // ncclRedOpCreatePreMulSum / ncclRedOpDestroy (ops are per communicator).
  virtual Status createPreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t type,
                                 ncclScalarResidence_t residence) = 0;
  virtual Status destroyRedOp(ncclRedOp_t op) = 0;
  // True for builtin ops and live custom ops of this communicator.
  virtual bool redOpIsValid(ncclRedOp_t op) const = 0;

  // ncclCommRegister / Deregister / WindowRegister / WindowDeregister.
  virtual Status registerBuffer(void* buff, size_t size, void** handle) = 0;
  virtual Status deregisterBuffer(void* handle) = 0;
  virtual Status registerWindow(void* buff, size_t size, ncclWindow_t* win, int flags) = 0;
  virtual Status deregisterWindow(ncclWindow_t win) = 0;

  // Stops background work before the transports go away (finalize/destroy/abort).
  virtual void shutdown() = 0;
};

Result<std::unique_ptr<CollectiveEngine>> createCollectiveEngine(Communicator& comm);
// Channels per peer and direction the transports must provide (THESEUS_MAX_CHANNELS).
int maxChannels();

}  // namespace theseus::comm
