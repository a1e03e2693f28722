// Transport configuration: every knob of the shm and socket transports, read
// once when a communicator's TransportManager is created and validated then
// (a bad value is an ncclInvalidArgument naming the variable, not a surprise
// on the first collective).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace theseus::transport {

enum class TransportMode : uint8_t {
  kAuto,    // shm between ranks of one host, sockets between hosts
  kSocket,  // sockets everywhere (THESEUS_TRANSPORT=socket or NCCL_SHM_DISABLE=1)
};

struct TransportConfig {
  TransportMode mode = TransportMode::kAuto;
  bool socketOnly = false;  // THESEUS_TRANSPORT=socket: no shm and no IB either

  // Shared-memory FIFOs (one per sender, channel) in the receiver's inbox.
  // 8 x 128 KiB: measured against 64 KiB..1 MiB slots, the FIFO that stays in
  // L2 (1 MiB) streamed fastest between two cores (see transport_bench).
  uint32_t shmSlots = 8;
  size_t shmSlotBytes = 128 << 10;
  int64_t spinUs = 20;              // spin before sleeping (only with a core per local rank)
  uint32_t regionCacheEntries = 64; // peer regions kept mapped per communicator
  bool useDirect = true;            // zero-copy messages for peer-mappable memory

  int netZeroCopy = -1;             // registered buffers sent without a copy: 1 any network, 0 none, -1 IB only

  // TCP sockets.
  uint32_t socketSlots = 16;          // 2 MiB in flight per connection
  size_t socketSlotBytes = 128 << 10;  // = the executor's default slice
  uint32_t socketsPerConnection = 1;
  size_t stripeMinBytes = 64 << 10;  // smaller messages use socket 0 only
  int socketSendBuf = -1;             // SO_SNDBUF; -1 leaves the kernel's autotuning
  int socketRecvBuf = -1;

  // Backend choice (backend_order.h).
  std::string net;        // ncclConfig_t.netName / NCCL_NET (TransportOptions::net): by NCCL's name ("Socket"); empty: any
  std::string netPlugin;  // NCCL_NET_PLUGIN (loaded and queried once per process; carries no data yet)
  bool p2pDisable = false;  // NCCL_P2P_DISABLE: device FIFO slots stay in host memory (no CUDA IPC)
  bool netGdrRead = true;   // NCCL_NET_GDR_READ: proxied device FIFOs send from GPU memory where the network can
  bool dmaBufEnable = true; // NCCL_DMABUF_ENABLE: GPU memory registered through dma-bufs (else by address only)
  int netGdrLevel = 2;      // NCCL_NET_GDR_LEVEL: farthest GPU-NIC path for GPUDirect RDMA (0 LOC .. 4 SYS; PXB)
  bool netForceFlush = false;  // NCCL_NET_FORCE_FLUSH: flush every GPUDirect RDMA receive, Hopper and later too

  // THESEUS_CONNECT_TIMEOUT_MS (declared by the bootstrap): connectTo of a send
  // connection, and prepare() waiting for the peers' connections.
  int64_t connectTimeoutMs = 60000;
};

// Reads and validates the knobs (THESEUS_SHM_*, THESEUS_SOCKET_*, THESEUS_TRANSPORT,
// NCCL_SHM_DISABLE, NCCL_P2P_DISABLE, NCCL_NET_GDR_READ, NCCL_NET_GDR_LEVEL, NCCL_DMABUF_ENABLE,
// NCCL_NET_FORCE_FLUSH,
// NCCL_NET_PLUGIN, NCCL_BUFFSIZE,
// NCCL_SOCKET_NTHREADS, NCCL_NSOCKS_PERTHREAD, NCCL_SOCKET_SNDBUF/RCVBUF;
// THESEUS_CONNECT_TIMEOUT_MS through the bootstrap's settings).
Result<TransportConfig> readTransportConfig();

// NCCL_NET_GDR_LEVEL's value: LOC, PIX, PXB, PHB or SYS (any case), or NCCL's legacy integers 0..4
// for the same; 0 (LOC) means never, 4 (SYS) always.
Result<int> parseGdrLevel(const std::string& text);
// The level's name ("PXB"), for messages; levels outside 0..4 are clamped.
const char* gdrLevelName(int level);

// Limits shared by the config checks and the wire-format checks.
inline constexpr size_t kMinSlotBytes = 4096;
inline constexpr size_t kMaxSlotBytes = size_t(1) << 30;
inline constexpr uint32_t kMaxSlots = 1024;
inline constexpr uint32_t kMaxSocketsPerConnection = 64;

}  // namespace theseus::transport
