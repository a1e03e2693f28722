// The kernel's view of a TCP connection's path (TCP_INFO), for link
// measurements that a user-space send queue cannot give: a sender's queue
// drains into the socket buffer at memory speed, however slow the link behind
// it is (transport.h, PeerStats::linkBusyNs).
#pragma once

#include <cstdint>

namespace theseus::transport {

struct TcpPathStats {
  // Microseconds with data in flight, less those limited by the peer's receive
  // window (a receiver that does not read is not the path's fault). The kernel
  // counts in jiffies: a few milliseconds of resolution.
  uint64_t pathBusyUs = 0;
};

// False when `fd` is not a TCP socket (tests use socket pairs) or the kernel
// does not report these fields (before Linux 4.10).
bool readTcpPathStats(int fd, TcpPathStats* out);

}  // namespace theseus::transport
