// Error handling of the nccl-tests-compatible harness.
//
// The harness is an NCCL *client*: it uses only the public NCCL API, so it has
// its own small Status instead of Theseus' internal one. A Status carries the
// process exit code the failure maps to (see ExitCode) and a message.
#pragma once

#include <string>
#include <utility>

#include "nccl.h"

namespace theseus::perf {

// Exit codes of every *_perf binary (documented in docs/benchmarking.md).
enum ExitCode : int {
  kExitOk = 0,
  kExitWrongResults = 1,  // -c found wrong values, or avg busbw < 0.9 * NCCL_TESTS_MIN_BW
  kExitError = 2,         // an NCCL/CUDA/system call failed
  kExitUsage = 3,         // bad command line or configuration
  kExitTimeout = 4,       // -T passed: communicators were aborted
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(int exitCode, std::string message) : exit_(exitCode), message_(std::move(message)) {}
  static Status ok() { return Status(); }

  bool isOk() const { return exit_ == kExitOk; }
  int exitCode() const { return exit_; }
  const std::string& message() const { return message_; }
  Status withContext(const std::string& context) const {
    return isOk() ? *this : Status(exit_, context + ": " + message_);
  }

 private:
  int exit_ = kExitOk;
  std::string message_;
};

Status errorf(int exitCode, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
Status usageError(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// A failed NCCL call: names the call and adds ncclGetErrorString and ncclGetLastError.
Status ncclCallError(ncclResult_t result, const char* call);

// printf into a std::string.
std::string strprintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace theseus::perf

#define PERF_CHECK(expr)                              \
  do {                                                \
    ::theseus::perf::Status perf_status_ = (expr);    \
    if (!perf_status_.isOk()) return perf_status_;    \
  } while (0)

#define PERF_NCCL(call)                                                        \
  do {                                                                         \
    ncclResult_t perf_nccl_r_ = (call);                                        \
    if (perf_nccl_r_ != ncclSuccess)                                           \
      return ::theseus::perf::ncclCallError(perf_nccl_r_, #call);              \
  } while (0)
