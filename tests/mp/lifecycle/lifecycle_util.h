// Helpers for the lifecycle API tests.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "nccl.h"
#include "scoped_env.h"

namespace lifecycle_test {

using theseus::test::ScopedEnv;

inline double secondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Polls ncclCommGetAsyncError from this thread until it is not ncclInProgress (or `ms` pass).
inline ncclResult_t waitAsync(ncclComm_t comm, int ms = 30000) {
  auto start = std::chrono::steady_clock::now();
  ncclResult_t r = ncclInProgress;
  while (secondsSince(start) * 1000 < ms) {
    if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) return ncclInternalError;
    if (r != ncclInProgress) return r;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return r;
}

inline ncclConfig_t nonBlockingConfig() {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.blocking = 0;
  return c;
}

// A free TCP port on 127.0.0.1 (for NCCL_COMM_ID).
// A loopback TCP port that was free a moment ago.
inline int freeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

}  // namespace lifecycle_test
