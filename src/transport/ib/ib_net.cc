#include "transport/ib/ib_net.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>

#include "bootstrap/socket.h"
#include "common/log.h"
#include "transport/ib/ib_comm.h"
#include "transport/ib/ib_settings.h"

namespace theseus::transport::ib {
namespace {

thread_local std::string lastError;

// An error of a set-up step, logged once, as the net API's result.
ncclResult_t report(const Status& s) {
  TH_WARN("%s", s.message().c_str());
  lastError = s.message();
  return s.code();
}

IbDevice* deviceAt(int dev) {
  const auto& all = IbDevices::get().devices();
  return dev >= 0 && dev < static_cast<int>(all.size()) ? all[static_cast<size_t>(dev)] : nullptr;
}

// Moves as much of [buf+*done, buf+bytes) as the non-blocking socket takes now.
// kProgress: complete; kWouldBlock: call again; an error Status otherwise.
enum class Io { kDone, kAgain };
Result<Io> moveSome(int fd, void* buf, size_t bytes, size_t* done, bool sending, const char* what) {
  while (*done < bytes) {
    ssize_t n = sending ? ::send(fd, static_cast<char*>(buf) + *done, bytes - *done, MSG_NOSIGNAL | MSG_DONTWAIT)
                        : ::recv(fd, static_cast<char*>(buf) + *done, bytes - *done, MSG_DONTWAIT);
    if (n > 0) {
      *done += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return remoteError("IB: the peer closed the connection while %s", what);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Io::kAgain;
    return errnoStatus(errno, "IB: %s", what);
  }
  return Io::kDone;
}

std::string peerOf(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  return bootstrap::SockAddr::fromSockaddr(reinterpret_cast<sockaddr*>(&ss), len).toString();
}

struct ListenComm {
  int fd = -1;
  IbDevice* dev = nullptr;
  // The connection being accepted (one at a time).
  int conn = -1;
  int stage = 0;
  wire::ConnInfo theirs{};
  wire::ConnInfo mine{};
  size_t done = 0;
  std::unique_ptr<IbComm> comm;
  ~ListenComm() {
    if (conn >= 0) ::close(conn);
    if (fd >= 0) ::close(fd);
  }
};

// The sender's set-up, kept in the handle between connect() calls.
struct Connecting {
  int fd = -1;
  int stage = 0;
  wire::ConnInfo mine{};
  wire::ConnInfo theirs{};
  size_t done = 0;
  std::unique_ptr<IbComm> comm;
  ~Connecting() {
    if (fd >= 0) ::close(fd);
  }
};

// The set-ups in progress: a handle's pointer is followed only if it is one of them (a handle
// is bytes from another process, and garbage must not be dereferenced).
std::mutex connectingMu;
std::set<Connecting*> connectingLive;

Connecting* liveConnecting(void* p) {
  std::lock_guard lock(connectingMu);
  auto it = connectingLive.find(static_cast<Connecting*>(p));
  return it != connectingLive.end() ? *it : nullptr;
}

void forgetConnecting(Connecting* c) {
  std::lock_guard lock(connectingMu);
  connectingLive.erase(c);
  delete c;
}

ncclResult_t ibInit(void** ctx, uint64_t, ncclNetCommConfig_v11_t*, ncclDebugLogger_t, ncclProfilerCallback_t) {
  if (ctx != nullptr) *ctx = nullptr;
  const IbDevices& d = IbDevices::get();
  if (d.devices().empty()) {
    TH_INFO(log::kInit | log::kNet, "IB: not used: %s", d.why().c_str());
    return ncclSystemError;
  }
  return ncclSuccess;
}

ncclResult_t ibDevices(int* n) {
  *n = static_cast<int>(IbDevices::get().devices().size());
  return ncclSuccess;
}

ncclResult_t ibGetProperties(int dev, ncclNetProperties_v12_t* props) {
  IbDevice* d = deviceAt(dev);
  if (d == nullptr) return ncclInvalidArgument;
  memset(props, 0, sizeof(*props));
  props->name = const_cast<char*>(d->name.c_str());
  props->pciPath = d->pciPath.empty() ? nullptr : const_cast<char*>(d->pciPath.c_str());
  props->guid = d->guid;
  // GPUDirect RDMA: dma-buf registrations where the provider takes them, GPU addresses where
  // nvidia-peermem lets ibv_reg_mr take them. Only sends read GPU memory (the device FIFO proxy's);
  // receives land in host memory.
  props->ptrSupport = NCCL_PTR_HOST | (d->dmaBuf ? NCCL_PTR_DMABUF : 0) | (d->peerMemory ? NCCL_PTR_CUDA : 0);
  props->speed = d->speedMbps;
  props->port = d->port;
  props->latency = 0;
  props->maxComms = 65536;
  props->maxRecvs = 1;
  props->netDeviceType = NCCL_NET_DEVICE_HOST;
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = dev;
  props->maxP2pBytes = props->maxCollBytes = size_t{1} << 31;
  props->maxMultiRequestSize = 1;
  props->railId = -1;
  props->planeId = -1;
  return ncclSuccess;
}

ncclResult_t ibListen(void*, int dev, void* opaque, void** listenComm) {
  *listenComm = nullptr;
  IbDevice* d = deviceAt(dev);
  if (d == nullptr) return ncclInvalidArgument;
  auto iface = bootstrap::bootstrapInterface();
  if (!iface.isOk()) return report(iface.status().withContext("IB: listen"));
  bootstrap::SockAddr addr = iface.value().addr;
  addr.setPort(0);
  bootstrap::SockAddr bound;
  auto fd = bootstrap::listenOn(addr, &bound);
  if (!fd.isOk()) return report(fd.status().withContext("IB: listen"));
  auto* l = new ListenComm();
  l->fd = fd.value();
  l->dev = d;
  auto* h = static_cast<wire::Handle*>(opaque);
  memset(h, 0, sizeof(*h));
  h->magic = wire::kHandleMagic;
  h->addrLen = static_cast<uint32_t>(bound.length());
  memcpy(h->addr, bound.get(), bound.length());
  *listenComm = l;
  return ncclSuccess;
}

// Sender: see ib_comm.h for the steps.
ncclResult_t ibConnect(void*, int dev, void* opaque, void** sendComm, ncclNetDeviceHandle_v11_t** devComm) {
  *sendComm = nullptr;
  if (devComm != nullptr) *devComm = nullptr;
  auto* h = static_cast<wire::Handle*>(opaque);
  IbDevice* d = deviceAt(dev);
  if (d == nullptr) return ncclInvalidArgument;
  if (h->magic != wire::kHandleMagic || h->addrLen == 0 || h->addrLen > sizeof(h->addr))
    return report(remoteError("IB: connect: the handle is not an IB listen handle"));
  Connecting* c = h->connecting != nullptr ? liveConnecting(h->connecting) : nullptr;
  if (c == nullptr) {
    c = new Connecting();
    {
      std::lock_guard lock(connectingMu);
      connectingLive.insert(c);
    }
    h->connecting = c;
  }
  auto failed = [&](const Status& s) {
    forgetConnecting(c);
    h->connecting = nullptr;
    return report(s);
  };
  const auto* to = reinterpret_cast<const sockaddr*>(h->addr);
  for (;;) {
    switch (c->stage) {
      case 0: {  // a non-blocking TCP connect to the receiver's listener
        c->fd = ::socket(to->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (c->fd < 0) return failed(errnoStatus(errno, "IB: connect: socket"));
        if (::connect(c->fd, to, h->addrLen) != 0 && errno != EINPROGRESS)
          return failed(errnoStatus(errno, "IB: connect to %s",
                                    bootstrap::SockAddr::fromSockaddr(to, h->addrLen).toString().c_str()));
        c->stage = 1;
        break;
      }
      case 1: {  // connected: make the QPs and the FIFO
        pollfd p{c->fd, POLLOUT, 0};
        if (::poll(&p, 1, 0) == 0) return ncclSuccess;
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0)
          return failed(errnoStatus(err, "IB: connect to %s",
                                    bootstrap::SockAddr::fromSockaddr(to, h->addrLen).toString().c_str()));
        c->comm = std::make_unique<IbComm>(IbDevices::get().verbs(), d, IbComm::kSender);
        c->comm->setPeer(peerOf(c->fd));
        if (Status s = c->comm->createQps(IbSettings::get().qpsPerConnection); !s.isOk()) return failed(s);
        c->mine = c->comm->localInfo();
        c->done = 0;
        c->stage = 2;
        break;
      }
      case 2: {
        auto r = moveSome(c->fd, &c->mine, sizeof(c->mine), &c->done, true, "sending the QP information");
        if (!r.isOk()) return failed(r.status());
        if (r.value() == Io::kAgain) return ncclSuccess;
        c->done = 0;
        c->stage = 3;
        break;
      }
      case 3: {
        auto r = moveSome(c->fd, &c->theirs, sizeof(c->theirs), &c->done, false, "receiving the peer's QP information");
        if (!r.isOk()) return failed(r.status());
        if (r.value() == Io::kAgain) return ncclSuccess;
        if (Status s = c->comm->connectQps(c->theirs); !s.isOk()) return failed(s);
        c->done = 0;
        c->stage = 4;
        break;
      }
      default: {
        uint8_t ready = wire::kReadyByte;
        auto r = moveSome(c->fd, &ready, 1, &c->done, true, "sending the ready byte");
        if (!r.isOk()) return failed(r.status());
        if (r.value() == Io::kAgain) return ncclSuccess;
        c->comm->adoptSocket(c->fd);  // kept for the failover
        c->fd = -1;
        *sendComm = c->comm.release();
        forgetConnecting(c);
        h->connecting = nullptr;
        return ncclSuccess;
      }
    }
  }
}

// Receiver: see ib_comm.h for the steps.
ncclResult_t ibAccept(void* listenComm, void** recvComm, ncclNetDeviceHandle_v11_t** devComm) {
  *recvComm = nullptr;
  if (devComm != nullptr) *devComm = nullptr;
  auto* l = static_cast<ListenComm*>(listenComm);
  auto failed = [&](const Status& s) {
    if (l->conn >= 0) ::close(l->conn);
    l->conn = -1;
    l->stage = 0;
    l->comm.reset();
    return report(s);
  };
  for (;;) {
    switch (l->stage) {
      case 0: {
        l->conn = bootstrap::acceptNonBlocking(l->fd);
        if (l->conn < 0) return ncclSuccess;
        l->done = 0;
        l->stage = 1;
        break;
      }
      case 1: {
        auto r = moveSome(l->conn, &l->theirs, sizeof(l->theirs), &l->done, false, "receiving the peer's QP information");
        if (!r.isOk()) return failed(r.status());
        if (r.value() == Io::kAgain) return ncclSuccess;
        l->comm = std::make_unique<IbComm>(IbDevices::get().verbs(), l->dev, IbComm::kReceiver);
        l->comm->setPeer(peerOf(l->conn));
        int nqps = static_cast<int>(l->theirs.nqps);
        if (nqps < 1 || nqps > kMaxQps) return failed(remoteError("IB: accept: the peer asked for %d QPs", nqps));
        if (Status s = l->comm->createQps(nqps); !s.isOk()) return failed(s);
        if (Status s = l->comm->connectQps(l->theirs); !s.isOk()) return failed(s);
        l->mine = l->comm->localInfo();
        l->done = 0;
        l->stage = 2;
        break;
      }
      case 2: {
        auto r = moveSome(l->conn, &l->mine, sizeof(l->mine), &l->done, true, "sending the QP information");
        if (!r.isOk()) return failed(r.status());
        if (r.value() == Io::kAgain) return ncclSuccess;
        l->done = 0;
        l->stage = 3;
        break;
      }
      default: {
        uint8_t ready = 0;
        auto r = moveSome(l->conn, &ready, 1, &l->done, false, "waiting for the peer's ready byte");
        if (!r.isOk()) return failed(r.status());
        if (r.value() == Io::kAgain) return ncclSuccess;
        if (ready != wire::kReadyByte) return failed(remoteError("IB: accept: the peer sent a bad ready byte"));
        l->comm->adoptSocket(l->conn);  // kept for the failover
        l->conn = -1;
        l->stage = 0;
        *recvComm = l->comm.release();
        return ncclSuccess;
      }
    }
  }
}

ncclResult_t ibRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  *mhandle = nullptr;
  if (type != NCCL_PTR_HOST && type != NCCL_PTR_CUDA)
    return report(invalidUsage("IB: regMr of memory type %d (host or CUDA memory)", type));
  if (type == NCCL_PTR_CUDA && !static_cast<IbComm*>(comm)->device()->peerMemory)
    return report(invalidUsage("IB: %s cannot register GPU memory by address: nvidia-peermem is not loaded "
                               "(regMrDmaBuf registers it through a dma-buf)",
                               static_cast<IbComm*>(comm)->device()->name.c_str()));
  auto memory = std::make_unique<IbMemory>(data, size, type == NCCL_PTR_CUDA);
  auto mr = memory->on(static_cast<IbComm*>(comm)->device());  // registered now where the comm is
  if (!mr.isOk()) return report(mr.status());
  *mhandle = memory.release();
  return ncclSuccess;
}

// GPUDirect RDMA through a dma-buf of device memory (device/dmabuf.h): `fd` from `offset` holds
// [data, data + size); the registration keeps its own duplicate of the descriptor.
ncclResult_t ibRegMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle) {
  *mhandle = nullptr;
  if (type == NCCL_PTR_HOST) return ibRegMr(comm, data, size, type, mhandle);
  const IbDevice* dev = static_cast<IbComm*>(comm)->device();
  if (type != NCCL_PTR_CUDA) return report(invalidUsage("IB: regMrDmaBuf of memory type %d", type));
  if (!dev->dmaBuf) return report(invalidUsage("IB: %s does not register dma-bufs", dev->name.c_str()));
  if (fd < 0) return report(invalidUsage("IB: regMrDmaBuf without a descriptor"));
  auto memory = std::make_unique<IbMemory>(data, size, fd, offset);
  auto mr = memory->on(dev);
  if (!mr.isOk()) return report(mr.status());
  *mhandle = memory.release();
  return ncclSuccess;
}

ncclResult_t ibDeregMr(void*, void* mhandle) {
  delete static_cast<IbMemory*>(mhandle);
  return ncclSuccess;
}

ncclResult_t ibIsend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void*, void** request) {
  return static_cast<IbComm*>(sendComm)->isend(data, size, tag, mhandle, request);
}

ncclResult_t ibIrecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void**,
                     void** request) {
  if (n != 1) return report(internalError("IB: irecv of %d buffers (this network takes one: maxRecvs 1)", n));
  return static_cast<IbComm*>(recvComm)->irecv(data[0], sizes[0], tags[0], mhandles[0], request);
}

ncclResult_t ibIflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request) {
  *request = nullptr;
  if (n != 1) return report(internalError("IB: iflush of %d buffers (this network takes one: maxRecvs 1)", n));
  return static_cast<IbComm*>(recvComm)->iflush(data[0], sizes[0], static_cast<IbMemory*>(mhandles[0]), request);
}

ncclResult_t ibTest(void* request, int* done, int* sizes) {
  auto* r = static_cast<IbRequest*>(request);
  return r->comm->test(r, done, sizes);
}

ncclResult_t ibCloseComm(void* comm) {
  delete static_cast<IbComm*>(comm);
  return ncclSuccess;
}

ncclResult_t ibCloseListen(void* listenComm) {
  delete static_cast<ListenComm*>(listenComm);
  return ncclSuccess;
}

ncclResult_t ibFinalize(void*) { return ncclSuccess; }

const ncclNet_v12_t kIbNet = {
    /*name=*/"IB",
    /*init=*/ibInit,
    /*devices=*/ibDevices,
    /*getProperties=*/ibGetProperties,
    /*listen=*/ibListen,
    /*connect=*/ibConnect,
    /*accept=*/ibAccept,
    /*regMr=*/ibRegMr,
    /*regMrDmaBuf=*/ibRegMrDmaBuf,
    /*deregMr=*/ibDeregMr,
    /*isend=*/ibIsend,
    /*irecv=*/ibIrecv,
    /*iflush=*/ibIflush,
    /*test=*/ibTest,
    /*closeSend=*/ibCloseComm,
    /*closeRecv=*/ibCloseComm,
    /*closeListen=*/ibCloseListen,
    /*getDeviceMr=*/nullptr,
    /*irecvConsumed=*/nullptr,
    /*makeVDevice=*/nullptr,
    /*finalize=*/ibFinalize,
    /*setNetAttr=*/nullptr,
};

}  // namespace

const ncclNet_v12_t* ibNet() { return &kIbNet; }
const char* ibLastError() { return lastError.c_str(); }
void ibSetLastError(const std::string& text) { lastError = text; }

}  // namespace theseus::transport::ib
