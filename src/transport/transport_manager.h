// TransportManager: owns every connection of one communicator and picks the
// transport backend per peer (backend.h, backend_order.h): shared memory
// between ranks of one host (unless NCCL_SHM_DISABLE=1), TCP sockets between
// hosts (several sockets per peer where it helps). Later: CUDA IPC, verbs and
// NCCL net plugins, each a backend in its own folder.
//
// Connections are made lazily, the first time a program needs a peer, or
// eagerly through prepare() (the control plane calls it before a schedule swap
// takes effect, so the first collective on a new schedule does not pay for
// connection setup). Both sides of a pair may ask in any order: shared-memory
// FIFOs live in the receiver's segment, mapped at init; TCP connections go
// through Bootstrap::connectTo/acceptFrom, which never deadlocks.
//
// Waiting: the executor polls connections; when nothing moves it calls
// waitForActivity(), which sleeps until a peer signals this rank (a futex
// doorbell in shared memory, socket readiness) or the timeout passes — so
// ranks that outnumber cores do not burn CPU the peers need.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "common/deadline.h"
#include "common/status.h"
#include "transport/transport.h"

namespace theseus::transport {

class LinkEmulation;  // transport/emulation.h

struct TransportOptions {
  int maxChannels = 1;          // connections per peer and direction
  int64_t connectTimeoutMs = 0; // THESEUS_CONNECT_TIMEOUT_MS when 0
  const AbortFlag* abort = nullptr;
  // Backends by name, in order ("shm", "socket"); empty: the configured order
  // (backend_order.h). Must be equal on all ranks (tests pick backends this way).
  std::vector<std::string> backends;
  // The network backend by NCCL's name (ncclConfig_t.netName, NCCL_NET wins); empty: the first available.
  std::string net;
  // Also set up FIFOs for the device executor with every local peer (collective: equal on all ranks).
  bool deviceFifos = false;
  // Their payload slots in GPU memory, shared with local peers by CUDA IPC
  // (the CUDA executor; NCCL_P2P_DISABLE=1 keeps them in host memory).
  bool deviceFifoSlotsOnGpu = false;
  // The communicator's CUDA device (-1: none): where proxied device FIFOs to other hosts keep their
  // payload for GPUDirect RDMA sends (fifo_proxy.h).
  int cudaDev = -1;
};

class TransportManager {
 public:
  virtual ~TransportManager() = default;

  // The connection to/from `peer` on `channel`, created on first use (may block
  // up to the connect timeout; honours the abort flag).
  virtual Result<SendConnection*> sendConnection(int peer, int channel) = 0;
  virtual Result<RecvConnection*> recvConnection(int peer, int channel) = 0;
  // Creates the listed connections now (both directions per peer).
  virtual Status prepare(const std::vector<int>& peers, int channels) = 0;

  // Which transport serves a peer (without connecting).
  virtual Kind kindFor(int peer) const = 0;

  // Activity doorbell: take a token, check your conditions, then wait on the token.
  virtual uint64_t activityToken() const = 0;
  virtual void waitForActivity(uint64_t token, int64_t timeoutUs) = 0;
  // True when the ranks on this machine (whatever hosts they count as) outnumber its usable cores: an idle rank should
  // give its core away (sched_yield) rather than spin on it.
  virtual bool sharesCores() const { return false; }
  // How many idle passes an executor makes before it sleeps in waitForActivity, given the
  // configured number (THESEUS_SPIN_ITERS).
  virtual int64_t idlePassesBeforeSleep(int64_t configured) const { return configured; }

  // Counters per peer (index = rank), for attributes and telemetry.
  virtual PeerStats stats(int peer) const = 0;
  // Facts the backends settled at set-up, as attributes of this rank (the NIC and rail it
  // uses, its NUMA node); fixed for the communicator's life.
  virtual std::vector<std::pair<std::string, double>> setUpAttributes() const { return {}; }
  // Facts that change while the job runs (the state of the NIC port this rank uses), read by the
  // epoch thread every attribute interval and published when they change.
  virtual std::vector<std::pair<std::string, double>> liveAttributes() const { return {}; }

  // One direction of one channel with `peer` for the device executor, or an
  // error when the communicator has none with that peer (not local, or not set up).
  virtual Result<DeviceFifo> deviceFifo(int peer, int channel, bool send) {
    (void)channel;
    (void)send;
    return invalidUsage("no device FIFOs with rank %d", peer);
  }

  // Bytes of communication memory (FIFOs, staging) the transports allocated;
  // it stays allocated for the communicator's life (ncclCommMemStats' Persist).
  virtual uint64_t memoryBytes() const { return 0; }

  // The first failure of a connection that no operation was waiting on (transport/async_failure.h);
  // ok while there is none. Cheap: the engine asks on every idle millisecond of a wait.
  virtual Status asyncFailure() const { return Status::ok(); }
  // Who learns of that failure as it happens (once; set before the first connection is made).
  virtual void setAsyncFailureListener(std::function<void(const Status&)> fn) { (void)fn; }

  // The policy's NIC choice for this rank (Backend::setNicMove), passed to every backend.
  virtual void setNicMove(int move) { (void)move; }

  // ncclCommRegister'ed host buffers (user_buffers.h): transports that can send from them
  // without copying do. deregisterUserBuffer returns once no backend holds a registration of it.
  virtual void registerUserBuffer(uint64_t id, const void* base, size_t size) { (void)id, (void)base, (void)size; }
  virtual void deregisterUserBuffer(uint64_t id) { (void)id; }

  // ncclCommRegister'ed device buffers (shm/device_exports.h): local peers' device executors
  // read them in place. An error says why this one is not shared (the caller keeps FIFO slots).
  virtual Status registerDeviceBuffer(uint64_t id, const void* base, size_t size) {
    (void)id, (void)base, (void)size;
    return Status::ok();
  }
  virtual void deregisterDeviceBuffer(uint64_t id) { (void)id; }
  // The export holding [p, p + bytes) for the device executor's lowering (entry -1: none).
  virtual DeviceExportRef deviceExport(const void* p, size_t bytes) const {
    (void)p, (void)bytes;
    return {};
  }
  // Maps what local peers exported since the last call (the device executor calls it per group).
  virtual void refreshDeviceImports() {}

  // THESEUS_EMULATE's state for this communicator, or null when emulation is off.
  virtual LinkEmulation* emulation() { return nullptr; }
};

Result<std::unique_ptr<TransportManager>> createTransportManager(bootstrap::Bootstrap& bootstrap,
                                                                 const TransportOptions& options);

}  // namespace theseus::transport
