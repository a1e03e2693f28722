// The C ABI boundary: the only place Theseus defines extern "C" functions.
//
// NCCL's entry points are defined with NCCL_API, which makes the strong symbol
// pncclX (the profiling interface) and the weak alias ncclX, both exported,
// exactly like NCCL's own library. Theseus' extension API
// (include/theseus/theseus.h) is defined with THESEUS_API (one exported
// symbol). Either body runs inside api::guard: no exception crosses the ABI,
// and an error Status becomes the return code plus the ncclGetLastError()
// text (logged as a WARN naming the function).
#pragma once

#include <exception>
#include <new>
#include <string>

#include "common/log.h"
#include "common/status.h"
#include "nccl.h"

#define NCCL_API(ret, name, ...)                                                                          \
  extern "C" __attribute__((visibility("default"))) ret p##name(__VA_ARGS__);                             \
  extern "C" __attribute__((visibility("default"), weak, alias("p" #name))) ret name(__VA_ARGS__);       \
  extern "C" __attribute__((visibility("default"))) ret p##name(__VA_ARGS__)

#define THESEUS_API(ret, name, ...) extern "C" __attribute__((visibility("default"))) ret name(__VA_ARGS__)

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

// The buffer protocol of theseus.h: *needed = strlen(text) + 1, and a
// truncated, NUL-terminated copy when `buffer` is too small.
Status copyOut(const std::string& text, char* buffer, size_t size, size_t* needed);

}  // namespace theseus::api

#define TH_API_GUARD(...) ::theseus::api::guard(__func__, [&]() -> ::theseus::Status __VA_ARGS__)
