// The C ABI boundary. Every entry point is defined with NCCL_API, which makes
// the strong symbol pncclX (the profiling interface) and the weak alias ncclX,
// both exported, exactly like NCCL's own library. Its body runs inside
// apiGuard: no exception crosses the ABI, and an error Status becomes the
// return code plus the ncclGetLastError() text (logged as a WARN).
#pragma once

#include <exception>
#include <new>

#include "common/log.h"
#include "common/status.h"
#include "nccl.h"

#define NCCL_API(ret, name, ...)                                                                          \
  extern "C" __attribute__((visibility("default"))) ret p##name(__VA_ARGS__);                             \
  extern "C" __attribute__((visibility("default"), weak, alias("p" #name))) ret name(__VA_ARGS__);       \
  extern "C" __attribute__((visibility("default"))) ret p##name(__VA_ARGS__)

namespace theseus::api {

// Records and logs a failed call. ncclInProgress is not an error.
void reportFailure(const char* function, const Status& status);

template <typename Body>
ncclResult_t guard(const char* function, Body&& body) noexcept {
  try {
    Status s = body();
    if (!s.isOk() && s.code() != ncclInProgress) reportFailure(function, s);
    return s.code();
  } catch (const std::bad_alloc&) {
    reportFailure(function, Status(ncclSystemError, "out of memory"));
    return ncclSystemError;
  } catch (const std::exception& e) {
    reportFailure(function, Status(ncclInternalError, std::string("unexpected exception: ") + e.what()));
    return ncclInternalError;
  } catch (...) {
    reportFailure(function, Status(ncclInternalError, "unexpected exception"));
    return ncclInternalError;
  }
}

}  // namespace theseus::api

#define TH_API_GUARD(body) ::theseus::api::guard(__func__, [&]() -> ::theseus::Status body)
