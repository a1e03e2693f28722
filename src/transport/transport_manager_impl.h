// The TransportManager of one communicator (see transport_manager.h for the
// contract). Internals shared by its two source files:
//   transport_manager_impl.cc  connections, waits, stats
//   transport_setup.cc         the collective set-up at creation (which peers
//                              use shm, inbox exchange, zero-copy probes)
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <string>
#include <vector>

#include "transport/connection_stats.h"
#include "transport/doorbell.h"
#include "transport/emulation.h"
#include "transport/region_cache.h"
#include "transport/shm_transport.h"
#include "transport/socket_transport.h"
#include "transport/transport_config.h"
#include "transport/transport_manager.h"

namespace theseus::transport {

class TransportManagerImpl final : public TransportManager {
 public:
  TransportManagerImpl(bootstrap::Bootstrap& boot, const TransportOptions& options, const TransportConfig& config);
  ~TransportManagerImpl() override;

  // Collective (every rank of the communicator calls it at creation).
  Status setUp();

  Result<SendConnection*> sendConnection(int peer, int channel) override;
  Result<RecvConnection*> recvConnection(int peer, int channel) override;
  Status prepare(const std::vector<int>& peers, int channels) override;
  Kind kindFor(int peer) const override;
  uint64_t activityToken() const override;
  void waitForActivity(uint64_t token, int64_t timeoutUs) override;
  bool sharesCores() const override { return sharesCores_; }
  PeerStats stats(int peer) const override;
  LinkEmulation* emulation() override { return emulation_.get(); }
  // Installs THESEUS_EMULATE's rules (before any connection exists).
  void setEmulation(std::unique_ptr<LinkEmulation> e) { emulation_ = std::move(e); }

  // Rings this rank's own doorbell (helper threads: accepted connection, freed slots).
  void wakeLocal();

 private:
  struct PeerSetup;  // what a rank published at creation (transport_setup.cc)
  Status setUpShm(const std::vector<PeerSetup>& all);
  Status checkEndpoint(int peer, int channel) const;
  Result<SendConnection*> createSend(int peer, int channel);
  Result<RecvConnection*> createRecv(int peer, int channel);
  int64_t connectTimeoutMs() const;
  // "rank 3 channel 0, ..." for receive connections of `peers` still being set up.
  std::string pendingReceives(const std::vector<int>& peers, int channels);
  // Spins on the doorbell for the adaptive budget; true when it rang.
  bool spinOnce(uint32_t token, uint64_t start, int64_t timeoutUs);
  void waitSockets(std::vector<struct pollfd>& fds, uint32_t token, uint64_t deadlineNs);

  bootstrap::Bootstrap& boot_;
  TransportOptions options_;
  TransportConfig config_;
  int rank_ = 0;
  int nranks_ = 1;
  int channels_ = 1;
  bool spin_ = false;
  bool sharesCores_ = false;
  uint64_t spinBudgetNs_ = 0;  // adaptive, see spinOnce()
  uint32_t spinProbe_ = 0;
  std::vector<Kind> kinds_;

  std::unique_ptr<ShmDomain> shm_;
  std::unique_ptr<RegionCache> regions_;
  DoorbellWord localBell_;       // the doorbell when this rank has no shm inbox
  DoorbellWord* bell_ = &localBell_;
  int wakeFd_ = -1;              // eventfd: wakes waits that sleep in poll() on sockets
  std::atomic<uint32_t> pollSleepers_{0};
  std::unique_ptr<SocketPump> pump_;

  // Connections: created once under mu_, then found without locking.
  std::mutex mu_;
  std::unique_ptr<std::atomic<SendConnection*>[]> send_;
  std::unique_ptr<std::atomic<RecvConnection*>[]> recv_;
  std::vector<std::unique_ptr<SendConnection>> ownedSend_;
  std::vector<std::unique_ptr<RecvConnection>> ownedRecv_;
  struct SocketEntry {
    SocketWaitable* waitable;
    int peer;
    int channel;
    bool receive;
  };
  std::vector<SocketEntry> sockets_;
  std::atomic<size_t> socketCount_{0};
  std::unique_ptr<ConnectionCounters[]> sendCounters_;
  std::unique_ptr<ConnectionCounters[]> recvCounters_;
  std::unique_ptr<LinkEmulation> emulation_;  // null unless THESEUS_EMULATE is set
};

}  // namespace theseus::transport
