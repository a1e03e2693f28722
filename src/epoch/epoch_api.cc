// The decision-log part of the extension API (include/theseus/theseus.h,
// section 3). Like the attribute entry points, these live in the core library
// (not src/api) so unit tests can call them; no exception crosses the C ABI and
// an error becomes the return code plus a WARN (the ncclGetLastError() text).
#include <cstring>

#include "comm/communicator.h"
#include "comm/host_engine.h"
#include "common/log.h"
#include "common/c_boundary.h"
#include "theseus/theseus.h"

#define THESEUS_EXPORT extern "C" __attribute__((visibility("default")))

namespace theseus::epoch {
namespace {

Result<comm::HostEngine*> engineOf(ncclComm_t handle) {
  TH_ASSIGN(comm::Communicator * c, comm::fromHandle(handle));
  auto* engine = dynamic_cast<comm::HostEngine*>(c->engine());
  if (engine == nullptr || engine->epochs() == nullptr)
    return invalidUsage("communicator %p is not ready (still initialising, failed or destroyed)",
                        static_cast<void*>(handle));
  return engine;
}

// The buffer protocol of theseus.h: *needed = length + 1; a truncated, NUL-terminated copy.
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

}  // namespace
}  // namespace theseus::epoch

namespace ep = theseus::epoch;

THESEUS_EXPORT ncclResult_t theseusGetDecisionLog(ncclComm_t comm, char* buffer, size_t size, size_t* needed) {
  return theseus::cBoundary(__func__, [&]() -> theseus::Status {
    TH_ASSIGN(theseus::comm::HostEngine * engine, ep::engineOf(comm));
    return ep::copyOut(engine->epochs()->decisionLog().text(), buffer, size, needed);
  });
}

THESEUS_EXPORT ncclResult_t theseusGetDecisionTable(ncclComm_t comm, uint64_t* version, char* buffer, size_t size,
                                                    size_t* needed) {
  return theseus::cBoundary(__func__, [&]() -> theseus::Status {
    TH_ASSIGN(theseus::comm::HostEngine * engine, ep::engineOf(comm));
    std::shared_ptr<const ep::Epoch> e = engine->epochs()->clock().epochFor(engine->nextSeq());
    TH_CHECK(ep::copyOut(e->table.describe(), buffer, size, needed));
    if (version != nullptr) *version = e->version;
    return theseus::Status::ok();
  });
}

THESEUS_EXPORT ncclResult_t theseusGetEpochInfo(ncclComm_t comm, uint64_t* nextSeq, uint64_t* version,
                                                uint64_t* horizon) {
  return theseus::cBoundary(__func__, [&]() -> theseus::Status {
    TH_ASSIGN(theseus::comm::HostEngine * engine, ep::engineOf(comm));
    uint64_t next = engine->nextSeq();
    if (nextSeq != nullptr) *nextSeq = next;
    if (version != nullptr) *version = engine->epochs()->clock().epochFor(next)->version;
    if (horizon != nullptr) *horizon = engine->epochs()->clock().horizon();
    return theseus::Status::ok();
  });
}
