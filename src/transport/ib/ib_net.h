// Theseus' InfiniBand/RoCE network, "IB" by NCCL's name: verbs (ib_verbs.h)
// behind NCCL's net API v12 table, so the net-plugin backend
// (netplugin/net_backend.h) carries it exactly like an external plugin —
// the same connections, pump thread, NIC choice and errors. The devices are
// ib_devices.h's, the connections ib_comm.h's. Host memory only for now
// (NCCL_PTR_HOST): device buffers reach it staged through host memory.
#pragma once

#include <string>

#include "transport/netplugin/nccl_net_abi.h"

namespace theseus::transport::ib {

inline constexpr int kIbNetVersion = 12;
const ncclNet_v12_t* ibNet();
// What the last call of this thread that failed said (the network's own words: the device, the
// peer, the QP, the completion status); "" when none failed.
const char* ibLastError();
void ibSetLastError(const std::string& text);

}  // namespace theseus::transport::ib
