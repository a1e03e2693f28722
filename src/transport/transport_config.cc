#include "transport/transport_config.h"

#include <strings.h>

#include <algorithm>
#include <string>

#include "bootstrap/bootstrap_settings.h"
#include "common/knobs.h"

namespace theseus::transport {
namespace {

const StringKnob kTransport("THESEUS_TRANSPORT", "auto",
                            "Data transport between ranks: 'auto' (shared memory on one host; between hosts a net "
                            "plugin, IB or TCP sockets) or 'socket' (TCP everywhere)");
const BoolKnob kShmDisable("NCCL_SHM_DISABLE", false, "1 disables the shared-memory transport (TCP sockets instead)");
const BoolKnob kP2pDisable("NCCL_P2P_DISABLE", false,
                           "1 disables GPU peer-to-peer transfers (CUDA IPC): the CUDA executor's FIFOs with local "
                           "peers keep their slots in pinned host memory instead of the receiver's GPU memory");
const StringKnob kNetPlugin("NCCL_NET_PLUGIN", nullptr,
                            "NCCL net plugins to look for, NCCL's rules (comma list; name or path, then "
                            "libnccl-net-<name>.so; 'none'): the first usable one carries the traffic between hosts "
                            "(and between local ranks shared memory does not serve), ahead of the internal Socket "
                            "network; Theseus' own TCP network is the plugin libnccl-net-theseus.so. NCCL tuner and "
                            "profiler plugins are looked for in this library when their own is not found, as NCCL "
                            "does");
const IntKnob kShmSlots("THESEUS_SHM_SLOTS", 8, "Slots per shared-memory FIFO (one FIFO per sender and channel)");
const IntKnob kShmSlotBytes("THESEUS_SHM_SLOT_BYTES", 128 << 10,
                            "Bytes per shared-memory FIFO slot, rounded up to 4 KiB: the largest inline message (wins over "
                            "NCCL_BUFFSIZE)");
const IntKnob kBuffSize("NCCL_BUFFSIZE", -1,
                        "Bytes per FIFO (all slots) of each connection when THESEUS_*_SLOT_BYTES are unset; "
                        "-1: the transports' defaults");
const IntKnob kSpinUs("THESEUS_SHM_SPIN_US", 20,
                      "Longest spin, in microseconds, of an idle rank on its doorbell before it sleeps on the "
                      "futex (only with a core per local rank; shrinks while spins do not pay off)");
const IntKnob kRegionCache("THESEUS_SHM_REGION_CACHE", 64,
                           "Peer memory regions (ncclMemAlloc buffers, shared scratch) kept mapped per communicator "
                           "for zero-copy receives; least recently used ones are unmapped beyond this");
const BoolKnob kShmDirect("THESEUS_SHM_DIRECT", true,
                          "Send peer-mappable memory (ncclMemAlloc buffers, shared scratch) zero-copy over shm");
const BoolKnob kNetGdrRead("NCCL_NET_GDR_READ", true,
                            "GPUDirect RDMA for sends: the CUDA executor's FIFOs to peers on other hosts keep their "
                            "payload slots in GPU memory, and the network reads them there, wherever it registers GPU "
                            "memory (a dma-buf, or nvidia-peermem); 0 stages every such message through pinned host "
                            "memory. Receives land in GPU memory within NCCL_NET_GDR_LEVEL whatever this says");
const BoolKnob kNetForceFlush("NCCL_NET_FORCE_FLUSH", false,
                              "Flush every GPUDirect RDMA receive (the network's iflush) before the GPU reads it, on "
                              "Hopper and later GPUs too; by default only GPUs before compute capability 9.0, and "
                              "networks whose properties ask for it, are flushed");
const StringKnob kNetGdrLevel("NCCL_NET_GDR_LEVEL", "PXB",
                              "The farthest PCI path between a rank's GPU and its NIC over which GPUDirect RDMA is "
                              "used, for sends (NCCL_NET_GDR_READ) and receives: LOC (never), PIX (same PCIe "
                              "switch), PXB (several switches), PHB (through the CPU's host bridge) or SYS (across sockets), or NCCL's "
                              "integers 0..4 for them. Where the host's topology is unknown, the network's support "
                              "decides");
const BoolKnob kDmaBufEnable("NCCL_DMABUF_ENABLE", true,
                              "GPUDirect RDMA registers GPU memory with the network through a dma-buf where the "
                              "driver and the network offer one; 0: only by address (nvidia-peermem)");
const IntKnob kNetZeroCopy("THESEUS_NET_ZERO_COPY", -1,
                           "Send pieces of ncclCommRegister'ed host buffers without copying them into the "
                           "connection's ring (the network registers the buffer once): 1 over the IB network and "
                           "every net plugin, 0 never, -1 over the IB network only (a socket network copies in the "
                           "kernel anyway, and the extra header message made it slower)");
const IntKnob kSocketSlots("THESEUS_SOCKET_SLOTS", 16, "Slots per TCP connection ring (send and receive side)");
const IntKnob kSocketSlotBytes("THESEUS_SOCKET_SLOT_BYTES", 128 << 10,
                               "Bytes per TCP ring slot, rounded up to 4 KiB: the largest message on a socket connection");
const IntKnob kSocketNsocks("THESEUS_SOCKET_NSOCKS", -1,
                            "TCP sockets per peer, channel and direction; large messages are striped across them "
                            "(-1: NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD when set, else 1)");
const IntKnob kSocketThreads("NCCL_SOCKET_NTHREADS", -2,
                             "With NCCL_NSOCKS_PERTHREAD: sockets per connection = product (threads are not used)");
const IntKnob kSocketsPerThread("NCCL_NSOCKS_PERTHREAD", -2, "See NCCL_SOCKET_NTHREADS");
const IntKnob kStripeMin("THESEUS_SOCKET_STRIPE_MIN_BYTES", 64 << 10,
                         "Messages at least this large are striped across the sockets of a connection");
const IntKnob kSndBuf("NCCL_SOCKET_SNDBUF", -1, "SO_SNDBUF of data sockets in bytes (-1: kernel autotuning)");
const IntKnob kRcvBuf("NCCL_SOCKET_RCVBUF", -1, "SO_RCVBUF of data sockets in bytes (-1: kernel autotuning)");

Status checkRange(const IntKnob& knob, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi)
    return invalidArgument("%s=%lld is out of range [%lld, %lld]", knob.name(), static_cast<long long>(value),
                           static_cast<long long>(lo), static_cast<long long>(hi));
  return Status::ok();
}

// Slot bytes from the explicit knob, else NCCL_BUFFSIZE / slots, else the default.
Result<size_t> slotBytesFrom(const IntKnob& knob, int64_t slots) {
  int64_t v = knob.get();
  if (!knob.isSet()) {
    int64_t buff = kBuffSize.get();
    if (buff > 0) {
      v = buff / slots;
      v -= v % 4096;
      if (v < static_cast<int64_t>(kMinSlotBytes))
        return invalidArgument("NCCL_BUFFSIZE=%lld is too small: %lld slots need at least %zu bytes",
                               static_cast<long long>(buff), static_cast<long long>(slots), slots * kMinSlotBytes);
    }
  }
  TH_CHECK(checkRange(knob, v, kMinSlotBytes, kMaxSlotBytes));
  return static_cast<size_t>((v + 4095) / 4096 * 4096);  // page-aligned slots copy faster
}

}  // namespace

namespace {
const char* const kGdrLevels[] = {"LOC", "PIX", "PXB", "PHB", "SYS"};
}  // namespace

const char* gdrLevelName(int level) { return kGdrLevels[std::clamp(level, 0, 4)]; }

Result<int> parseGdrLevel(const std::string& text) {
  for (int i = 0; i < 5; ++i)
    if (strcasecmp(text.c_str(), kGdrLevels[i]) == 0 || text == std::to_string(i)) return i;
  return invalidArgument("NCCL_NET_GDR_LEVEL='%s' is not one of LOC, PIX, PXB, PHB, SYS (or 0..4)", text.c_str());
}

Result<TransportConfig> readTransportConfig() {
  TransportConfig c;
  std::string mode = kTransport.get();
  if (strcasecmp(mode.c_str(), "auto") == 0 || strcasecmp(mode.c_str(), "shm") == 0) {
    c.mode = TransportMode::kAuto;
  } else if (strcasecmp(mode.c_str(), "socket") == 0 || strcasecmp(mode.c_str(), "tcp") == 0) {
    c.mode = TransportMode::kSocket;
    c.socketOnly = true;
  } else {
    return invalidArgument("THESEUS_TRANSPORT='%s' is not one of auto, shm, socket", mode.c_str());
  }
  if (kShmDisable.get()) c.mode = TransportMode::kSocket;

  int64_t slots = kShmSlots.get();
  TH_CHECK(checkRange(kShmSlots, slots, 2, kMaxSlots));
  c.shmSlots = static_cast<uint32_t>(slots);
  TH_ASSIGN(c.shmSlotBytes, slotBytesFrom(kShmSlotBytes, slots));

  c.spinUs = kSpinUs.get();
  TH_CHECK(checkRange(kSpinUs, c.spinUs, 0, 1000000));
  int64_t cache = kRegionCache.get();
  TH_CHECK(checkRange(kRegionCache, cache, 1, 1 << 20));
  c.regionCacheEntries = static_cast<uint32_t>(cache);
  c.useDirect = kShmDirect.get();
  c.netZeroCopy = static_cast<int>(kNetZeroCopy.get());

  slots = kSocketSlots.get();
  TH_CHECK(checkRange(kSocketSlots, slots, 2, kMaxSlots));
  c.socketSlots = static_cast<uint32_t>(slots);
  TH_ASSIGN(c.socketSlotBytes, slotBytesFrom(kSocketSlotBytes, slots));

  int64_t nsocks = kSocketNsocks.get();
  if (nsocks == -1) {
    int64_t threads = kSocketThreads.get(), perThread = kSocketsPerThread.get();
    nsocks = (threads > 0 && perThread > 0) ? threads * perThread : 1;
  }
  TH_CHECK(checkRange(kSocketNsocks, nsocks, 1, kMaxSocketsPerConnection));
  c.socketsPerConnection = static_cast<uint32_t>(nsocks);
  int64_t stripe = kStripeMin.get();
  TH_CHECK(checkRange(kStripeMin, stripe, 1, int64_t(1) << 40));
  c.stripeMinBytes = static_cast<size_t>(stripe);

  int64_t snd = kSndBuf.get(), rcv = kRcvBuf.get();
  TH_CHECK(checkRange(kSndBuf, snd, -1, INT32_MAX));
  TH_CHECK(checkRange(kRcvBuf, rcv, -1, INT32_MAX));
  c.socketSendBuf = static_cast<int>(snd);
  c.socketRecvBuf = static_cast<int>(rcv);

  c.netPlugin = kNetPlugin.get();
  c.p2pDisable = kP2pDisable.get();
  c.netGdrRead = kNetGdrRead.get();
  c.dmaBufEnable = kDmaBufEnable.get();
  c.netForceFlush = kNetForceFlush.get();
  TH_ASSIGN(c.netGdrLevel, parseGdrLevel(kNetGdrLevel.get()));

  c.connectTimeoutMs = bootstrap::connectTimeoutMs();
  return c;
}

}  // namespace theseus::transport
