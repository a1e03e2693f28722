// Version, error strings, last error, debug reset.
#include <algorithm>
#include <cstring>

#include "api/guard.h"
#include "common/log.h"

namespace theseus::api {

void reportFailure(const char* function, const Status& status) {
  // Strip the "p" of the profiling alias for readability.
  const char* name = (function[0] == 'p' && function[1] == 'n') ? function + 1 : function;
  const std::string& msg = status.message();
  if (msg.compare(0, strlen(name), name) == 0)  // already says where
    TH_WARN("%s", msg.c_str());
  else
    TH_WARN("%s: %s", name, msg.c_str());
}

Status copyOut(const std::string& text, char* buffer, size_t size, size_t* needed) {
  if (needed == nullptr) return invalidArgument("needed is NULL");
  if (buffer == nullptr && size > 0) return invalidArgument("buffer is NULL but size is %zu", size);
  *needed = text.size() + 1;
  if (size > 0) {
    size_t n = std::min(size - 1, text.size());
    memcpy(buffer, text.data(), n);
    buffer[n] = 0;
  }
  return Status::ok();
}

}  // namespace theseus::api

NCCL_API(ncclResult_t, ncclGetVersion, int* version) {
  return TH_API_GUARD({
    if (version == nullptr) return theseus::invalidArgument("version is NULL");
    *version = NCCL_VERSION_CODE;
    return theseus::Status::ok();
  });
}

NCCL_API(const char*, ncclGetErrorString, ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    case ncclTimeout: return "timeout";
    default: return "unknown result code";
  }
}

NCCL_API(const char*, ncclGetLastError, ncclComm_t comm) { return theseus::log::lastError(); }

NCCL_API(void, ncclResetDebugInit) { theseus::log::resetFromEnv(); }

// NCCL exports this helper too (the symbol set must match); same behaviour.
extern "C" __attribute__((visibility("default"))) void ncclResetDebugInitInternal() {
  theseus::log::resetFromEnv();
}
