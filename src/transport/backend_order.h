// Which transport backends a communicator uses, in which order.
//
// The manager asks backends in this order, per peer, and the first that can
// connect the pair serves it:
//   1. shm     — shared-memory FIFOs between ranks of one host
//                (off: NCCL_SHM_DISABLE=1 or THESEUS_TRANSPORT=socket);
//   2. netplugin — the NCCL net plugin NCCL_NET_PLUGIN loaded (netplugin/),
//                between hosts, and for local peers shm does not serve; used
//                when NCCL_NET is unset or names the plugin's network, and for
//                a pair only when both ranks loaded the same plugin;
//   3. ib       — Theseus' InfiniBand/RoCE network, NCCL's "IB" (ib/ib_net.h,
//                run by a second net-plugin backend): pairs of ranks that both
//                have an active HCA port; made on every rank unless
//                NCCL_IB_DISABLE=1 or THESEUS_TRANSPORT=socket, used when
//                NCCL_NET is unset or "IB" (NCCL_NET=IB without a port fails init);
//   4. socket   — Theseus' TCP network, NCCL's "Socket": every other pair.
//                NCCL_NET=Socket skips the plugin and IB; a NCCL_NET that names
//                no network Theseus has fails init, as in NCCL.
// (Next: cuda_ipc before shm for GPU buffers, NCCL_P2P_DISABLE=1 turning it
// off.)
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

// The backends for `config`, or for `explicitNames` ("shm", "netplugin", "ib", "socket") when not empty.
Result<std::vector<std::unique_ptr<Backend>>> makeBackends(const BackendContext& ctx,
                                                           const std::vector<std::string>& explicitNames);

}  // namespace theseus::transport
