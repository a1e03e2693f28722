// Status: the one internal error type. Its codes are ncclResult_t values, so an
// API entry point returns status.code() unchanged; the message becomes the
// process's ncclGetLastError() text when it crosses the C ABI.
#pragma once

#include <string>
#include <utility>

#include "nccl.h"

namespace theseus {

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ncclResult_t code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }

  bool isOk() const { return code_ == ncclSuccess; }
  explicit operator bool() const { return isOk(); }
  ncclResult_t code() const { return code_; }
  const std::string& message() const { return message_; }

  // Prefixes context ("while connecting to rank 3: ...") and keeps the code.
  Status withContext(const std::string& context) const {
    if (isOk()) return *this;
    return Status(code_, context + ": " + message_);
  }

 private:
  ncclResult_t code_ = ncclSuccess;
  std::string message_;
};

// Builds an error Status from printf-style arguments.
// The enumerator's name ("ncclInvalidUsage"), "?" for a code outside the enum.
const char* resultName(ncclResult_t code);
Status errorStatus(ncclResult_t code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
Status invalidArgument(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
Status invalidUsage(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
Status systemError(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
Status internalError(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
Status remoteError(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// A wait that ran past its limit (ncclTimeout). Callers whose header predates
// NCCL 2.30 do not know that code: comm/config.h's visibleTo() turns it into
// ncclRemoteError for them.
Status timeoutError(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// A system error that appends strerror(errnum).
Status errnoStatus(int errnum, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// A value or an error.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {}  // NOLINT(google-explicit-constructor)
  bool isOk() const { return status_.isOk(); }
  const Status& status() const { return status_; }
  T& value() { return value_; }
  const T& value() const { return value_; }
  T&& take() { return std::move(value_); }

 private:
  Status status_;
  T value_{};
};

}  // namespace theseus

// Propagate an error Status to the caller.
#define TH_CHECK(expr)                                  \
  do {                                                  \
    ::theseus::Status th_status_ = (expr);              \
    if (!th_status_.isOk()) return th_status_;          \
  } while (0)

// Evaluate a Result<T>, propagate its error, else move the value into `lhs`
// (which may declare a variable). Several statements: brace it under an `if`.
#define TH_ASSIGN(lhs, expr)                            \
  auto TH_CONCAT_(th_result_, __LINE__) = (expr);       \
  if (!TH_CONCAT_(th_result_, __LINE__).isOk())         \
    return TH_CONCAT_(th_result_, __LINE__).status();   \
  lhs = TH_CONCAT_(th_result_, __LINE__).take()

// A failing system call (returns -1 and sets errno) becomes a system error.
#define TH_SYSCHECK(call, what)                                            \
  do {                                                                     \
    if ((call) == -1) return ::theseus::errnoStatus(errno, "%s", (what));  \
  } while (0)

#define TH_CONCAT_INNER_(a, b) a##b
#define TH_CONCAT_(a, b) TH_CONCAT_INNER_(a, b)
