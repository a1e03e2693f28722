// Sockets for the bootstrap: addresses (IPv4/IPv6), the choice of the
// bootstrap network interface (NCCL_SOCKET_IFNAME / NCCL_SOCKET_FAMILY /
// NCCL_COMM_ID rules) and blocking-style I/O that never waits forever.
//
// Every call that can block takes a Wait: a deadline plus up to two abort
// flags (the communicator's and, for children, the parent's). Waits poll in
// short slices so an abort from another thread is seen within ~20 ms. Sends use
// MSG_NOSIGNAL: a peer that died gives an error, never SIGPIPE.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"

namespace theseus::bootstrap {

// An IPv4 or IPv6 socket address (port included).
class SockAddr {
 public:
  SockAddr() = default;
  // "1.2.3.4:5", "[fe80::1%eth0]:5", "host.name:5" (resolved; IPv4 preferred unless `family` says otherwise).
  static Result<SockAddr> parse(const std::string& text, int family = AF_UNSPEC);
  static SockAddr fromSockaddr(const sockaddr* sa, socklen_t len);

  bool valid() const { return family() == AF_INET || family() == AF_INET6; }
  int family() const { return storage_.ss_family; }
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage_); }
  socklen_t length() const { return len_; }
  uint16_t port() const;
  void setPort(uint16_t port);
  bool isLoopback() const;
  bool isLinkLocal() const;
  // True if `other` is in the same subnet as this address under `netmask`.
  bool sameSubnet(const SockAddr& other, const SockAddr& netmask) const;
  std::string host() const;      // "1.2.3.4" / "fe80::1%eth0"
  std::string toString() const;  // "1.2.3.4:5" / "[::1]:5"
  bool operator==(const SockAddr& o) const;

 private:
  sockaddr_storage storage_{};
  socklen_t len_ = 0;
};

// One address of an interface that is up.
struct NetInterface {
  std::string name;
  SockAddr addr;
  SockAddr netmask;
  bool loopback = false;
};

// The interfaces of this network namespace that are up, in getifaddrs order.
std::vector<NetInterface> listInterfaces();

// NCCL_SOCKET_IFNAME: comma-separated name prefixes; a leading '^' excludes
// the listed names, a leading '=' (after any '^') requires exact matches.
struct IfNameFilter {
  bool exclude = false;
  bool exact = false;
  std::vector<std::string> names;
  static IfNameFilter parse(const std::string& spec);
  bool matches(const std::string& ifname) const;
};

struct InterfacePolicy {
  std::string ifname;                // NCCL_SOCKET_IFNAME ("" = default order)
  int family = AF_UNSPEC;            // NCCL_SOCKET_FAMILY
  std::optional<SockAddr> commId;    // NCCL_COMM_ID: prefer the interface in its subnet
};

// Picks the bootstrap interface. Default order: an interface in NCCL_COMM_ID's
// subnet; then ib*; then anything but docker*/lo*/virbr*; then docker*/virbr*;
// then loopback. With NCCL_SOCKET_IFNAME: the matching interfaces in order,
// loopback last. IPv4 before IPv6 on equal rank; IPv6 link-local never.
Result<NetInterface> selectInterface(const std::vector<NetInterface>& interfaces, const InterfacePolicy& policy);
// The process's bootstrap interface, chosen once from the environment.
Result<NetInterface> bootstrapInterface();
// NCCL_SOCKET_FAMILY ("AF_INET", "AF_INET6"; also "4"/"6"); AF_UNSPEC when unset.
Result<int> socketFamilyFromEnv();
// NCCL_COMM_ID as set ("" when unset).
std::string commIdFromEnv();

// What a blocking call may wait for.
struct Wait {
  Deadline deadline = Deadline::never();
  int64_t timeoutMs = -1;               // what `deadline` was made from, for messages
  const AbortFlag* abort = nullptr;
  const AbortFlag* abort2 = nullptr;

  static Wait forMs(int64_t ms, const AbortFlag* abort = nullptr, const AbortFlag* abort2 = nullptr) {
    return Wait{Deadline::afterMs(ms), ms, abort, abort2};
  }
  bool aborted() const { return (abort && abort->isSet()) || (abort2 && abort2->isSet()); }
  // Aborted or past the deadline.
  bool over() const { return aborted() || deadline.expired(); }
};
// The error of a wait that ended by abort (ncclInvalidUsage: the user aborted
// the communicator) or timeout (ncclRemoteError), naming what it waited for.
Status waitEnded(const Wait& wait, const std::string& what);
// Sleeps up to `ms` in short slices; false if the wait ended meanwhile.
bool sleepWithin(const Wait& wait, int64_t ms);

// A listening TCP socket (non-blocking, close-on-exec) on `addr`; the bound
// address (with the chosen port) is returned in *bound.
Result<int> listenOn(const SockAddr& addr, SockAddr* bound, bool reuseAddr = false);
// Connects to `to`, retrying refused/unreachable attempts with NCCL's schedule
// (NCCL_SOCKET_RETRY_CNT attempts, the n-th after n * NCCL_SOCKET_RETRY_SLEEP_MSEC)
// within the deadline. `stillWanted`, when given, is asked before each retry and
// ends the attempts with its error. Returns a blocking, connected fd (TCP_NODELAY).
Result<int> connectTo(const SockAddr& to, const Wait& wait, const std::string& what,
                      const std::function<Status()>& stillWanted = nullptr);
// One connection attempt, closed at once: 0 when something accepted it, else
// the errno (ECONNREFUSED: nobody listens there any more).
int probeConnect(const SockAddr& to, int64_t timeoutMs);
// Accepts one pending connection on a non-blocking listen fd (-1 when none).
int acceptNonBlocking(int listenFd);

// Raises this process's soft limit on open files to its hard limit, once, as NVIDIA's library
// does at init: a rank holds a socket per peer and channel, and a root may face a flood.
void raiseOpenFileLimit();

Status sendAll(int fd, const void* data, size_t bytes, const Wait& wait, const std::string& what);
// Reads exactly `bytes`; the peer closing first is a remote error.
Status recvAll(int fd, void* data, size_t bytes, const Wait& wait, const std::string& what);
void setNonBlocking(int fd, bool on);
void closeFd(int* fd);

}  // namespace theseus::bootstrap
