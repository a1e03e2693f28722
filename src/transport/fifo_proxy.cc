// FifoProxy (fifo_proxy.h): device FIFOs of peers on other hosts, bridged to connections.
#include "transport/fifo_proxy.h"

#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <cstring>

#include "common/deadline.h"
#include "common/log.h"
#include "device/cuda_driver.h"
#include "device/host_registry.h"

namespace theseus::transport {

using shm::FifoControl;
using shm::SlotHeader;

struct FifoProxy::Bridge {
  int peer = 0;
  int channel = 0;
  bool send = false;
  SendConnection* out = nullptr;
  RecvConnection* in = nullptr;
  RingMemory memory;  // [FifoControl][SlotHeader x slots][data: slots x slotBytes, page aligned]
  FifoControl* ctl = nullptr;
  SlotHeader* headers = nullptr;
  char* data = nullptr;
  size_t bytes = 0;
  uint64_t next = 0;  // send: the next message to forward; receive: the next to deliver
  bool closed = false;  // receive: the peer closed the connection
  // Send: each FIFO slot's message's ticket on the connection (0: copied, so free at once), and the
  // FIFO's tail: slots are released in order once their sends completed.
  std::vector<uint64_t> tickets;
  uint64_t released = 0;
  // Receive, GPUDirect RDMA: the connection lands payloads where it is offered (offers), and
  // every message up to `offered` was offered its FIFO slot.
  bool offers = false;
  uint64_t offered = 0;
  // GPUDirect RDMA: the payload slots' allocation in GPU memory, else null (they follow the
  // control block in `memory`).
  void* gpuAlloc = nullptr;
  char* gpuData = nullptr;  // page-aligned inside it: the connection's region
  size_t gpuBytes = 0;
  int gpuDevice = -1;
  bool copyWarned = false;
  cudaStream_t copyStream = nullptr;  // a refused region's copies: a stream of the proxy's own
  ~Bridge() {
    device::releaseHostRange(memory.get(), bytes);  // the device executor registers the ring
    if (gpuAlloc == nullptr) return;
    if (send) out->removeRegion(gpuData);  // after the sends still reading it
    else in->removeRegion(gpuData);
    const device::CudaDriver* cuda = device::CudaDriver::get();
    Status s = cuda == nullptr ? Status::ok() : cuda->withDevice(gpuDevice, [&] {
      if (copyStream != nullptr) (void)cuda->destroyStream(copyStream);
      return cuda->free(gpuAlloc);
    });
    if (!s.isOk()) TH_WARN("device FIFO proxy: freeing GPU slots for rank %d: %s", peer, s.message().c_str());
  }
};

namespace {

size_t dataOffset(uint32_t slots) {
  const size_t control = sizeof(FifoControl) + slots * sizeof(SlotHeader);
  return (control + 4095) & ~size_t{4095};
}

}  // namespace

FifoProxy::FifoProxy(SendFor sendFor, RecvFor recvFor, uint32_t slots, uint64_t slotBytes, int gdrSendDevice,
                     int gdrRecvDevice)
    : sendFor_(std::move(sendFor)),
      recvFor_(std::move(recvFor)),
      slots_(slots),
      slotBytes_(slotBytes),
      gdrSendDevice_(gdrSendDevice),
      gdrRecvDevice_(gdrRecvDevice) {
  thread_ = std::thread([this] { run(); });
}

FifoProxy::~FifoProxy() {
  // What the device committed goes out first: a collective is complete on this rank once its
  // messages are in the FIFO, and its peers wait for them.
  constexpr int64_t kFlushMs = 10000;
  Deadline deadline = Deadline::afterMs(kFlushMs);
  for (;;) {
    bool pending = false;
    {
      std::lock_guard lock(mu_);
      for (const auto& b : bridges_)
        pending |= b->send && (b->next < b->ctl->head.load(std::memory_order_acquire) || b->released < b->next);
    }
    if (!pending || failed_.load() || deadline.expired()) break;
    struct timespec ts = {0, 100000};
    nanosleep(&ts, nullptr);
  }
  stop_.store(true);
  thread_.join();
}

Result<DeviceFifo> FifoProxy::fifo(int peer, int channel, bool send) {
  {
    std::lock_guard lock(mu_);
    for (const auto& b : bridges_) {
      if (b->peer != peer || b->channel != channel || b->send != send) continue;
      DeviceFifo f;
      f.control = b->ctl;
      f.headers = b->headers;
      f.data = b->data;
      f.memory = b->gpuAlloc != nullptr ? device::MemoryKind::kDevice : device::MemoryKind::kHost;
      f.slots = slots_;
      f.slotBytes = slotBytes_;
      f.segmentBase = b->memory.get();
      f.segmentBytes = b->bytes;
      return f;
    }
  }
  auto b = std::make_unique<Bridge>();
  b->peer = peer;
  b->channel = channel;
  b->send = send;
  if (send) {
    TH_ASSIGN(b->out, sendFor_(peer, channel));
    if (b->out->slotBytes() < slotBytes_)
      return invalidUsage("the connection to rank %d has %zu-byte slots, smaller than the %llu-byte device FIFO slots",
                          peer, b->out->slotBytes(), static_cast<unsigned long long>(slotBytes_));
  } else {
    TH_ASSIGN(b->in, recvFor_(peer, channel));
  }
  const size_t payload = static_cast<size_t>(slots_) * slotBytes_;
  if (send) {
    b->tickets.assign(slots_, 0);
    if (gdrSendDevice_ >= 0) placeInGpuMemory(*b, gdrSendDevice_);
  } else if (gdrRecvDevice_ >= 0 && b->in->acceptsDeviceMemory(gdrRecvDevice_)) {
    b->offers = true;  // even if the slots stay in host memory: the connection waits for offers
    placeInGpuMemory(*b, gdrRecvDevice_);
  }
  b->bytes = dataOffset(slots_) + (b->gpuAlloc != nullptr ? 0 : payload);
  TH_ASSIGN(b->memory, allocRing(b->bytes));
  b->ctl = new (b->memory.get()) FifoControl();
  b->ctl->head.store(0, std::memory_order_relaxed);
  b->ctl->tail.store(0, std::memory_order_relaxed);
  b->headers = reinterpret_cast<SlotHeader*>(b->memory.get() + sizeof(FifoControl));
  b->data = b->gpuAlloc != nullptr ? b->gpuData : b->memory.get() + dataOffset(slots_);
  bool fifoInGpu = false;
  {
    std::lock_guard lock(mu_);
    bool made = false;  // by another thread meanwhile: two bridges must never share a connection
    for (const auto& o : bridges_) made |= o->peer == peer && o->channel == channel && o->send == send;
    if (made) return fifo(peer, channel, send);
    fifoInGpu = b->gpuAlloc != nullptr;
    bridges_.push_back(std::move(b));
  }
  const int gdrDevice = send ? gdrSendDevice_ : gdrRecvDevice_;
  TH_INFO(log::kNet, "device FIFO %s rank %d channel %d through a proxy (%u x %llu bytes%s)", send ? "to" : "from",
          peer, channel, slots_, static_cast<unsigned long long>(slotBytes_),
          gdrDevice >= 0 ? (fifoInGpu ? ", in GPU memory: GPUDirect RDMA" : ", in host memory") : "");
  return fifo(peer, channel, send);
}

Status FifoProxy::failure() const {
  if (!failed_.load(std::memory_order_acquire)) return Status::ok();
  std::lock_guard lock(failMu_);
  return failure_;
}

void FifoProxy::fail(Status s) {
  {
    std::lock_guard lock(failMu_);
    if (!failure_.isOk()) return;
    TH_WARN("device FIFO proxy: %s", s.message().c_str());
    failure_ = s;
    failed_.store(true, std::memory_order_release);
  }
  if (sink_ != nullptr) sink_->report(s);
}

// Payload slots in GPU memory for a FIFO whose network reads or writes GPU memory (the
// connection's region, registered once it is set up). Anything missing leaves the slots in host
// memory.
void FifoProxy::placeInGpuMemory(Bridge& b, int dev) {
  const device::CudaDriver* cuda = device::CudaDriver::get();
  if (cuda == nullptr || !(b.send ? b.out->acceptsDeviceMemory(dev) : b.in->acceptsDeviceMemory(dev))) return;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t bytes = (static_cast<size_t>(slots_) * slotBytes_ + page - 1) / page * page;
  Result<void*> p = cuda->allocOn(dev, bytes + page);  // a dma-buf range is whole pages
  if (!p.isOk()) {
    TH_WARN("device FIFO %s rank %d: no GPU memory for its slots (%s); they stay in host memory",
            b.send ? "to" : "from", b.peer, p.status().message().c_str());
    return;
  }
  b.gpuAlloc = p.value();
  b.gpuData = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(p.value()) + page - 1) / page * page);
  b.gpuBytes = bytes;
  b.gpuDevice = dev;
  if (b.send) b.out->addRegion(b.gpuData, b.gpuBytes, dev);
  else b.in->addRegion(b.gpuData, b.gpuBytes, dev);
}

// A copy between a GPU-memory FIFO slot and host memory, on a stream of the proxy's own: one on
// the legacy stream would wait for the kernel, which waits for this message.
Status FifoProxy::copyOnProxyStream(Bridge& b, void* dst, const void* src, size_t bytes) {
  if (!b.copyWarned) {
    b.copyWarned = true;
    TH_WARN("device FIFO %s rank %d channel %d: the network refused its GPU memory; each message is copied "
            "through host memory (%s keeps such FIFOs in host memory)", b.send ? "to" : "from", b.peer, b.channel,
            b.send ? "NCCL_NET_GDR_READ=0" : "NCCL_NET_GDR_LEVEL=LOC");
  }
  const device::CudaDriver* cuda = device::CudaDriver::get();
  return cuda->withDevice(b.gpuDevice, [&]() -> Status {
    if (b.copyStream == nullptr) {
      TH_ASSIGN(b.copyStream, cuda->createStream());
    }
    TH_CHECK(b.send ? cuda->copyToHostOn(dst, src, bytes, b.copyStream)
                    : cuda->copyToDeviceOn(dst, src, bytes, b.copyStream));
    return cuda->synchronize(b.copyStream);
  });
}

bool FifoProxy::forward(Bridge& b) {
  bool moved = retire(b);
  const uint64_t head = b.ctl->head.load(std::memory_order_acquire);
  while (b.next < head) {
    const uint32_t i = static_cast<uint32_t>(b.next % slots_);
    const SlotHeader& h = b.headers[i];
    if (h.kind != shm::kSlotInline || h.bytes > slotBytes_) {
      fail(internalError("device FIFO to rank %d: message %llu is not an inline message of at most %llu bytes",
                         b.peer, static_cast<unsigned long long>(b.next), static_cast<unsigned long long>(slotBytes_)));
      return false;
    }
    const char* src = b.data + static_cast<size_t>(i) * slotBytes_;
    SendSlot slot;
    if (b.gpuAlloc == nullptr) {  // host slots: copied into the connection's slot, released at once
      if (!b.out->tryAcquire(&slot)) break;
      std::memcpy(slot.data, src, h.bytes);
      b.out->commitInline(h.bytes, h.tag);
      b.tickets[i] = 0;
    } else {
      const SendConnection::RegionState state = b.out->regionState(b.gpuData);
      if (state == SendConnection::RegionState::kPending) break;  // the connection is not set up yet
      if (!b.out->tryAcquire(&slot)) break;
      if (state == SendConnection::RegionState::kDirect) {
        if (!b.out->canSendDirect(src, h.bytes)) break;  // no room for its two ring entries yet
        b.tickets[i] = b.out->commitDirect(src, h.bytes, h.tag);
      } else {
        if (Status s = copyOnProxyStream(b, slot.data, src, h.bytes); !s.isOk()) {
          fail(s.withContext("device FIFO to rank " + std::to_string(b.peer)));
          return false;
        }
        b.out->commitInline(h.bytes, h.tag);
        b.tickets[i] = 0;
      }
    }
    ++b.next;
    moved = true;
  }
  moved |= retire(b);
  Status s = b.out->progress();
  if (!s.isOk()) fail(s.withContext("device FIFO to rank " + std::to_string(b.peer)));
  return moved;
}

bool FifoProxy::retire(Bridge& b) {
  const uint64_t from = b.released;
  while (b.released < b.next) {
    const uint64_t ticket = b.tickets[b.released % slots_];
    if (ticket != 0 && !b.out->consumed(ticket)) break;
    ++b.released;
  }
  if (b.released == from) return false;
  b.ctl->tail.store(b.released, std::memory_order_release);
  return true;
}

bool FifoProxy::deliver(Bridge& b) {
  bool moved = false;
  // GPUDirect RDMA: each FIFO slot the kernel released is offered, in order, as the landing place
  // of the payload that will occupy it (message k takes slot k % slots), so the network writes there.
  if (b.offers) {
    const uint64_t tail = b.ctl->tail.load(std::memory_order_acquire);
    while (b.offered < tail + slots_ &&
           b.in->offer(b.data + static_cast<size_t>(b.offered % slots_) * slotBytes_, slotBytes_))
      ++b.offered;
  }
  for (;;) {
    if (b.next - b.ctl->tail.load(std::memory_order_acquire) >= slots_) break;  // the FIFO is full
    RecvMessage m;
    if (!b.in->tryPeek(&m)) break;
    if (m.bytes > slotBytes_) {
      fail(internalError("device FIFO from rank %d: a %zu-byte message for %llu-byte slots", b.peer, m.bytes,
                         static_cast<unsigned long long>(slotBytes_)));
      return false;
    }
    const uint32_t i = static_cast<uint32_t>(b.next % slots_);
    char* dst = b.data + static_cast<size_t>(i) * slotBytes_;
    if (m.data == dst) {
      // Landed in place (GPUDirect RDMA, flushed where needed): nothing to copy.
    } else if (b.gpuAlloc != nullptr) {
      if (Status s = copyOnProxyStream(b, dst, m.data, m.bytes); !s.isOk()) {
        fail(s.withContext("device FIFO from rank " + std::to_string(b.peer)));
        return false;
      }
    } else {
      std::memcpy(dst, m.data, m.bytes);
    }
    SlotHeader& h = b.headers[i];
    std::memset(&h, 0, sizeof(h));
    h.bytes = m.bytes;
    h.tag = m.tag;
    h.kind = shm::kSlotInline;
    b.ctl->head.store(++b.next, std::memory_order_release);
    b.in->release();
    moved = true;
  }
  // As for the host's network connections, only send-side failures are failures: a receive
  // connection whose peer finished and closed it is an orderly goodbye, and a peer that died is
  // the bootstrap's to report (the device's wait ends with its health check).
  if (Status s = b.in->progress(); !s.isOk()) {
    TH_INFO(log::kNet, "device FIFO from rank %d channel %d: %s; no more messages come through it", b.peer,
            b.channel, s.message().c_str());
    b.closed = true;
  }
  return moved;
}

bool FifoProxy::pass() {
  std::lock_guard lock(mu_);
  bool moved = false;
  for (const auto& b : bridges_) {
    if (failed_.load(std::memory_order_relaxed)) break;
    if (!b->closed) moved |= b->send ? forward(*b) : deliver(*b);
  }
  return moved;
}

void FifoProxy::run() {
  int idle = 0;
  while (!stop_.load(std::memory_order_acquire)) {
    if (!failed_.load(std::memory_order_acquire) && pass()) {
      idle = 0;
      continue;
    }
    if (idle < 1000000) ++idle;
    if (idle < 64) {
      sched_yield();
      continue;
    }
    // Idle: sleep a little longer each time, up to 200 us (the device raises no event).
    struct timespec ts = {0, std::min<long>(200000, 20000L * (idle / 64))};
    nanosleep(&ts, nullptr);
  }
}

}  // namespace theseus::transport
