#include "transport/socket/socket_io.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace theseus::transport {

Status configureDataSocket(int fd, int sendBuf, int recvBuf) {
  int one = 1;
  // TCP_NODELAY fails harmlessly on non-TCP sockets (tests use socketpairs).
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (sendBuf > 0) (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sendBuf, sizeof(sendBuf));
  if (recvBuf > 0) (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &recvBuf, sizeof(recvBuf));
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return errnoStatus(errno, "fcntl(O_NONBLOCK)");
  return Status::ok();
}

namespace {

// Waits until `fd` is ready for `events`, in slices so abort/cancel are noticed.
Status waitReady(int fd, short events, Deadline deadline, const AbortFlag* abort, const std::atomic<bool>* cancel,
                 const char* what) {
  for (;;) {
    if (abort != nullptr && abort->isSet()) return remoteError("%s: aborted", what);
    if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) return internalError("%s: cancelled", what);
    if (deadline.expired()) return timeoutError("%s: timed out", what);
    struct pollfd p = {fd, events, 0};
    int rc = poll(&p, 1, static_cast<int>(deadline.remainingMs(50)));
    if (rc > 0) return Status::ok();
    if (rc < 0 && errno != EINTR) return errnoStatus(errno, "%s: poll", what);
  }
}

}  // namespace

Status writeFully(int fd, const void* data, size_t bytes, Deadline deadline, const AbortFlag* abort,
                  const char* what) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = send(fd, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      TH_CHECK(waitReady(fd, POLLOUT, deadline, abort, nullptr, what));
      continue;
    }
    return errnoStatus(errno, "%s", what);
  }
  return Status::ok();
}

Status readFully(int fd, void* data, size_t bytes, Deadline deadline, const AbortFlag* abort,
                 const std::atomic<bool>* cancel, const char* what) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = recv(fd, p, bytes, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return remoteError("%s: the peer closed the connection", what);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      TH_CHECK(waitReady(fd, POLLIN, deadline, abort, cancel, what));
      continue;
    }
    return errnoStatus(errno, "%s", what);
  }
  return Status::ok();
}

IoResult sendSome(int fd, const struct iovec* iov, int iovcnt, size_t* done, int* err) {
  struct msghdr msg;
  memset(&msg, 0, sizeof(msg));
  msg.msg_iov = const_cast<struct iovec*>(iov);
  msg.msg_iovlen = static_cast<size_t>(iovcnt);
  for (;;) {
    ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      *done = static_cast<size_t>(n);
      return IoResult::kProgress;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return IoResult::kWouldBlock;
    *err = errno;
    return (errno == EPIPE || errno == ECONNRESET) ? IoResult::kClosed : IoResult::kError;
  }
}

IoResult recvSome(int fd, void* data, size_t bytes, size_t* done, int* err) {
  for (;;) {
    ssize_t n = recv(fd, data, bytes, MSG_DONTWAIT);
    if (n > 0) {
      *done = static_cast<size_t>(n);
      return IoResult::kProgress;
    }
    if (n == 0) {
      *err = 0;
      return IoResult::kClosed;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return IoResult::kWouldBlock;
    *err = errno;
    return errno == ECONNRESET ? IoResult::kClosed : IoResult::kError;
  }
}

StripePart stripePart(uint64_t bytes, uint32_t nsocks, uint64_t stripeMinBytes, uint32_t index) {
  if (nsocks <= 1 || bytes < stripeMinBytes) return index == 0 ? StripePart{0, bytes} : StripePart{0, 0};
  uint64_t per = (bytes + nsocks - 1) / nsocks;
  per = (per + 4095) / 4096 * 4096;
  uint64_t begin = std::min<uint64_t>(bytes, per * index);
  uint64_t end = std::min<uint64_t>(bytes, begin + per);
  return {begin, end - begin};
}

Result<RingMemory> allocRing(size_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, bytes) != 0 || p == nullptr)
    return errorStatus(ncclSystemError, "cannot allocate %zu bytes for a socket ring", bytes);
  memset(p, 0, bytes);  // pre-fault: the first messages should not pay for page faults
  return RingMemory(static_cast<char*>(p));
}

}  // namespace theseus::transport
