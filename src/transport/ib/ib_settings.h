// The NCCL_IB_* variables the IB network honours (NVIDIA's names and defaults),
// read once per process.
#pragma once

#include <string>

namespace theseus::transport::ib {

struct IbSettings {
  bool disable = false;      // NCCL_IB_DISABLE
  std::string hca;           // NCCL_IB_HCA
  int gidIndex = -1;         // NCCL_IB_GID_INDEX (-1: chosen by RoCE version and address family)
  int roceVersion = 2;       // NCCL_IB_ROCE_VERSION_NUM
  int addrFamily = 0;        // NCCL_IB_ADDR_FAMILY: AF_INET (default) or AF_INET6
  int timeout = 20;          // NCCL_IB_TIMEOUT: 4.096 us * 2^timeout per retry
  int retryCount = 7;        // NCCL_IB_RETRY_CNT
  int serviceLevel = 0;      // NCCL_IB_SL
  int trafficClass = 0;      // NCCL_IB_TC
  int pkeyIndex = 0;         // NCCL_IB_PKEY
  int qpsPerConnection = 1;  // NCCL_IB_QPS_PER_CONNECTION
  bool failover = true;      // THESEUS_IB_FAILOVER
  bool failoverHca = true;   // THESEUS_IB_FAILOVER_HCA
  bool gdrFlushDisable = false;  // NCCL_GDR_FLUSH_DISABLE: iflush of GPU memory does nothing
  static const IbSettings& get();
};

}  // namespace theseus::transport::ib
