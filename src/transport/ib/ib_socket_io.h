// The failover socket's small helpers (ib_failover.cc, ib_recovery.cc).
#pragma once

#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace theseus::transport::ib {

inline uint64_t nowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// One non-blocking transfer on the socket: bytes moved (0 when it would block), or an error.
inline Result<size_t> moveNow(int fd, void* buf, size_t bytes, bool sending, const char* what) {
  for (;;) {
    ssize_t n = sending ? ::send(fd, buf, bytes, MSG_NOSIGNAL | MSG_DONTWAIT) : ::recv(fd, buf, bytes, MSG_DONTWAIT);
    if (n > 0) return static_cast<size_t>(n);
    if (n == 0 && bytes > 0) return remoteError("the peer closed the connection while %s", what);
    if (n == 0) return size_t{0};
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return size_t{0};
    return errnoStatus(errno, "%s", what);
  }
}

}  // namespace theseus::transport::ib
