// Which transport backends a communicator uses, in which order.
//
// The manager asks backends in this order, per peer, and the first that can
// connect the pair serves it:
//   1. shm     — shared-memory FIFOs between ranks of one host
//                (off: NCCL_SHM_DISABLE=1 or THESEUS_TRANSPORT=socket);
//   2. network — between hosts, and for local peers shm does not serve:
//                today "Socket" (TCP). NCCL_NET picks a network by NCCL's name;
//                one Theseus does not have fails init, as in NCCL.
// NCCL_NET_PLUGIN's plugin is loaded and its devices reported (netplugin/),
// but carries no data yet; NCCL_NET naming its network fails init saying so.
// (Next: cuda_ipc before shm for GPU buffers, NCCL_P2P_DISABLE=1 turning it
// off; ib and NCCL net plugins as backends ahead of Socket.)
//
// Every rank instantiates the same backends in the same order (their set-up
// rounds must line up); a backend a rank disabled still takes part, offering
// nothing. Tests (and tools) may name the backends explicitly with
// TransportOptions::backends — equal on all ranks.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "transport/backend.h"

namespace theseus::transport {

// The backends for `config`, or for `explicitNames` ("shm", "socket") when not empty.
Result<std::vector<std::unique_ptr<Backend>>> makeBackends(const BackendContext& ctx,
                                                           const std::vector<std::string>& explicitNames);

}  // namespace theseus::transport
