// Transport interfaces: how the executor moves bytes to and from one peer.
//
// A connection is one direction of an in-order message stream between two
// ranks on one channel. The executor is a single-threaded progress engine, so
// every call here is non-blocking: "try" calls return false when the peer is
// not ready and the executor moves on to other work, calling progress() and,
// when nothing anywhere can move, TransportManager::waitForActivity().
//
// Messages come in two kinds:
//  * inline  — the sender writes up to slotBytes() into a FIFO slot it
//              acquired (the executor copies or reduces straight into the slot,
//              so a fused reduce-send costs no extra pass);
//  * direct  — the sender publishes only where its data lives, and the receiver
//              reads it in place (zero-copy; only for memory the peer can map,
//              see SharedMemoryRegistry). The sender must not modify that memory
//              until consumed(ticket) says the receiver released the message.
// Each message carries a 32-bit tag chosen by the executor (collective sequence
// and step); a receiver that sees an unexpected tag or size reports a
// mismatched collective instead of corrupting data.
//
// Slots live in memory of one kind per connection (memory(): host for shm
// and sockets, device for CUDA IPC FIFOs); an executor only uses connections
// whose slots its primitives can access. Direct messages point into the
// sender's buffer, which is of a kind the sender's executor serves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "device/memory_kind.h"

namespace theseus::transport {

enum class Kind : uint8_t { kShm, kSocket, kCudaIpc, kIb, kNetPlugin };
const char* kindName(Kind k);

// A region of GPU memory a network connection moves bytes from or into directly (GPUDirect
// RDMA; the device FIFO proxy's slots, fifo_proxy.h): kPending until the connection registered
// it with the network, then kDirect, or kRefused (the network would not take it: the bytes go
// through host memory instead).
enum class RegionState { kPending, kDirect, kRefused };

struct SendSlot {
  void* data = nullptr;      // where to write the inline payload (memory of the connection's memory() kind)
  size_t capacity = 0;       // == slotBytes()
};

class SendConnection {
 public:
  virtual ~SendConnection() = default;
  virtual Kind kind() const = 0;
  virtual int peer() const = 0;
  // Where the slots live.
  virtual device::MemoryKind memory() const { return device::MemoryKind::kHost; }
  // Largest inline payload; the executor never makes a slice larger than this.
  virtual size_t slotBytes() const = 0;
  // A free FIFO slot, or false when the FIFO is full. At most one acquired,
  // uncommitted slot per connection at a time.
  virtual bool tryAcquire(SendSlot* slot) = 0;
  // Publishes the acquired slot with `bytes` of payload. Returns its ticket (1, 2, 3, ...).
  virtual uint64_t commitInline(size_t bytes, uint32_t tag) = 0;
  // True when the peer can read [src, src + bytes) in place.
  virtual bool canSendDirect(const void* src, size_t bytes) const = 0;
  // Publishes a direct message in the acquired slot instead of inline bytes.
  virtual uint64_t commitDirect(const void* src, size_t bytes, uint32_t tag) = 0;
  // True once the peer released the message with this ticket (and all before it).
  virtual bool consumed(uint64_t ticket) const = 0;
  // Send regions: memory the caller sends from again and again (the device FIFO proxy's slots,
  // fifo_proxy.h), registered with the network once, after which canSendDirect/commitDirect take
  // pieces of it. Only the net-plugin connections have them (GPUDirect RDMA from GPU memory).
  using RegionState = transport::RegionState;
  // Whether the network could send from GPU memory of CUDA device `cudaDev` at all (its pointer
  // support and the driver's), before anything is registered.
  virtual bool acceptsDeviceMemory(int /*cudaDev*/) const { return false; }
  // Adds a region of CUDA device `cudaDev`'s memory; registered once the connection is set up.
  virtual void addRegion(void* /*base*/, size_t /*bytes*/, int /*cudaDev*/) {}
  // kPending until the connection registered the region; then kDirect, or kRefused (the network
  // would not take it: its pieces must be copied to host memory first).
  virtual RegionState regionState(const void* /*base*/) const { return RegionState::kRefused; }
  // Waits (bounded) for the sends still reading the region, then drops its registration; before
  // the caller frees it.
  virtual void removeRegion(void* /*base*/) {}
  // Moves queued bytes (sockets); returns an error when the peer is gone.
  virtual Status progress() = 0;
};

struct RecvMessage {
  const void* data = nullptr;  // payload, readable until release()
  size_t bytes = 0;
  uint32_t tag = 0;
  bool direct = false;         // data points into the sender's memory
};

class RecvConnection {
 public:
  virtual ~RecvConnection() = default;
  virtual Kind kind() const = 0;
  virtual int peer() const = 0;
  // Where the slots (inline payloads) live.
  virtual device::MemoryKind memory() const { return device::MemoryKind::kHost; }
  // The next message in order, or false when none has arrived yet. Calling it
  // again before release() returns the same message.
  virtual bool tryPeek(RecvMessage* msg) = 0;
  // Done with the message returned by tryPeek; the slot goes back to the sender.
  virtual void release() = 0;
  virtual Status progress() = 0;
  // Receive regions (GPUDirect RDMA into GPU memory; only net-plugin connections made for the
  // device FIFO proxy, which decide at creation, because the sender must know before its first
  // message): the caller names, message by message and in order, where each payload should land
  // (offer); the connection receives it there when the address lies in a region the network
  // registered, else in its own host slot. tryPeek's message then points at the offered address or
  // at the host slot, and the caller copies only in the second case.
  using RegionState = transport::RegionState;
  // Whether payloads may land in GPU memory of CUDA device `cudaDev` (decided when the connection
  // was made); only then does the connection wait for offers.
  virtual bool acceptsDeviceMemory(int /*cudaDev*/) const { return false; }
  virtual void addRegion(void* /*base*/, size_t /*bytes*/, int /*cudaDev*/) {}
  virtual RegionState regionState(const void* /*base*/) const { return RegionState::kRefused; }
  // Waits (bounded) for the receives still writing into the region, then drops its registration.
  virtual void removeRegion(void* /*base*/) {}
  // Where the payload (at most `capacity` bytes) of the next message not yet offered for may land.
  // False when the connection holds as many offers as it takes now, or takes none.
  virtual bool offer(void* /*dst*/, size_t /*capacity*/) { return false; }
};

// A FIFO that an executor drives itself (the device executor's flag protocol,
// exec/device/interpreter.h) instead of through connection objects: the
// shared-memory transport's layout (shm/shm_layout.h) in memory both ranks map.
struct DeviceFifo {
  void* control = nullptr;   // shm::FifoControl: head, tail
  void* headers = nullptr;   // shm::SlotHeader[slots]
  char* data = nullptr;      // slots * slotBytes
  uint32_t slots = 0;
  uint64_t slotBytes = 0;
  device::MemoryKind memory = device::MemoryKind::kHost;
  // The mapping that holds the FIFO (an executor may need to register it with a device): from its
  // base, as much as the device must reach (the control area only when the slots are in GPU memory).
  void* segmentBase = nullptr;
  size_t segmentBytes = 0;
  // Zero-copy reads of registered device buffers with this peer (shm/device_exports.h), else null:
  // a send FIFO's acks (uint64_t[kMaxEntries]: the generation of each of this rank's exports the
  // peer mapped), a receive FIFO's imports (where this rank mapped the peer's exports), and the
  // mapping that holds them (registered like the segment).
  uint64_t* directAcks = nullptr;
  const void* directImports = nullptr;  // DeviceImport[kMaxDeviceExports]
  void* directTablesBase = nullptr;
  size_t directTablesBytes = 0;
};

// Zero-copy reads of registered device buffers (shm/device_exports.h): where
// a peer's exported allocation is mapped here (exec/device/dev_plan.h mirrors
// it), and the export holding a range, as the sender's lowering needs it.
struct DeviceImport {
  char* base = nullptr;  // null: not mapped
  uint64_t bytes = 0;
};
inline constexpr uint32_t kMaxDeviceExports = 64;  // allocations a rank exports per communicator
struct DeviceExportRef {
  int32_t entry = -1;  // -1: the range is in no exported allocation
  uint64_t generation = 0;
  const char* base = nullptr;  // the allocation's base here (direct messages carry offsets from it)
};

// Per-peer counters the transports maintain; attributes and policies read them.
struct PeerStats {
  uint64_t bytesSent = 0;
  uint64_t bytesReceived = 0;
  uint64_t messagesSent = 0;
  uint64_t messagesReceived = 0;
  uint64_t sendBusyNs = 0;     // time the sender had data queued for this peer
  uint64_t recvWaitNs = 0;     // time the executor waited on this peer's data
  // The network path's own view where the kernel keeps one (TCP: TCP_INFO), 0
  // elsewhere: the time the path had this rank's data in flight without being
  // held back by the peer's receive window. A TCP sender's queue above
  // (sendBusyNs) empties into the kernel's socket buffer long before the bytes
  // cross a slow link, so only this measures the link itself (attrs/probes.h
  // takes the longer of the two).
  uint64_t linkBusyNs = 0;
  double sendGBps() const { return sendBusyNs ? double(bytesSent) / double(sendBusyNs) : 0.0; }
};

}  // namespace theseus::transport
