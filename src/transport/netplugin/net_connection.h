// Connections over an NCCL net plugin (the backend is net_backend.h).
//
// One connection = one direction between two ranks on one channel = one
// plugin comm. Set-up follows the plugin's model, without ever blocking the
// executor: the *receiver* calls listen() on its device and sends the handle
// to the peer through the bootstrap (connectTo(peer, netTag(channel)), which
// never waits for the peer's code) in a NetHandoff naming rank, channel and
// plugin; it then polls accept(). The *sender* claims that handoff on a helper
// thread (the peer may ask for its receive connection much later) and then
// polls connect() with the handle (connect/accept are non-blocking by the
// plugin contract: a null comm means "not yet"). Either side may be asked for
// in any order; messages committed before the comm exists wait in the ring.
//
// Data: each side has a ring of `slots` slots (<= 8, the requests NCCL lets a
// plugin comm have in flight), registered once with the plugin (regMr, host
// memory). A slot holds [NetMessageHeader{magic, tag, bytes}][payload]: the
// plugin's own tag is fixed (0) and Theseus' tag travels in the header, so the
// receiver learns it with the data (and checks it, as every transport does).
// The receiver keeps an irecv of a whole slot posted in every free slot;
// tryPeek tests the oldest; release() posts it again. The sender's commit
// writes the header and calls isend; a slot is free again once test() says
// the send completed.
//
// Zero-copy sends (THESEUS_NET_ZERO_COPY): a piece that lies in a buffer the
// user registered (ncclCommRegister, transport/user_buffers.h) goes as two
// messages: a header alone, magic "TNSD", then the payload, sent by the plugin
// straight from the user's memory with the buffer's own registration (regMr
// on this comm at its first use, deregMr when the user deregisters it). It
// takes two ring entries on both sides; the receiver's next slot holds the
// payload without a header, and tryPeek returns it once both arrived. The
// executor treats it as a direct message: the round that sent it finishes
// only once the plugin completed the send (consumed(ticket)), so nothing
// overwrites that memory while the network still reads it. The receive side
// still lands in the ring (the executor reduces or copies from there).
//
// GPUDirect RDMA sends (send regions, transport.h): the device FIFO proxy's
// slots in GPU memory go the same way as a zero-copy send, with a registration
// of the region made once the comm exists: through a dma-buf of the range
// (device/dmabuf.h, regMrDmaBuf) where the device says NCCL_PTR_DMABUF and the
// driver exports one, else by address (regMr, NCCL_PTR_CUDA) where it says
// NCCL_PTR_CUDA. A region the plugin refuses is reported as such (WARN), and
// the proxy then copies its messages to host memory first.
//
// GPUDirect RDMA receives (receive regions, transport.h): the device FIFO
// proxy's receive connection may let payloads land straight in the FIFO's slots
// in GPU memory. Every message then travels as a pair, as a zero-copy send
// does — a header alone, then the payload — so the header (tag, size) arrives
// in host memory where the proxy reads it, and the payload where the proxy
// offered: the receiver posts header and payload receives alternately, in
// order, a payload's only once the proxy offered a FIFO slot for it (the slot
// the kernel released). Where the region was registered (dma-buf, else by
// address) the payload's irecv names the slot; otherwise its own ring slot,
// and the proxy copies. The receiver decides at creation (NetParams::
// gdrRecvDevice: the network's pointer support, the GDR level, the driver)
// and says so in the handoff (kSplitPayloads), so the sender knows the format
// before its first message; a proxied send connection therefore takes no
// message before the handoff arrived. Once a payload's receive completed it
// is flushed (iflush, tested to completion) before tryPeek returns it, where
// NCCL's rule asks for it (NetParams::gdrFlush): GPUs before Hopper, a
// network whose properties force it, NCCL_NET_FORCE_FLUSH=1.
//
// Progress: a plugin moves bytes only when called (isend returning "retry",
// test). The executor drives its connections while it runs; the backend's
// NetPump thread drives those with work in flight (sends not yet complete,
// receives the executor waits for, set-ups) and rings the executor's doorbell
// when something completes — so data keeps flowing after the executor
// returned to the application, as NCCL's proxy thread does. A connection's
// plugin calls are serialised by its mutex.
//
// Errors (a plugin call that fails, a header with a bad magic or size, a
// handoff from the wrong rank, channel or plugin) are sticky, name the peer
// and the plugin, and are returned by the next call; never a crash or a hang.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "common/deadline.h"
#include "common/status.h"
#include "transport/async_failure.h"
#include "transport/connection_stats.h"
#include "transport/doorbell.h"
#include "transport/netplugin/net_api.h"
#include "transport/socket/socket_io.h"
#include "transport/transport.h"
#include "transport/user_buffers.h"

namespace theseus::transport::netplugin {

inline constexpr uint32_t kMaxNetSlots = 8;

namespace wire {
inline constexpr uint64_t kHandoffMagic = 0x3246464f4e544854ull;  // "THTNOFF2"
inline constexpr uint32_t kMessageMagic = 0x4d534e54u;            // "TNSM"
inline constexpr uint32_t kDirectMagic = 0x44534e54u;             // "TNSD": the payload is the next message

struct NetHandoff {
  uint64_t magic;
  int32_t rank;       // the receiver that listens
  uint32_t channel;
  uint64_t slotBytes; // largest message the receiver posts
  uint32_t flags;     // kSplitPayloads
  uint32_t reserved;
  char plugin[64];    // the plugin's name, NUL-terminated
  unsigned char handle[128];
};
static_assert(sizeof(NetHandoff) == 224);
// NetHandoff::flags: every message goes as a header, then its payload (GPUDirect RDMA receives).
inline constexpr uint32_t kSplitPayloads = 1;

struct NetMessageHeader {
  uint32_t magic;
  uint32_t tag;
  uint64_t bytes;
};
static_assert(sizeof(NetMessageHeader) == 16);
}  // namespace wire

// Bootstrap connection tag of the handoff for `channel`.
uint32_t netTag(int channel);

struct NetParams {
  int rank = 0;
  int peer = 0;
  int channel = 0;
  int device = 0;       // the plugin device this rank uses
  uint32_t slots = 8;
  size_t slotBytes = 128 << 10;  // payload per slot
  int64_t timeoutMs = 60000;     // a connected peer's handoff, and the plugin's connect/accept
  AsyncFailure* failures = nullptr;  // sends: where a failure goes too (async_failure.h)
  const UserBuffers* userBuffers = nullptr;  // sends: registered buffers sent zero-copy (null: never)
  int ptrSupport = 1;   // the device's NCCL_PTR_* bits (NCCL_PTR_HOST)
  // The device FIFO proxy's connections (not the host executor's): a send takes no message
  // before the receiver's handoff said which format it wants.
  bool proxied = false;
  // Receives: the CUDA device whose memory payloads may land in (GPUDirect RDMA; -1: host only),
  // and whether each such payload is flushed (iflush) before it is delivered.
  int gdrRecvDevice = -1;
  bool gdrFlush = false;
  // Receives into GPU memory: where a failure that is no goodbye goes (a flush that failed, a
  // payload lost after its header came), so the device executor's health check sees it.
  AsyncFailure* gdrFailures = nullptr;
};

// What the pump drives.
class NetPumpClient {
 public:
  virtual ~NetPumpClient() = default;
  // Calls the plugin as far as it moves without blocking; true when something
  // completed (a message arrived or a send finished, a comm was made).
  virtual bool pump() = 0;
  // True while the connection has work the pump should drive.
  virtual bool wantsPump() const = 0;
  // True while a receive connection waits for its peer's connect.
  virtual bool settingUp() const { return false; }
  // Send connections: deregister what they registered of user buffer `id` (UserBuffers).
  virtual void forgetUserBuffer(uint64_t id) { (void)id; }
};

class NetPump {
 public:
  // `cpus`: where the thread runs (those of them this process may use); empty: anywhere.
  NetPump(WakeFn wake, void* wakeCtx, std::vector<int> cpus = {});
  ~NetPump();
  void add(NetPumpClient* c);
  void remove(NetPumpClient* c);
  // A client has new work (a commit, a waiting receive, a finished set-up step).
  void notify();

 private:
  void pin();
  void run();
  WakeFn wake_;
  void* wakeCtx_;
  std::vector<int> cpus_;
  std::mutex mu_;  // clients_, and a pass over them
  std::vector<NetPumpClient*> clients_;
  std::mutex kickMu_;
  std::condition_variable cv_;
  bool kicked_ = false;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// What both directions of a connection share: the plugin, the parameters, the
// registered slot ring and the sticky error (set under mu_, flagged for the pump).
class NetEndpoint {
 protected:
  NetEndpoint(const NetApi& api, const NetParams& p, RingMemory ring, ConnectionCounters* counters, NetPump* pump)
      : api_(api), p_(p), ring_(std::move(ring)), counters_(counters), pump_(pump) {}
  // A slot: the 16-byte header, then up to slotBytes of payload.
  size_t stride() const { return p_.slotBytes + sizeof(wire::NetMessageHeader); }
  size_t ringBytes() const { return static_cast<size_t>(p_.slots) * stride(); }
  char* slotAt(uint64_t n) { return ring_.get() + (n % p_.slots) * stride(); }
  // Under mu_: keeps the first error, WARNs it once.
  void fail(Status s);
  // "NCCL net plugin 'X': <call> to|from rank P channel C failed with R (name)".
  Status pluginError(const char* call, const char* direction, ncclResult_t r) const;
  // Under mu_, once the plugin made `comm`: registers the ring with it and marks the connection up.
  bool registerRing(void* comm, void** mhandle, const char* direction);

  // GPU memory this comm moves bytes from or into directly (GPUDirect RDMA; transport.h's regions).
  struct Region {
    char* base = nullptr;
    size_t bytes = 0;
    int cudaDev = -1;
    RegionState state = RegionState::kPending;
    void* mhandle = nullptr;
    const char* how = "";
    bool removed = false;  // receives: no new receive lands in it (deregistered when the comm closes)
    bool holds(const void* p, size_t n) const {
      return static_cast<const char*>(p) >= base && static_cast<const char*>(p) + n <= base + bytes;
    }
  };
  // Whether the network could register GPU memory of `cudaDev` (its pointer support and the driver's).
  bool gpuMemoryUsable(int cudaDev) const;
  // Under mu_, with the comm: registers `r` through a dma-buf where the device and the driver give
  // one, else by address; a refusal is final (the caller's bytes then go through host memory).
  void registerRegion(void* comm, Region& r, const char* direction);
  // Under mu_: adds a region (registered now when `comm` exists, else by registerRegion at set-up).
  void addRegionLocked(void* comm, void* base, size_t bytes, int cudaDev, const char* direction);
  // Takes mu_: the state of the region at `base` (kRefused: no such region).
  RegionState regionStateOf(const void* base);

  const NetApi& api_;
  NetParams p_;
  RingMemory ring_;
  ConnectionCounters* counters_;
  NetPump* pump_;
  std::mutex mu_;
  Status error_;
  std::atomic<bool> connected_{false};
  std::atomic<bool> failed_{false};
  std::vector<Region> regions_;  // under mu_
};

// Whether a network with these NCCL_PTR_* bits can register GPU memory of CUDA device `cudaDev`:
// by address (NCCL_PTR_CUDA), or through a dma-buf the plugin and the driver support.
bool netReachesGpu(const NetApi& api, int ptrSupport, int cudaDev);

// The slot ring of a connection with these parameters.
Result<RingMemory> allocNetRing(const NetParams& params);

struct NetSendHandle {
  std::unique_ptr<SendConnection> connection;
  NetPumpClient* client = nullptr;
};
struct NetRecvHandle {
  std::unique_ptr<RecvConnection> connection;
  NetPumpClient* client = nullptr;
};

// Returns at once (the handoff is claimed on a helper thread).
Result<NetSendHandle> makeNetSend(const NetApi& api, bootstrap::Bootstrap& boot, const NetParams& params,
                                  const AbortFlag* abort, ConnectionCounters* counters, NetPump* pump);
// Listens and sends the handoff now (connectTo does not wait for the peer).
Result<NetRecvHandle> makeNetRecv(const NetApi& api, bootstrap::Bootstrap& boot, const NetParams& params,
                                  const AbortFlag* abort, ConnectionCounters* counters, NetPump* pump);

}  // namespace theseus::transport::netplugin
