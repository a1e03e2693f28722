// ShmBackend: shared-memory FIFOs between ranks of one host (shm_domain.h),
// as a transport backend (backend.h). Disabled by NCCL_SHM_DISABLE=1 or
// THESEUS_TRANSPORT=socket; a disabled rank still takes part in the set-up
// rounds, offering nothing, so its local peers reach it over the next backend.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/backend.h"
#include "transport/shm/device_exports.h"
#include "transport/shm/region_cache.h"
#include "transport/shm/shm_domain.h"

namespace theseus::transport {

class ShmBackend final : public Backend {
 public:
  // kConnections: the host executor's connections. kDeviceFifos: a second set
  // of inboxes whose FIFOs the device executor drives itself (deviceFifo()),
  // their slots in GPU memory shared by CUDA IPC when `slotsOnDevice` and the
  // pair could open it (device_inbox.h), else in the inbox.
  enum class Role { kConnections, kDeviceFifos };
  ShmBackend(const BackendContext& ctx, bool enabled, Role role = Role::kConnections, bool slotsOnDevice = false);
  ~ShmBackend() override;

  Kind kind() const override { return Kind::kShm; }
  Status setUp() override;
  bool canConnect(int peer) const override;
  Result<std::unique_ptr<SendConnection>> connectSend(int peer, int channel, ConnectionCounters* counters) override;
  Result<std::unique_ptr<RecvConnection>> connectRecv(int peer, int channel, ConnectionCounters* counters) override;
  DoorbellWord* doorbell() override;
  std::string summary() const override;
  uint64_t memoryBytes() const override;
  // kDeviceFifos: one direction of one channel with a local peer.
  Result<DeviceFifo> deviceFifo(int peer, int channel, bool send);
  // kDeviceFifos with slots on the GPU: registered device buffers local peers
  // read in place (device_exports.h); null without peers to share them with.
  DeviceExports* deviceExports() const { return deviceExports_.get(); }

 private:
  struct PeerSetup;  // what a rank published in round 1
  Status mapPeers(const std::vector<PeerSetup>& all);

  BackendContext ctx_;
  bool enabled_;
  Role role_;
  bool slotsOnDevice_;
  std::vector<bool> mine_;  // per rank: a mutually mapped shm peer
  std::vector<bool> sendOnDevice_, recvOnDevice_;  // per rank and direction: device FIFO slots in GPU memory
  std::vector<bool> directOnDevice_;                // per rank: zero-copy reads of registered buffers both ways
  std::unique_ptr<class DeviceInbox> deviceInbox_;
  std::unique_ptr<DeviceExports> deviceExports_;
  int peerCount_ = 0;
  std::unique_ptr<ShmDomain> domain_;
  std::unique_ptr<RegionCache> regions_;
};

}  // namespace theseus::transport
