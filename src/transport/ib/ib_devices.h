// The HCA ports the IB network offers, discovered once per process.
//
// Discovery: every verbs device, every port of it that is ACTIVE with an
// InfiniBand or Ethernet (RoCE) link layer and that NCCL_IB_HCA allows, in
// the verbs library's order; each becomes one network device. Ports of one
// HCA share its context, protection domain and registration cache.
//
// Addressing: on InfiniBand a port is reached by its LID (and GID index 0,
// or NCCL_IB_GID_INDEX, when global routing is needed); on RoCE by a GID:
// NCCL_IB_GID_INDEX, else the first GID of type RoCE v<NCCL_IB_ROCE_VERSION_NUM>
// whose address is of NCCL_IB_ADDR_FAMILY (IPv4-mapped for AF_INET), else
// the first non-zero GID.
//
// Port state: a monitor thread reads every context's asynchronous events
// (port error / active, fatal QP and CQ errors) and keeps each port's state
// and error count, which connections check and the backend reports. Every
// 500 ms it also queries each port's link rate (a link that trains down to
// fewer lanes or a lower speed raises no event), which the backend reports as
// rank.<r>.net_rate_gbps for policies to see.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "transport/ib/ib_mr_cache.h"
#include "transport/ib/ib_verbs.h"

namespace theseus::transport::ib {

struct IbDevice {
  std::string name;          // the HCA ("mlx5_0")
  int port = 1;
  ibv_context* context = nullptr;
  ibv_pd* pd = nullptr;
  MrCache* mrs = nullptr;
  bool roce = false;         // Ethernet link layer
  uint16_t lid = 0;
  ibv_mtu mtu = IBV_MTU_4096;
  int gidIndex = 0;
  ibv_gid gid{};
  uint64_t guid = 0;
  std::string pciPath;       // sysfs path of the PCI device ("" when unknown)
  int speedMbps = 0;
  int maxQpWr = 0;
  // GPUDirect RDMA: the provider registers dma-bufs (ibv_reg_dmabuf_mr probed at open), and the
  // host's kernel lets the HCA reach GPU memory by address (nvidia-peermem loaded).
  bool dmaBuf = false;
  bool peerMemory = false;
  std::atomic<bool> up{true};
  std::atomic<uint64_t> asyncErrors{0};
  std::atomic<uint64_t> downEvents{0};   // times the port went down (its QPs then went to the error state)
  std::atomic<uint64_t> failovers{0};  // connections of this port that moved to TCP
  std::atomic<int> away{0};            // connections set up on this port that run on another HCA now
  std::atomic<int> rateMbps{0};        // the link rate now (active speed x width; the monitor's last query)
  // The policy's choices for this port (policy::NicChoice: [1] other_nic, [2] any), one vote per
  // communicator of the process that asks; the strongest asked for applies to every connection
  // set up on the port (ib_comm.h, "Moves the policy asks for").
  std::atomic<int> moveVotes[3] = {};
  int policyMove() const {
    return moveVotes[2].load(std::memory_order_relaxed) > 0   ? 2
           : moveVotes[1].load(std::memory_order_relaxed) > 0 ? 1
                                                               : 0;
  }
  std::string describe() const;  // "mlx5_0:1 (IB, LID 3, 200000 Mb/s)"
};

class IbDevices {
 public:
  // The process's IB devices; empty (with why()) when there are none.
  static const IbDevices& get();
  const std::vector<IbDevice*>& devices() const { return devices_; }
  const std::string& why() const { return why_; }
  const IbVerbs* verbs() const { return verbs_; }

 private:
  void discover();
  const IbVerbs* verbs_ = nullptr;
  std::vector<IbDevice*> devices_;  // never freed: the monitor thread and connections use them until exit
  std::string why_;
};

// NVIDIA's table: Mb/s of one lane at `activeSpeed`, times the lanes of `activeWidth`.
int ibPortSpeedMbps(int activeSpeed, int activeWidth);

}  // namespace theseus::transport::ib
