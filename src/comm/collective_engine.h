// CollectiveEngine: the per-communicator state of the collective path and the
// one interface the rest of comm/ and the C API use to reach it — no caller
// knows the concrete engine.
//
// Hot path (the thread running a group, see comm/enqueue.cc): lower() turns
// this communicator's operations of a group into an executor lane (plans in
// execution order, with the lane's health and telemetry hooks); the group's
// executor (exec/executor.h, chosen by the buffers' memory kind) runs the
// lanes of all communicators together; beforeRun() and noteFailure() frame
// that run. Per collective: seq++, one comparison against the epoch lease, a
// table lookup, one hash probe for the cached template; no allocation.
//
// Around it: user reduction ops (PreMulSum), registered buffers and windows,
// and the control plane's views (epochs, sequence numbers) for the extension
// API. Created by the init path once bootstrap and transports exist.
#pragma once

#include <memory>
#include <vector>

#include "comm/group.h"
#include "common/status.h"
#include "exec/executor.h"
#include "nccl.h"

namespace theseus::epoch {
class EpochService;
}

namespace theseus::telemetry {
class FlightRecorder;
}

namespace theseus::comm {

class Communicator;

class CollectiveEngine {
 public:
  virtual ~CollectiveEngine() = default;

  // ---- hot path ----
  // Lowers `ops` (this communicator's operations of a group, in issue order)
  // into `lane`: plans owned by the engine, valid until the next lower(). A
  // failure leaves the communicator as it was (nothing ran).
  virtual Status lower(const std::vector<OpDesc>& ops, exec::Lane* lane) = 0;
  // Just before the group's plans run (THESEUS_EMULATE's straggler delay; abortable).
  virtual Status beforeRun() = 0;
  // After a failed group: messages may be half-exchanged, the communicator cannot continue.
  // Returns the error as the caller should see it: when peers died, led by the first rank
  // that failed (the same on every survivor), so nobody blames a neighbour that failed after it.
  virtual Status noteFailure(const Status& s) = 0;
  // Fails when the communicator cannot make progress (aborted, revoked, a peer failed).
  virtual Status health() const = 0;

  // ---- reduction ops and registrations ----
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
  // The buffer a window of this communicator was registered with (ncclWinGetUserPtr).
  virtual Result<void*> windowUserPtr(ncclWindow_t win) const = 0;

  // ---- memory (ncclCommSuspend / ncclCommResume / ncclCommMemStats) ----
  struct Memory {
    uint64_t releasable = 0;  // freed by suspend() (executor scratch)
    uint64_t persistent = 0;  // kept for the communicator's life (transport FIFOs)
    bool suspended = false;
  };
  // Any thread.
  virtual Memory memory() const = 0;
  // No operation may be running. suspend() frees the releasable memory when
  // `releaseMemory` and makes lower() refuse work; resume() allocates it again.
  virtual Status suspend(bool releaseMemory) = 0;
  virtual Status resume() = 0;

  // ---- control plane views (any thread) ----
  // The epoch service, or null when it is not running (yet).
  virtual epoch::EpochService* epochs() = 0;
  // The number the next collective will get.
  virtual uint64_t nextSeq() const = 0;
  // The communicator's flight recorder (telemetry/flight_recorder.h).
  virtual telemetry::FlightRecorder& flightRecorder() = 0;

  // Stops background work before the transports go away (finalize/destroy/abort).
  virtual void shutdown() = 0;
};

Result<std::unique_ptr<CollectiveEngine>> createCollectiveEngine(Communicator& comm);
// Channels per peer and direction the transports must provide (THESEUS_MAX_CHANNELS).
int maxChannels();

}  // namespace theseus::comm
