// The TransportManager of one communicator (see transport_manager.h for the
// contract): its backends (backend.h, in the order of backend_order.h), which
// backend serves each peer, the connections, the waits and the counters.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/backend.h"
#include "transport/connection_stats.h"
#include "transport/doorbell.h"
#include "transport/emulation.h"
#include "transport/fifo_proxy.h"
#include "transport/transport_config.h"
#include "transport/transport_manager.h"

namespace theseus::transport {

class TransportManagerImpl final : public TransportManager {
 public:
  TransportManagerImpl(bootstrap::Bootstrap& boot, const TransportOptions& options, const TransportConfig& config);
  ~TransportManagerImpl() override;

  // Collective (every rank of the communicator calls it at creation): sets up
  // every backend and assigns each peer the first one that can connect it.
  Status setUp();

  Result<SendConnection*> sendConnection(int peer, int channel) override;
  Result<RecvConnection*> recvConnection(int peer, int channel) override;
  Status prepare(const std::vector<int>& peers, int channels) override;
  Kind kindFor(int peer) const override;
  uint64_t activityToken() const override;
  void waitForActivity(uint64_t token, int64_t timeoutUs) override;
  bool sharesCores() const override { return sharesCores_; }
  int64_t idlePassesBeforeSleep(int64_t configured) const override;
  PeerStats stats(int peer) const override;
  std::vector<std::pair<std::string, double>> setUpAttributes() const override;
  std::vector<std::pair<std::string, double>> liveAttributes() const override;
  void setNicMove(int move) override;
  void registerUserBuffer(uint64_t id, const void* base, size_t size) override { userBuffers_.add(id, base, size); }
  void deregisterUserBuffer(uint64_t id) override;
  LinkEmulation* emulation() override { return emulation_.get(); }
  Result<DeviceFifo> deviceFifo(int peer, int channel, bool send) override;
  Status registerDeviceBuffer(uint64_t id, const void* base, size_t size) override;
  void deregisterDeviceBuffer(uint64_t id) override;
  DeviceExportRef deviceExport(const void* p, size_t bytes) const override;
  void refreshDeviceImports() override;
  class DeviceExports* deviceExports() const;
  uint64_t memoryBytes() const override;
  // Installs THESEUS_EMULATE's rules (before any connection exists).
  void setEmulation(std::unique_ptr<LinkEmulation> e) { emulation_ = std::move(e); }

  // Rings this rank's own doorbell (helper threads: accepted connection, freed slots).
  void wakeLocal();

  // Failures nothing waits on: the pump threads' sends, and the device FIFO proxy's.
  Status asyncFailure() const override;
  void setAsyncFailureListener(std::function<void(const Status&)> fn) override { failures_.setListener(std::move(fn)); }

 private:
  Status checkEndpoint(int peer, int channel) const;
  Result<Backend*> backendFor(int peer) const;
  Result<SendConnection*> createSend(int peer, int channel);
  Result<RecvConnection*> createRecv(int peer, int channel);
  int64_t connectTimeoutMs() const;
  // "rank 3 channel 0, ..." for receive connections of `peers` still being set up.
  std::string pendingReceives(const std::vector<int>& peers, int channels);
  // Spins on the doorbell for the adaptive budget; true when it rang.
  bool spinOnce(uint32_t token, uint64_t start, int64_t timeoutUs);
  void waitPolling(std::vector<struct pollfd>& fds, uint32_t token, uint64_t deadlineNs);

  AsyncFailure failures_;  // first: outlives the connections that report to it
  UserBuffers userBuffers_;  // likewise: connections look buffers up in it
  bootstrap::Bootstrap& boot_;
  TransportOptions options_;
  TransportConfig config_;
  int rank_ = 0;
  int nranks_ = 1;
  int channels_ = 1;
  int connChannels_ = 1;  // connections per peer: channels_, and as many for proxied device FIFOs
  bool spin_ = false;
  bool sharesCores_ = false;
  bool sleepEarly_ = false;  // see idlePassesBeforeSleep()
  uint64_t spinBudgetNs_ = 0;  // adaptive, see spinOnce()
  uint32_t spinProbe_ = 0;

  std::vector<std::unique_ptr<Backend>> backends_;
  std::unique_ptr<class ShmBackend> deviceFifos_;  // TransportOptions::deviceFifos
  // Per (peer, channel, direction), resolved once under mu_, then published (deviceFifoReady_, release)
  // and read without the lock.
  std::vector<DeviceFifo> deviceFifoCache_;
  std::unique_ptr<std::atomic<bool>[]> deviceFifoReady_;
  std::unique_ptr<FifoProxy> proxy_;                // device FIFOs of peers on other hosts (made under mu_)
  std::vector<Backend*> byPeer_;  // the backend serving each peer (null: self, or none can)
  DoorbellWord localBell_;        // the doorbell when no backend has one
  DoorbellWord* bell_ = &localBell_;
  int wakeFd_ = -1;               // eventfd: wakes waits that sleep in poll()
  std::atomic<uint32_t> pollSleepers_{0};

  // Connections: created once under mu_, then found without locking.
  std::mutex mu_;
  std::unique_ptr<std::atomic<SendConnection*>[]> send_;
  std::unique_ptr<std::atomic<RecvConnection*>[]> recv_;
  std::vector<std::unique_ptr<SendConnection>> ownedSend_;
  std::vector<std::unique_ptr<RecvConnection>> ownedRecv_;
  std::unique_ptr<ConnectionCounters[]> sendCounters_;
  std::unique_ptr<ConnectionCounters[]> recvCounters_;
  std::unique_ptr<LinkEmulation> emulation_;  // null unless THESEUS_EMULATE is set
};

}  // namespace theseus::transport
