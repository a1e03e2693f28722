// Transport backends: each way of connecting two ranks is a Backend in its
// own folder under src/transport/ (shm/ and socket/ today; cuda_ipc/, ib/ and
// netplugin/ next), behind this one interface. The TransportManager
// (transport_manager.h) owns a communicator's backends and, per peer, uses
// the first one in the configured order that can connect the pair.
//
// A backend declares:
//   * its set-up over the bootstrap (setUp): collective — every rank calls
//     setUp of every backend in the same order, and a backend makes the same
//     bootstrap calls on every rank whether or not it is enabled there (a rank
//     that disabled it just offers nothing), so the calls always line up;
//   * whether it can connect this rank with a peer (canConnect): settled
//     symmetrically by setUp, so both ranks of a pair pick the same backend;
//   * connectSend / connectRecv: one direction of one channel with one peer,
//     created lazily in any order on both sides (never a deadlock);
//   * what the executor waits on: a doorbell word peers ring (shared memory)
//     and/or descriptors to poll (sockets), plus what is still being set up.
// Connections are owned by the manager, which destroys them before their
// backend.
#pragma once

#include <poll.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "common/deadline.h"
#include "common/status.h"
#include "transport/async_failure.h"
#include "transport/connection_stats.h"
#include "transport/doorbell.h"
#include "transport/transport.h"
#include "transport/transport_config.h"
#include "transport/user_buffers.h"

namespace theseus::transport {

// What the manager hands its backends.
struct BackendContext {
  bootstrap::Bootstrap* boot = nullptr;
  TransportConfig config;
  int rank = 0;
  int nranks = 1;
  int channels = 1;              // per peer and direction
  int64_t connectTimeoutMs = 0;  // connects and set-up waits
  const AbortFlag* abort = nullptr;
  WakeFn wake = nullptr;         // rings the manager's doorbell
  void* wakeCtx = nullptr;
  AsyncFailure* failures = nullptr;  // where connections report failures nothing waits on
  const UserBuffers* userBuffers = nullptr;  // the user's registered host buffers (zero-copy sends)
  // The CUDA device whose memory the device FIFO proxy's FIFOs may keep payloads in (GPUDirect
  // RDMA), -1 for none. Its connections are those of channels >= `channels`.
  int gdrDevice = -1;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Kind kind() const = 0;

  // Collective (see above). An error fails the communicator's creation.
  virtual Status setUp() = 0;
  // After setUp: whether this backend connects this rank with `peer`.
  virtual bool canConnect(int peer) const = 0;
  // Called by the manager after it assigned peers to backends: `mine[peer]` is
  // true for the peers this backend serves (it may release the others).
  virtual void assigned(const std::vector<bool>& mine) { (void)mine; }

  virtual Result<std::unique_ptr<SendConnection>> connectSend(int peer, int channel, ConnectionCounters* counters) = 0;
  virtual Result<std::unique_ptr<RecvConnection>> connectRecv(int peer, int channel, ConnectionCounters* counters) = 0;

  // Waiting. A doorbell word peers ring when they give this rank work (at most
  // one backend has one; null: none).
  virtual DoorbellWord* doorbell() { return nullptr; }
  // Descriptors whose readiness means work (appended); false when it has none.
  virtual bool addPollFds(std::vector<struct pollfd>* fds) { (void)fds; return false; }
  // True when the kernel wakes a waiter as soon as this backend's peers send (through its
  // descriptors): a sleep then costs a wake-up, while an idle pass costs a system call per
  // connection (TransportManager::idlePassesBeforeSleep).
  virtual bool wakesThroughDescriptors() const { return false; }
  // "rank 3 channel 0, ..." for receive connections from `peers` still being set up.
  virtual std::string pendingReceives(const std::vector<int>& peers, int channels) {
    (void)peers;
    (void)channels;
    return "";
  }
  // Short description for the set-up log line ("3 peers").
  virtual std::string summary() const { return ""; }
  // Bytes of communication memory this backend allocated for the communicator.
  virtual uint64_t memoryBytes() const { return 0; }
  // Attributes of this rank the backend settled at set-up (TransportManager::setUpAttributes).
  virtual void setUpAttributes(std::vector<std::pair<std::string, double>>* out) const { (void)out; }
  // Attributes of this rank that change while the job runs (a NIC port's state), read every
  // attribute interval (TransportManager::liveAttributes).
  virtual void liveAttributes(std::vector<std::pair<std::string, double>>* out) const { (void)out; }
  // The policy's choice for this rank's own network port (policy::NicChoice: 0 stay, 1 another
  // NIC, 2 another NIC or TCP), set when the table that carries it takes effect. Backends
  // without ports to choose from ignore it.
  virtual void setNicMove(int move) { (void)move; }
  // A registered buffer goes (ncclCommDeregister): drop what the backend registered of it with
  // its network before this returns (the user may free the memory then).
  virtual void forgetUserBuffer(uint64_t id) { (void)id; }
};

}  // namespace theseus::transport
