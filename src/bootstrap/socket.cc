#include "bootstrap/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <strings.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/knobs.h"
#include "common/log.h"

namespace theseus::bootstrap {
namespace {

const StringKnob kSocketIfname("NCCL_SOCKET_IFNAME", nullptr,
                               "Bootstrap interface: comma-separated name prefixes; '^' excludes, '=' means exact "
                               "(e.g. eth, =eth0, ^docker,lo)");
const StringKnob kSocketFamily("NCCL_SOCKET_FAMILY", nullptr, "Bootstrap address family: AF_INET or AF_INET6");
const StringKnob kCommId("NCCL_COMM_ID", nullptr,
                         "Root address <ipv4>:<port>, [<ipv6>]:<port> or <host>:<port>: ncclGetUniqueId returns it "
                         "without networking and rank 0's init starts the root there");
const IntKnob kRetryCount("NCCL_SOCKET_RETRY_CNT", 34, "Connection attempts to a peer that refuses or is unreachable");
const IntKnob kRetrySleepMs("NCCL_SOCKET_RETRY_SLEEP_MSEC", 100,
                            "Sleep before the n-th connection retry is n times this many milliseconds");

constexpr int64_t kPollSliceMs = 20;

bool startsWith(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

Result<uint16_t> parsePort(const std::string& text, const std::string& whole) {
  if (text.empty() || text.size() > 5 || text.find_first_not_of("0123456789") != std::string::npos)
    return invalidArgument("'%s' has no valid port (expected host:port)", whole.c_str());
  long v = strtol(text.c_str(), nullptr, 10);
  if (v > 65535) return invalidArgument("port %ld in '%s' is out of range", v, whole.c_str());
  return static_cast<uint16_t>(v);
}

// Waits for `events` on fd for at most one slice; returns poll's revents (0 on timeout).
int pollSlice(int fd, short events, const Wait& wait) {
  pollfd p{fd, events, 0};
  int ms = static_cast<int>(wait.deadline.remainingMs(kPollSliceMs));
  int r = poll(&p, 1, ms);
  return r > 0 ? p.revents : 0;
}

}  // namespace

// ---------------------------------------------------------------- SockAddr

Result<SockAddr> SockAddr::parse(const std::string& text, int family) {
  std::string host, port;
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return invalidArgument("'%s' is not a valid [ipv6]:port address", text.c_str());
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0)
      return invalidArgument("'%s' is not a valid address (expected host:port)", text.c_str());
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string::npos)
      return invalidArgument("'%s': write IPv6 addresses as [addr]:port", text.c_str());
  }
  uint16_t portNum;
  TH_ASSIGN(portNum, parsePort(port, text));

  SockAddr out;
  sockaddr_in v4{};
  if (family != AF_INET6 && inet_pton(AF_INET, host.c_str(), &v4.sin_addr) == 1) {
    v4.sin_family = AF_INET;
    out = fromSockaddr(reinterpret_cast<sockaddr*>(&v4), sizeof(v4));
    out.setPort(portNum);
    return out;
  }
  sockaddr_in6 v6{};
  std::string bare = host.substr(0, host.find('%'));
  if (family != AF_INET && inet_pton(AF_INET6, bare.c_str(), &v6.sin6_addr) == 1) {
    v6.sin6_family = AF_INET6;
    if (bare.size() < host.size()) {
      std::string scope = host.substr(bare.size() + 1);
      v6.sin6_scope_id = if_nametoindex(scope.c_str());
      if (v6.sin6_scope_id == 0) v6.sin6_scope_id = static_cast<uint32_t>(strtoul(scope.c_str(), nullptr, 10));
    }
    out = fromSockaddr(reinterpret_cast<sockaddr*>(&v6), sizeof(v6));
    out.setPort(portNum);
    return out;
  }
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr)
    return invalidArgument("cannot resolve host '%s' in '%s': %s", host.c_str(), text.c_str(), gai_strerror(rc));
  const addrinfo* pick = res;
  for (const addrinfo* a = res; a; a = a->ai_next)
    if (a->ai_family == AF_INET && family == AF_UNSPEC) {
      pick = a;
      break;
    }
  out = fromSockaddr(pick->ai_addr, pick->ai_addrlen);
  freeaddrinfo(res);
  out.setPort(portNum);
  return out;
}

SockAddr SockAddr::fromSockaddr(const sockaddr* sa, socklen_t len) {
  SockAddr a;
  if (sa == nullptr) return a;
  socklen_t want = sa->sa_family == AF_INET ? sizeof(sockaddr_in) : sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : 0;
  if (want == 0 || len < want) return a;
  memcpy(&a.storage_, sa, want);
  a.len_ = want;
  return a;
}

uint16_t SockAddr::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_port);
  return 0;
}

void SockAddr::setPort(uint16_t port) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&storage_)->sin_port = htons(port);
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage_)->sin6_port = htons(port);
}

bool SockAddr::isLoopback() const {
  if (family() == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr.s_addr) >> 24) == 127;
  if (family() == AF_INET6) return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr);
  return false;
}

bool SockAddr::isLinkLocal() const {
  return family() == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr);
}

bool SockAddr::sameSubnet(const SockAddr& other, const SockAddr& netmask) const {
  if (family() != other.family() || netmask.family() != family()) return false;
  const uint8_t *a, *b, *m;
  size_t n;
  if (family() == AF_INET) {
    a = reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr);
    b = reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in*>(&other.storage_)->sin_addr);
    m = reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in*>(&netmask.storage_)->sin_addr);
    n = 4;
  } else {
    a = reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr.s6_addr;
    b = reinterpret_cast<const sockaddr_in6*>(&other.storage_)->sin6_addr.s6_addr;
    m = reinterpret_cast<const sockaddr_in6*>(&netmask.storage_)->sin6_addr.s6_addr;
    n = 16;
  }
  for (size_t i = 0; i < n; ++i)
    if ((a[i] & m[i]) != (b[i] & m[i])) return false;
  return true;
}

std::string SockAddr::host() const {
  char buf[INET6_ADDRSTRLEN + IF_NAMESIZE + 2] = "";
  if (family() == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr, buf, sizeof(buf));
    return buf;
  }
  if (family() == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&storage_);
    inet_ntop(AF_INET6, &v6->sin6_addr, buf, sizeof(buf));
    std::string s = buf;
    char ifname[IF_NAMESIZE];
    if (v6->sin6_scope_id != 0) s += "%" + std::string(if_indextoname(v6->sin6_scope_id, ifname) ? ifname : std::to_string(v6->sin6_scope_id));
    return s;
  }
  return "<no address>";
}

std::string SockAddr::toString() const {
  if (family() == AF_INET6) return "[" + host() + "]:" + std::to_string(port());
  return host() + ":" + std::to_string(port());
}

bool SockAddr::operator==(const SockAddr& o) const {
  return len_ == o.len_ && memcmp(&storage_, &o.storage_, len_) == 0;
}

// ---------------------------------------------------------------- interfaces

std::vector<NetInterface> listInterfaces() {
  std::vector<NetInterface> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || !(i->ifa_flags & IFF_UP)) continue;
    int fam = i->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    NetInterface ni;
    ni.name = i->ifa_name;
    socklen_t len = fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    ni.addr = SockAddr::fromSockaddr(i->ifa_addr, len);
    if (i->ifa_netmask) ni.netmask = SockAddr::fromSockaddr(i->ifa_netmask, len);
    ni.loopback = (i->ifa_flags & IFF_LOOPBACK) != 0 || ni.addr.isLoopback();
    if (ni.addr.valid()) out.push_back(ni);
  }
  freeifaddrs(list);
  return out;
}

IfNameFilter IfNameFilter::parse(const std::string& spec) {
  IfNameFilter f;
  size_t pos = 0;
  if (pos < spec.size() && spec[pos] == '^') f.exclude = true, ++pos;
  if (pos < spec.size() && spec[pos] == '=') f.exact = true, ++pos;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    std::string name = spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (!name.empty()) f.names.push_back(name);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return f;
}

bool IfNameFilter::matches(const std::string& ifname) const {
  bool listed = false;
  for (const auto& n : names)
    if (exact ? ifname == n : startsWith(ifname, n.c_str())) listed = true;
  return exclude ? !listed : listed;
}

Result<NetInterface> selectInterface(const std::vector<NetInterface>& interfaces, const InterfacePolicy& policy) {
  // Rank every usable address; lower is better, ties keep getifaddrs order.
  auto tier = [&](const NetInterface& i) -> int {
    if (!policy.ifname.empty()) return i.loopback ? 1 : 0;  // among the user's choices, loopback last
    if (policy.commId && i.addr.sameSubnet(*policy.commId, i.netmask)) return 0;
    if (startsWith(i.name, "ib")) return 1;
    if (i.loopback || startsWith(i.name, "lo")) return 4;
    if (startsWith(i.name, "docker") || startsWith(i.name, "virbr")) return 3;
    return 2;
  };
  IfNameFilter filter = IfNameFilter::parse(policy.ifname);
  const NetInterface* best = nullptr;
  int bestScore = 1 << 30;
  std::string seen;
  for (const auto& i : interfaces) {
    if (seen.find(" " + i.name + " ") == std::string::npos) seen += " " + i.name + " ";
    if (policy.family != AF_UNSPEC && i.addr.family() != policy.family) continue;
    if (i.addr.isLinkLocal()) continue;
    if (!policy.ifname.empty() && !filter.matches(i.name)) continue;
    int score = tier(i) * 2 + (i.addr.family() == AF_INET ? 0 : 1);
    if (score < bestScore) best = &i, bestScore = score;
  }
  if (best == nullptr) {
    return systemError("no usable network interface for the bootstrap (NCCL_SOCKET_IFNAME='%s', "
                       "NCCL_SOCKET_FAMILY=%s; interfaces that are up:%s)",
                       policy.ifname.c_str(),
                       policy.family == AF_INET ? "AF_INET" : policy.family == AF_INET6 ? "AF_INET6" : "any",
                       seen.empty() ? " none" : seen.c_str());
  }
  return *best;
}

Result<int> socketFamilyFromEnv() {
  if (!kSocketFamily.isSet()) return AF_UNSPEC;
  std::string v = kSocketFamily.get();
  if (strcasecmp(v.c_str(), "AF_INET") == 0 || v == "4") return AF_INET;
  if (strcasecmp(v.c_str(), "AF_INET6") == 0 || v == "6") return AF_INET6;
  return invalidArgument("NCCL_SOCKET_FAMILY='%s' is not AF_INET or AF_INET6", v.c_str());
}

std::string commIdFromEnv() { return kCommId.get(); }

Result<NetInterface> bootstrapInterface() {
  static std::once_flag once;
  static Result<NetInterface> chosen = internalError("bootstrap interface not chosen");
  std::call_once(once, [] {
    chosen = [&]() -> Result<NetInterface> {
      InterfacePolicy policy;
      policy.ifname = kSocketIfname.get();
      TH_ASSIGN(policy.family, socketFamilyFromEnv());
      if (std::string id = commIdFromEnv(); !id.empty()) {
        SockAddr addr;
        TH_ASSIGN(addr, SockAddr::parse(id, policy.family));
        policy.commId = addr;
      }
      NetInterface ni;
      TH_ASSIGN(ni, selectInterface(listInterfaces(), policy));
      ni.addr.setPort(0);
      TH_INFO(log::kBootstrap | log::kInit, "Bootstrap: using %s:%s", ni.name.c_str(), ni.addr.host().c_str());
      return ni;
    }();
  });
  return chosen;
}

// ---------------------------------------------------------------- I/O

Status waitEnded(const Wait& wait, const std::string& what) {
  if (wait.aborted()) return invalidUsage("communicator aborted while waiting for %s", what.c_str());
  return timeoutError("timed out after %lld ms waiting for %s", static_cast<long long>(wait.timeoutMs), what.c_str());
}

bool sleepWithin(const Wait& wait, int64_t ms) {
  auto end = Clock::now() + std::chrono::milliseconds(ms);
  while (Clock::now() < end) {
    if (wait.over()) return false;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min<int64_t>(left, kPollSliceMs)));
  }
  return !wait.over();
}

void setNonBlocking(int fd, bool on) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0) return;
  fcntl(fd, F_SETFL, on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK));
}

void closeFd(int* fd) {
  if (*fd >= 0) ::close(*fd);
  *fd = -1;
}

Result<int> listenOn(const SockAddr& addr, SockAddr* bound, bool reuseAddr) {
  int fd = socket(addr.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return errnoStatus(errno, "socket() for a listener on %s", addr.toString().c_str());
  int one = 1;
  if (reuseAddr) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, addr.get(), addr.length()) != 0 || listen(fd, SOMAXCONN) != 0) {
    Status s = errnoStatus(errno, "cannot listen on %s", addr.toString().c_str());
    ::close(fd);
    return s;
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  *bound = SockAddr::fromSockaddr(reinterpret_cast<sockaddr*>(&ss), len);
  return fd;
}

namespace {

// One non-blocking connect attempt; returns the errno of the failure (0 = connected).
int connectOnce(const SockAddr& to, const Wait& wait, int* out) {
  int fd = socket(to.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  int err = 0;
  if (::connect(fd, to.get(), to.length()) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      err = ETIMEDOUT;
      while (!wait.over()) {
        int ev = pollSlice(fd, POLLOUT, wait);
        if (ev == 0) continue;
        socklen_t len = sizeof(err);
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        break;
      }
    }
  }
  if (err != 0) {
    ::close(fd);
    return err;
  }
  setNonBlocking(fd, false);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  *out = fd;
  return 0;
}

bool retryable(int err) {
  return err == ECONNREFUSED || err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH ||
         err == ECONNRESET || err == EAGAIN || err == ECONNABORTED || err == EADDRNOTAVAIL || err == EINTR;
}

}  // namespace

// `what` may already name the address ("the bootstrap root at a:p"); it is said once. A wait that
// ends between retries keeps the last refusal in the message (why nobody answered).
Result<int> connectTo(const SockAddr& to, const Wait& wait, const std::string& what,
                      const std::function<Status()>& stillWanted) {
  const int64_t maxRetries = std::max<int64_t>(kRetryCount.get(), 0);
  const int64_t sleepMs = std::max<int64_t>(kRetrySleepMs.get(), 1);
  const std::string addr = to.toString();
  const std::string target = what.find(addr) == std::string::npos ? what + " at " + addr : what;
  int lastErr = 0;
  auto ended = [&] {
    Status s = waitEnded(wait, "a connection to " + target);
    if (lastErr == 0) return s;
    return Status(s.code(), s.message() + " (last attempt: " + strerror(lastErr) + ")");
  };
  for (int64_t attempt = 0;; ++attempt) {
    if (wait.over()) return ended();
    int fd = -1;
    int err = connectOnce(to, wait, &fd);
    if (err == 0) return fd;
    if (!retryable(err) || attempt >= maxRetries) {
      return remoteError("cannot connect to %s after %lld attempt(s): %s", target.c_str(),
                         static_cast<long long>(attempt + 1), strerror(err));
    }
    if (err != ETIMEDOUT && err != EINTR) lastErr = err;
    if (stillWanted) TH_CHECK(stillWanted());
    TH_TRACE(log::kBootstrap, "connect to %s: %s, retry %lld", target.c_str(), strerror(err),
             static_cast<long long>(attempt + 1));
    if (!sleepWithin(wait, std::min<int64_t>((attempt + 1) * sleepMs, 1000))) return ended();
  }
}

int probeConnect(const SockAddr& to, int64_t timeoutMs) {
  int fd = -1;
  int err = connectOnce(to, Wait::forMs(timeoutMs), &fd);
  if (fd >= 0) ::close(fd);
  return err;
}

void raiseOpenFileLimit() {
  static std::once_flag once;
  std::call_once(once, [] {
    rlimit lim;
    if (getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= lim.rlim_max) return;
    const rlim_t was = lim.rlim_cur;
    lim.rlim_cur = lim.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &lim) != 0)
      TH_INFO(log::kInit, "cannot raise the open-file limit from %llu: %s", static_cast<unsigned long long>(was),
              strerror(errno));
    else
      TH_INFO(log::kInit, "open-file limit raised from %llu to %llu", static_cast<unsigned long long>(was),
              static_cast<unsigned long long>(lim.rlim_cur));
  });
}

int acceptNonBlocking(int listenFd) {
  for (;;) {
    int fd = accept4(listenFd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return fd;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    return -1;
  }
}

Status sendAll(int fd, const void* data, size_t bytes, const Wait& wait, const std::string& what) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
      return remoteError("sending to %s failed: %s", what.c_str(), strerror(errno));
    if (wait.over()) return waitEnded(wait, "sending to " + what);
    pollSlice(fd, POLLOUT, wait);
  }
  return Status::ok();
}

Status recvAll(int fd, void* data, size_t bytes, const Wait& wait, const std::string& what) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = ::recv(fd, p, bytes, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return remoteError("%s closed the connection", what.c_str());
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return remoteError("receiving from %s failed: %s", what.c_str(), strerror(errno));
    if (wait.over()) return waitEnded(wait, "data from " + what);
    pollSlice(fd, POLLIN, wait);
  }
  return Status::ok();
}

}  // namespace theseus::bootstrap
