// Small socket helpers shared by the TCP transport's send and receive sides.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "common/deadline.h"
#include "common/status.h"

namespace theseus::transport {

// Non-blocking, TCP_NODELAY, optional buffer sizes (-1: leave the kernel's autotuning).
Status configureDataSocket(int fd, int sendBuf, int recvBuf);

// Blocking-style full read/write on a socket of either mode, bounded by the
// deadline, the abort flag and `cancel`; `what` names the operation in errors.
Status writeFully(int fd, const void* data, size_t bytes, Deadline deadline, const AbortFlag* abort,
                  const char* what);
Status readFully(int fd, void* data, size_t bytes, Deadline deadline, const AbortFlag* abort,
                 const std::atomic<bool>* cancel, const char* what);

// Outcome of one non-blocking transfer attempt.
enum class IoResult { kProgress, kWouldBlock, kClosed, kError };
// One sendmsg/readv; `*done` receives the bytes moved; `*err` errno on kError.
IoResult sendSome(int fd, const struct iovec* iov, int iovcnt, size_t* done, int* err);
IoResult recvSome(int fd, void* data, size_t bytes, size_t* done, int* err);

// The part of a `bytes` message that socket `index` of `nsocks` carries.
struct StripePart {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};
StripePart stripePart(uint64_t bytes, uint32_t nsocks, uint64_t stripeMinBytes, uint32_t index);

// Page-aligned, pre-faulted heap memory for socket rings.
struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};
using RingMemory = std::unique_ptr<char, FreeDeleter>;
Result<RingMemory> allocRing(size_t bytes);

}  // namespace theseus::transport
