// FifoProxy: device FIFOs for peers on other hosts.
//
// The device executor moves data only through FIFOs it drives itself
// (exec/device/interpreter.h, the flag protocol of fifo_layout.h). Ranks of
// one host share them in memory (the shm backend's device FIFOs); a rank on
// another host is reached through a network, so each (peer, channel,
// direction) the device executor asks for gets a FIFO in this process's memory
// and a proxy thread bridges it to an ordinary connection of the transports —
// NCCL's proxy thread, for Theseus' FIFOs:
//
//   send:    the device commits message m into the FIFO (payload, SlotHeader,
//            head = m + 1, release); the proxy acquires head, copies the
//            payload into a slot of the SendConnection, commits it with the
//            header's size and tag, and releases the FIFO slot (tail = m + 1).
//   receive: the proxy peeks the RecvConnection's next message, waits for a
//            free FIFO slot (head - tail < slots, tail acquired), copies the
//            payload in, writes the SlotHeader, publishes head (release) and
//            releases the connection's message.
// So the network moves slices while the device works on others (overlap), and
// the FIFO's flag protocol is the same one the device uses with local peers.
//
// GPUDirect RDMA (sends). When the proxy is given the communicator's CUDA
// device and a send connection's network can register GPU memory
// (SendConnection::acceptsDeviceMemory: a dma-buf or nvidia-peermem), that
// FIFO's payload slots are allocated in GPU memory instead (its control block
// and slot headers stay in pinned host memory, which the proxy reads). The
// kernel writes a slice into HBM; the proxy sends it from there with the
// region's registration (commitDirect), so no byte crosses host memory, and
// releases the FIFO slot (tail) only once the network completed that send —
// in order, by the connection's tickets. Why the NIC reads what the kernel
// wrote: the kernel's payload stores precede its system-scope release of head
// (a __threadfence_system), the proxy acquires head before it posts the send,
// and the NIC's reads are issued after the post; that is the fence NVIDIA's
// library relies on for its GPUDirect sends too (no flush is needed for a
// read by the NIC, only for the NIC's writes into GPU memory). A region the
// network refuses once the connection is set up (the registration failed) is
// still served, slowly: each message is copied to the connection's host slot
// (cuMemcpyDtoHAsync on a stream of the proxy's own), with one WARN.
// NCCL_NET_GDR_READ=0 keeps every proxied send FIFO in host memory.
//
// GPUDirect RDMA (receives). A receive connection made for the proxy decides
// at creation whether payloads may land in GPU memory (RecvConnection::
// acceptsDeviceMemory; the sender learns it from the handoff and sends each
// message as a header, then its payload). Then the FIFO's payload slots are
// in GPU memory too, and the proxy offers them to the connection in order:
// message k lands in slot k % slots, offered once the kernel released message
// k - slots (tail acquired), so the NIC never writes a slot the kernel still
// reads. When tryPeek returns a message that landed in its slot (flushed by
// the network where the GPU needs it, net_connection.h), the proxy writes its
// SlotHeader and publishes head (release): no payload byte crossed host
// memory. A message that landed in the connection's host slot (the region
// refused) is copied in with cuMemcpyHtoDAsync on the proxy's stream.
// NCCL_NET_GDR_LEVEL covers both directions (LOC: never).
//
// The proxied connections use channels of their own (TransportManagerImpl:
// channel + the communicator's channel count), so the host executor's
// messages on the same peer and channel never interleave with them.
//
// The thread polls (the device raises no event): passes back to back while
// anything moves, then yields, then sleeps 20..200 us between passes. A send
// connection's failure is kept, every bridge stops, and failure() returns it
// (TransportManager::asyncFailure: the device executor's health check fails
// its plan with it). A receive connection that ends is only closed: its peer
// finished and left (a peer that dies is the bootstrap's to report), as the
// host's network connections treat it.
// Destruction forwards what the device committed (bounded), then stops.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/status.h"
#include "transport/async_failure.h"
#include "transport/fifo_layout.h"
#include "transport/socket/socket_io.h"
#include "transport/transport.h"

namespace theseus::transport {

class FifoProxy {
 public:
  using SendFor = std::function<Result<SendConnection*>(int peer, int channel)>;
  using RecvFor = std::function<Result<RecvConnection*>(int peer, int channel)>;
  // `slots` x `slotBytes`: the geometry of every proxied FIFO (the device FIFOs'). `gdrSendDevice`,
  // `gdrRecvDevice`: the CUDA device whose memory send (receive) FIFOs may keep their payload in
  // (GPUDirect RDMA), -1 for none.
  FifoProxy(SendFor sendFor, RecvFor recvFor, uint32_t slots, uint64_t slotBytes, int gdrSendDevice = -1,
            int gdrRecvDevice = -1);
  // Where the first failure goes as well (the communicator's asynchronous error: kernels waiting
  // for a proxied FIFO learn of it through the abort flag's mirror); set before the first fifo().
  void setFailureSink(AsyncFailure* sink) { sink_ = sink; }
  ~FifoProxy();
  FifoProxy(const FifoProxy&) = delete;
  FifoProxy& operator=(const FifoProxy&) = delete;

  // The FIFO for (peer, channel, direction), made (with its connection) on first use.
  Result<DeviceFifo> fifo(int peer, int channel, bool send);
  // The first failure of a proxied connection; ok while there is none.
  Status failure() const;

 private:
  struct Bridge;
  void run();
  bool pass();                        // one pass over the bridges; true when something moved
  bool forward(Bridge& b);            // send: FIFO -> connection
  bool retire(Bridge& b);             // send: releases FIFO slots whose sends completed, in order
  void placeInGpuMemory(Bridge& b, int dev);  // payload slots in GPU memory, when the network reaches them
  Status copyOnProxyStream(Bridge& b, void* dst, const void* src, size_t bytes);  // a refused region's copy
  bool deliver(Bridge& b);            // receive: connection -> FIFO
  void fail(Status s);

  SendFor sendFor_;
  RecvFor recvFor_;
  uint32_t slots_;
  uint64_t slotBytes_;
  int gdrSendDevice_;
  int gdrRecvDevice_;
  mutable std::mutex mu_;             // bridges_ (the thread holds it for a pass)
  std::vector<std::unique_ptr<Bridge>> bridges_;
  AsyncFailure* sink_ = nullptr;
  mutable std::mutex failMu_;         // failure_
  Status failure_;
  std::atomic<bool> failed_{false};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace theseus::transport
