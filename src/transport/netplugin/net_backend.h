// NetPluginBackend: an NCCL net plugin (net_plugin.h) as a transport backend
// (backend.h), ahead of the internal Socket network (backend_order.h says
// when); Theseus' own IB network (ib/ib_net.h) has the same table and runs in
// a second instance of this backend. Connections are net_connection.h's.
//
// Set-up is one allGather of {plugin name, version} (made by every rank that
// has the backend, even when its plugin is unusable, so the rounds line up):
// a pair uses the plugin only when both ranks loaded the same one, else the
// next backend (Socket) serves it — both sides decide alike. Each rank uses
// plugin device NVIDIA's library would pick for its GPU by PCI distance
// (net_device_choice.h; local rank modulo the devices without a GPU or a
// topology) and drives its connections from one NetPump thread, pinned to
// that NIC's NUMA node.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/backend.h"
#include "transport/netplugin/net_connection.h"
#include "transport/netplugin/net_device_choice.h"
#include "transport/netplugin/net_plugin.h"

namespace theseus::transport::netplugin {

class NetPluginBackend final : public Backend {
 public:
  // `plugin`: the process's loaded plugin (or built-in network: `kind` kIb), or null;
  // `enabled`: this rank offers it.
  // What the network knows about the state of one of its devices, as attributes named
  // `prefix` + name (the IB network: net_up, net_errors).
  using DeviceProbe = std::function<void(int device, const std::string& prefix,
                                         std::vector<std::pair<std::string, double>>* out)>;
  // The network's side of a policy's NIC choice for one of its devices: `from` -> `to`
  // (Backend::setNicMove values).
  using DeviceMove = std::function<void(int device, int from, int to)>;
  NetPluginBackend(const BackendContext& ctx, const NetPlugin* plugin, bool enabled, Kind kind = Kind::kNetPlugin,
                   DeviceProbe probe = nullptr, DeviceMove move = nullptr)
      : ctx_(ctx),
        plugin_(plugin),
        enabled_(enabled && plugin != nullptr),
        kind_(kind),
        probe_(std::move(probe)),
        move_(std::move(move)) {}
  ~NetPluginBackend() override;

  Kind kind() const override { return kind_; }
  Status setUp() override;
  bool canConnect(int peer) const override;
  void assigned(const std::vector<bool>& mine) override;
  Result<std::unique_ptr<SendConnection>> connectSend(int peer, int channel, ConnectionCounters* counters) override;
  Result<std::unique_ptr<RecvConnection>> connectRecv(int peer, int channel, ConnectionCounters* counters) override;
  std::string pendingReceives(const std::vector<int>& peers, int channels) override;
  std::string summary() const override;
  uint64_t memoryBytes() const override { return memoryBytes_.load(std::memory_order_relaxed); }
  // rank.<r>.net_device (the plugin device), and with the topology rank.<r>.rail (the NIC's
  // index on its host, NVIDIA's rail) and rank.<r>.nic_numa (its NUMA node).
  void setUpAttributes(std::vector<std::pair<std::string, double>>* out) const override;
  // The device probe's attributes for the device this rank uses, while it serves peers.
  void liveAttributes(std::vector<std::pair<std::string, double>>* out) const override;
  // Passed to the network for the device this rank uses (a network without DeviceMove has no
  // other port to offer: the choice is logged once and has no effect).
  void setNicMove(int move) override;
  void forgetUserBuffer(uint64_t id) override;

 private:
  NetParams paramsFor(int peer, int channel) const;
  void gdrReceives(NetParams* p) const;  // a proxied receive's GPUDirect RDMA, where the network and GPU allow
  NetPump* pump();

  BackendContext ctx_;
  const NetPlugin* plugin_;
  bool enabled_;
  Kind kind_;
  DeviceProbe probe_;
  DeviceMove move_;
  int nicMove_ = 0;  // the application thread's (Engine::adoptEpoch), and the destructor's
  int device_ = 0;
  DeviceChoice choice_;
  std::vector<bool> usable_;
  int peers_ = 0;
  std::mutex mu_;  // connections are made by the executor and the epoch thread
  std::unique_ptr<NetPump> pump_;
  struct Entry {
    NetPumpClient* client;
    int peer;
    int channel;
    bool receive;
  };
  std::vector<Entry> entries_;
  std::atomic<uint64_t> memoryBytes_{0};
  mutable std::atomic<bool> gdrLogged_{false};
};

}  // namespace theseus::transport::netplugin
