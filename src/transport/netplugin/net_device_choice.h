// Which device of the net plugin a rank uses, and where its progress thread runs.
//
// With the host's topology (topology/topology.h) and the rank's GPU known, the
// rank takes the NIC NVIDIA's library would (the closest by PCI path, shared
// in turn among GPUs with the same closest set) and the plugin device that is
// that NIC: same name (or one of the NIC's OS device names), or a PCI path
// ending in its bus id. Otherwise — no topology, a CPU-only rank, a NIC the
// plugin does not expose — local rank modulo the device count, and `why` says
// which. The progress thread is pinned to the CPUs of the chosen NIC's NUMA
// node when the topology knows it.
#pragma once

#include <string>
#include <vector>

#include "topology/topology.h"
#include "transport/netplugin/net_plugin.h"

namespace theseus::transport::netplugin {

struct DeviceChoice {
  int device = 0;
  std::vector<int> cpus;  // for the progress thread; empty: not pinned
  int rail = -1;          // the NIC's index in the host's topology (-1: not chosen by topology)
  int numa = -1;          // its NUMA node
  int path = -1;          // topology::Path from the rank's GPU to the NIC (-1: not chosen by topology)
  std::string why;        // "closest to GPU 3 (PIX): mlx5_1", "local rank 2 of 4 devices", ...
};

// GPUDirect RDMA over a choice (NCCL_NET_GDR_LEVEL, TransportConfig::netGdrLevel: 0 LOC never, 1 PIX,
// 2 PXB, 3 PHB, 4 SYS): the GPU-to-NIC path is at most that far, or unknown (no topology: the network's
// own word decides).
bool gdrWithin(const DeviceChoice& c, int level);

DeviceChoice chooseNetDevice(const topology::Topology* topo, int cudaDev, const std::vector<NetDevice>& devices,
                             int localRank);

}  // namespace theseus::transport::netplugin
