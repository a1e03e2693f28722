// The socket net plugin's devices, handshake and requests (see net_socket.h).
#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "net_socket.h"

namespace theseus_net_socket {
namespace {

constexpr uint64_t kHandleMagic = 0x314b534e54454854ull;  // "THETNSK1"
constexpr uint64_t kHelloMagic = 0x314f4c4c454e4854ull;   // "THNELLO1"
constexpr uint32_t kMessageMagic = 0x4d534e54u;           // "TNSM"
constexpr int kHelloTimeoutMs = 10000;

ncclDebugLogger_t logger = nullptr;

#define NS_LOG(level, ...) \
  do {                      \
    if (logger != nullptr) logger(level, NCCL_NET, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define NS_WARN(...) NS_LOG(NCCL_LOG_WARN, __VA_ARGS__)
#define NS_INFO(...) NS_LOG(NCCL_LOG_INFO, __VA_ARGS__)

struct Device {
  std::string name;
  std::string pciPath;
  int speedMbps = 10000;
  sockaddr_in addr{};
  DeviceInfo info{};
};
std::vector<Device> devices;
std::once_flag initOnce;

// What the caller's handle holds (NCCL_NET_HANDLE_MAXSIZE bytes): the listener's
// address, and connect()'s stage between calls.
struct Handle {
  uint64_t magic;
  sockaddr_in addr;
  int32_t stage;  // 0: not started, 1: connecting, 2: hello partly sent
  int32_t fd;
  uint32_t helloSent;
};
static_assert(sizeof(Handle) <= NCCL_NET_HANDLE_MAXSIZE);

struct Hello {
  uint64_t magic;
  uint64_t reserved;
};

struct Header {
  uint32_t magic;
  int32_t tag;
  uint64_t bytes;
};
static_assert(sizeof(Header) == 16);

struct Comm;
struct Request {
  Comm* comm = nullptr;
  bool used = false;
  bool done = false;
  char* data = nullptr;
  size_t capacity = 0;  // recv: posted size; send: the message size
  int tag = 0;
  Header header{};
  size_t headerDone = 0;
  size_t bytes = 0;     // payload size (recv: known once the header is in)
  size_t dataDone = 0;
};

struct Comm {
  int fd = -1;
  bool send = false;
  ncclResult_t failed = ncclSuccess;
  Request requests[kMaxRequests];
  uint64_t head = 0;  // oldest request not yet done
  uint64_t tail = 0;  // next request slot
  int mr = 0;         // registrations (for the handle's identity only)
};

struct Listen {
  int fd = -1;
  int dev = 0;
};

bool wanted(const std::string& name, const char* spec) {
  if (spec == nullptr || *spec == 0) {
    if (name == "lo" || name.rfind("docker", 0) == 0) return false;
    return true;
  }
  bool exclude = *spec == '^';
  if (exclude) ++spec;
  bool exact = *spec == '=';
  if (exact) ++spec;
  std::string list(spec);
  bool match = false;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    std::string item = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? list.size() + 1 : comma + 1;
    if (item.empty()) continue;
    if (exact ? name == item : name.rfind(item, 0) == 0) match = true;
  }
  return exclude ? !match : match;
}

std::string readLine(const std::string& path) {
  FILE* f = fopen(path.c_str(), "r");
  if (f == nullptr) return "";
  char buf[256] = {};
  if (fgets(buf, sizeof(buf), f) == nullptr) buf[0] = 0;
  fclose(f);
  std::string s(buf);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

void discover() {
  const char* spec = getenv("NCCL_SOCKET_IFNAME");
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return;
  for (int pass = 0; pass < 2 && devices.empty(); ++pass) {
    for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
      if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET || !(a->ifa_flags & IFF_UP)) continue;
      std::string name = a->ifa_name;
      // Second pass (nothing else is up, no explicit choice): loopback.
      if (pass == 0 ? !wanted(name, spec) : !(spec == nullptr && name == "lo")) continue;
      bool seen = false;
      for (const Device& d : devices) seen |= d.name == name;
      if (seen) continue;
      Device d;
      d.name = name;
      std::memcpy(&d.addr, a->ifa_addr, sizeof(sockaddr_in));
      d.addr.sin_port = 0;
      char real[PATH_MAX];
      std::string dev = "/sys/class/net/" + name + "/device";
      if (realpath(dev.c_str(), real) != nullptr) d.pciPath = real;
      std::string speed = readLine("/sys/class/net/" + name + "/speed");
      if (!speed.empty() && atoi(speed.c_str()) > 0) d.speedMbps = atoi(speed.c_str());
      devices.push_back(std::move(d));
    }
  }
  freeifaddrs(list);
  for (size_t i = 0; i < devices.size(); ++i) {
    Device& d = devices[i];
    d.info = {d.name.c_str(), d.pciPath.empty() ? nullptr : d.pciPath.c_str(), d.speedMbps, static_cast<int>(i)};
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &d.addr.sin_addr, ip, sizeof(ip));
    NS_INFO("NET/TheseusSocket: device %zu: %s (%s, %d Mb/s)", i, d.name.c_str(), ip, d.speedMbps);
  }
}

void setNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

void tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// Moves bytes of one request without blocking; false with `*err` on failure.
bool moveSend(Comm* c, Request* r, bool* progressed) {
  while (r->headerDone < sizeof(Header) || r->dataDone < r->bytes) {
    iovec iov[2];
    int n = 0;
    if (r->headerDone < sizeof(Header))
      iov[n++] = {reinterpret_cast<char*>(&r->header) + r->headerDone, sizeof(Header) - r->headerDone};
    if (r->dataDone < r->bytes) iov[n++] = {r->data + r->dataDone, r->bytes - r->dataDone};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n;
    ssize_t w = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return true;
      NS_WARN("NET/TheseusSocket: send failed: %s", strerror(errno));
      c->failed = errno == EPIPE || errno == ECONNRESET ? ncclRemoteError : ncclSystemError;
      return false;
    }
    *progressed = true;
    size_t left = static_cast<size_t>(w);
    size_t h = std::min(left, sizeof(Header) - r->headerDone);
    r->headerDone += h;
    r->dataDone += left - h;
  }
  r->done = true;
  return true;
}

bool recvInto(Comm* c, char* dst, size_t want, size_t* done, bool* progressed) {
  while (*done < want) {
    ssize_t got = recv(c->fd, dst + *done, want - *done, 0);
    if (got > 0) {
      *done += static_cast<size_t>(got);
      *progressed = true;
      continue;
    }
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
    if (got == 0) NS_WARN("NET/TheseusSocket: the peer closed the connection");
    else NS_WARN("NET/TheseusSocket: receive failed: %s", strerror(errno));
    c->failed = got == 0 || errno == ECONNRESET ? ncclRemoteError : ncclSystemError;
    return false;
  }
  return true;
}

bool moveRecv(Comm* c, Request* r, bool* progressed) {
  if (r->headerDone < sizeof(Header)) {
    if (!recvInto(c, reinterpret_cast<char*>(&r->header), sizeof(Header), &r->headerDone, progressed)) return false;
    if (r->headerDone < sizeof(Header)) return true;
    if (r->header.magic != kMessageMagic) {
      NS_WARN("NET/TheseusSocket: bad message header (magic %08x): not a peer speaking this protocol",
              r->header.magic);
      c->failed = ncclRemoteError;
      return false;
    }
    if (r->header.tag != r->tag) {
      NS_WARN("NET/TheseusSocket: message with tag %d where tag %d was posted", r->header.tag, r->tag);
      c->failed = ncclInternalError;
      return false;
    }
    if (r->header.bytes > r->capacity) {
      NS_WARN("NET/TheseusSocket: message truncated: %llu bytes sent, %zu posted",
              static_cast<unsigned long long>(r->header.bytes), r->capacity);
      c->failed = ncclInternalError;
      return false;
    }
    r->bytes = r->header.bytes;
  }
  if (!recvInto(c, r->data, r->bytes, &r->dataDone, progressed)) return false;
  if (r->dataDone == r->bytes) r->done = true;
  return true;
}

// Drives the comm's requests in order, as far as the socket allows.
ncclResult_t drive(Comm* c) {
  if (c->failed != ncclSuccess) return c->failed;
  for (uint64_t i = c->head; i < c->tail; ++i) {
    Request* r = &c->requests[i % kMaxRequests];
    if (r->done) continue;
    bool progressed = false;
    if (!(c->send ? moveSend(c, r, &progressed) : moveRecv(c, r, &progressed))) return c->failed;
    if (!r->done) break;
  }
  return ncclSuccess;
}

Request* newRequest(Comm* c) {
  if (c->tail - c->head >= static_cast<uint64_t>(kMaxRequests)) return nullptr;
  Request* r = &c->requests[c->tail % kMaxRequests];
  *r = Request{};
  r->comm = c;
  r->used = true;
  ++c->tail;
  return r;
}

// Waits (briefly, once connected) for a whole hello.
bool readHello(int fd, Hello* h) {
  size_t done = 0;
  char* p = reinterpret_cast<char*>(h);
  while (done < sizeof(Hello)) {
    pollfd pfd{fd, POLLIN, 0};
    if (poll(&pfd, 1, kHelloTimeoutMs) <= 0) return false;
    ssize_t got = recv(fd, p + done, sizeof(Hello) - done, 0);
    if (got <= 0 && !(got < 0 && (errno == EAGAIN || errno == EINTR))) return false;
    if (got > 0) done += static_cast<size_t>(got);
  }
  return h->magic == kHelloMagic;
}

}  // namespace

ncclResult_t init(ncclDebugLogger_t log) {
  if (log != nullptr) logger = log;
  std::call_once(initOnce, discover);
  if (devices.empty()) {
    NS_WARN("NET/TheseusSocket: no usable IPv4 interface (NCCL_SOCKET_IFNAME=%s)",
            getenv("NCCL_SOCKET_IFNAME") ? getenv("NCCL_SOCKET_IFNAME") : "");
    return ncclSystemError;
  }
  return ncclSuccess;
}

int deviceCount() { return static_cast<int>(devices.size()); }

const DeviceInfo* deviceInfo(int dev) {
  if (dev < 0 || dev >= deviceCount()) return nullptr;
  return &devices[static_cast<size_t>(dev)].info;
}

ncclResult_t listen(int dev, void* handle, void** listenComm) {
  if (dev < 0 || dev >= deviceCount() || handle == nullptr || listenComm == nullptr) return ncclInvalidArgument;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ncclSystemError;
  sockaddr_in addr = devices[static_cast<size_t>(dev)].addr;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 1024) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    NS_WARN("NET/TheseusSocket: listen on %s failed: %s", devices[static_cast<size_t>(dev)].name.c_str(),
            strerror(errno));
    close(fd);
    return ncclSystemError;
  }
  setNonBlocking(fd);
  std::memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
  Handle* h = static_cast<Handle*>(handle);
  h->magic = kHandleMagic;
  h->addr = addr;
  h->fd = -1;
  *listenComm = new Listen{fd, dev};
  return ncclSuccess;
}

ncclResult_t connect(int dev, void* handle, void** sendComm) {
  (void)dev;
  *sendComm = nullptr;
  Handle* h = static_cast<Handle*>(handle);
  if (h == nullptr || h->magic != kHandleMagic) {
    NS_WARN("NET/TheseusSocket: connect with a handle this plugin did not make");
    return ncclInvalidArgument;
  }
  if (h->stage == 3) {
    NS_WARN("NET/TheseusSocket: connect called again with a handle already connected");
    return ncclInvalidUsage;
  }
  if (h->stage == 0) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return ncclSystemError;
    tune(fd);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&h->addr), sizeof(h->addr)) != 0 && errno != EINPROGRESS) {
      NS_WARN("NET/TheseusSocket: connect failed: %s", strerror(errno));
      close(fd);
      return ncclRemoteError;
    }
    h->fd = fd;
    h->stage = 1;
  }
  if (h->stage == 1) {
    pollfd pfd{h->fd, POLLOUT, 0};
    if (poll(&pfd, 1, 0) <= 0) return ncclSuccess;  // still connecting
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(h->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      NS_WARN("NET/TheseusSocket: connect failed: %s", strerror(err));
      close(h->fd);
      h->stage = 0;
      h->fd = -1;
      return ncclRemoteError;
    }
    h->stage = 2;
  }
  Hello hello{kHelloMagic, 0};
  while (h->helloSent < sizeof(hello)) {
    ssize_t w = send(h->fd, reinterpret_cast<char*>(&hello) + h->helloSent, sizeof(hello) - h->helloSent,
                     MSG_NOSIGNAL);
    if (w < 0 && (errno == EAGAIN || errno == EINTR)) return ncclSuccess;
    if (w < 0) {
      NS_WARN("NET/TheseusSocket: hello failed: %s", strerror(errno));
      return ncclRemoteError;
    }
    h->helloSent += static_cast<uint32_t>(w);
  }
  Comm* c = new Comm();
  c->fd = h->fd;
  c->send = true;
  h->stage = 3;
  h->fd = -1;
  *sendComm = c;
  return ncclSuccess;
}

ncclResult_t accept(void* listenComm, void** recvComm) {
  *recvComm = nullptr;
  Listen* l = static_cast<Listen*>(listenComm);
  if (l == nullptr) return ncclInvalidArgument;
  int fd = ::accept4(l->fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return ncclSuccess;
    NS_WARN("NET/TheseusSocket: accept failed: %s", strerror(errno));
    return ncclSystemError;
  }
  tune(fd);
  Hello hello{};
  if (!readHello(fd, &hello)) {
    NS_WARN("NET/TheseusSocket: dropped a connection without a valid hello");
    close(fd);
    return ncclSuccess;  // not our peer; keep listening
  }
  Comm* c = new Comm();
  c->fd = fd;
  *recvComm = c;
  return ncclSuccess;
}

ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  (void)data;
  (void)size;
  if (comm == nullptr || mhandle == nullptr) return ncclInvalidArgument;
  if (type != NCCL_PTR_HOST) {
    NS_WARN("NET/TheseusSocket: only host memory can be registered (type %d)", type);
    return ncclInternalError;
  }
  Comm* c = static_cast<Comm*>(comm);
  ++c->mr;
  *mhandle = &c->mr;
  return ncclSuccess;
}

ncclResult_t deregMr(void* comm, void* mhandle) {
  if (comm == nullptr || mhandle != &static_cast<Comm*>(comm)->mr) return ncclInvalidArgument;
  --static_cast<Comm*>(comm)->mr;
  return ncclSuccess;
}

ncclResult_t isend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request) {
  (void)mhandle;
  *request = nullptr;
  Comm* c = static_cast<Comm*>(sendComm);
  if (c == nullptr || !c->send) return ncclInvalidArgument;
  if (c->failed != ncclSuccess) return c->failed;
  Request* r = newRequest(c);
  if (r == nullptr) return ncclSuccess;  // full: retry later
  r->data = static_cast<char*>(data);
  r->bytes = size;
  r->capacity = size;
  r->tag = tag;
  r->header = Header{kMessageMagic, tag, size};
  *request = r;
  return drive(c);
}

ncclResult_t irecv(void* recvComm, int n, void** data, const size_t* sizes, const int* tags, void** mhandles,
                   void** request) {
  (void)mhandles;
  *request = nullptr;
  Comm* c = static_cast<Comm*>(recvComm);
  if (c == nullptr || c->send) return ncclInvalidArgument;
  if (n != 1) {
    NS_WARN("NET/TheseusSocket: irecv of %d buffers; this plugin receives one at a time (maxRecvs 1)", n);
    return ncclInternalError;
  }
  if (c->failed != ncclSuccess) return c->failed;
  Request* r = newRequest(c);
  if (r == nullptr) return ncclSuccess;
  r->data = static_cast<char*>(data[0]);
  r->capacity = sizes[0];
  r->tag = tags[0];
  *request = r;
  return ncclSuccess;
}

ncclResult_t iflush(void*, int, void**, int*, void**, void** request) {
  *request = nullptr;  // host memory: nothing to flush
  return ncclSuccess;
}

ncclResult_t test(void* request, int* done, int* sizes) {
  Request* r = static_cast<Request*>(request);
  if (r == nullptr || !r->used || done == nullptr) return ncclInvalidArgument;
  Comm* c = r->comm;
  // A request that completed is reported done even when a later one failed (the
  // peer may have closed after its last message).
  ncclResult_t rc = drive(c);
  if (rc != ncclSuccess && !r->done) return rc;
  *done = r->done ? 1 : 0;
  if (!r->done) return ncclSuccess;
  if (sizes != nullptr) sizes[0] = static_cast<int>(r->bytes);
  r->used = false;
  // Retire the done requests at the head, so their slots can be reused.
  while (c->head < c->tail && !c->requests[c->head % kMaxRequests].used) ++c->head;
  return ncclSuccess;
}

ncclResult_t closeComm(void* comm) {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return ncclSuccess;
  if (c->fd >= 0) close(c->fd);
  delete c;
  return ncclSuccess;
}

ncclResult_t closeListen(void* listenComm) {
  Listen* l = static_cast<Listen*>(listenComm);
  if (l == nullptr) return ncclSuccess;
  if (l->fd >= 0) close(l->fd);
  delete l;
  return ncclSuccess;
}

}  // namespace theseus_net_socket
