#include "common/status.h"

#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace theseus {
namespace {

std::string vformat(const char* fmt, va_list args) {
  char stack[512];
  va_list copy;
  va_copy(copy, args);
  int n = vsnprintf(stack, sizeof(stack), fmt, copy);
  va_end(copy);
  if (n < 0) return fmt;
  if (static_cast<size_t>(n) < sizeof(stack)) return std::string(stack, n);
  std::string out(n, '\0');
  vsnprintf(out.data(), n + 1, fmt, args);
  return out;
}

}  // namespace

#define TH_DEFINE_STATUS_FN_(fn, code)     \
  Status fn(const char* fmt, ...) {        \
    va_list args;                          \
    va_start(args, fmt);                   \
    std::string msg = vformat(fmt, args);  \
    va_end(args);                          \
    return Status(code, std::move(msg));   \
  }

TH_DEFINE_STATUS_FN_(invalidArgument, ncclInvalidArgument)
TH_DEFINE_STATUS_FN_(invalidUsage, ncclInvalidUsage)
TH_DEFINE_STATUS_FN_(systemError, ncclSystemError)
TH_DEFINE_STATUS_FN_(internalError, ncclInternalError)
TH_DEFINE_STATUS_FN_(remoteError, ncclRemoteError)
TH_DEFINE_STATUS_FN_(timeoutError, ncclTimeout)
#undef TH_DEFINE_STATUS_FN_

Status errorStatus(ncclResult_t code, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string msg = vformat(fmt, args);
  va_end(args);
  return Status(code, std::move(msg));
}

Status errnoStatus(int errnum, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string msg = vformat(fmt, args);
  va_end(args);
  char buf[128];
  const char* text = strerror_r(errnum, buf, sizeof(buf));
  return Status(ncclSystemError, msg + ": " + text);
}

const char* resultName(ncclResult_t code) {
  switch (code) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    case ncclTimeout: return "ncclTimeout";
    default: return "?";
  }
}

}  // namespace theseus
