// The C boundary of Theseus' own extension API (include/theseus/): runs a
// body that returns a Status, lets no exception escape, logs a failure as a
// WARN and returns its ncclResult_t. (NCCL's entry points use api::guard,
// which also records ncclGetLastError's text.)
#pragma once

#include <exception>
#include <new>
#include <string>

#include "common/log.h"
#include "common/status.h"

namespace theseus {

template <typename Body>
ncclResult_t cBoundary(const char* function, Body&& body) noexcept {
  Status s;
  try {
    s = body();
  } catch (const std::bad_alloc&) {
    s = Status(ncclSystemError, "out of memory");
  } catch (const std::exception& e) {
    s = Status(ncclInternalError, std::string("unexpected exception: ") + e.what());
  } catch (...) {
    s = Status(ncclInternalError, "unexpected exception");
  }
  if (!s.isOk()) TH_WARN("%s: %s", function, s.message().c_str());
  return s.code();
}

}  // namespace theseus
