// The decision-log part of Theseus' extension API (include/theseus/theseus.h,
// section 3): what a communicator's epochs decided, and where its clock stands;
// and section 4, the communicator's timeout.
#include "api/guard.h"
#include "comm/collective_engine.h"
#include "comm/communicator.h"
#include "epoch/epoch_service.h"
#include "theseus/theseus.h"

namespace {

theseus::Result<theseus::comm::CollectiveEngine*> engineOf(ncclComm_t handle) {
  TH_ASSIGN(theseus::comm::Communicator * c, theseus::comm::fromHandle(handle));
  theseus::comm::CollectiveEngine* engine = c->engine();
  if (engine == nullptr || engine->epochs() == nullptr)
    return theseus::invalidUsage("communicator %p is not ready (still initialising, failed or destroyed)",
                                 static_cast<void*>(handle));
  return engine;
}

}  // namespace

THESEUS_API(ncclResult_t, theseusGetDecisionLog, ncclComm_t comm, char* buffer, size_t size, size_t* needed) {
  return TH_API_GUARD({
    TH_ASSIGN(theseus::comm::CollectiveEngine * engine, engineOf(comm));
    return theseus::api::copyOut(engine->epochs()->decisionLog().text(), buffer, size, needed);
  });
}

THESEUS_API(ncclResult_t, theseusGetDecisionTable, ncclComm_t comm, uint64_t* version, char* buffer, size_t size,
            size_t* needed) {
  return TH_API_GUARD({
    TH_ASSIGN(theseus::comm::CollectiveEngine * engine, engineOf(comm));
    std::shared_ptr<const theseus::epoch::Epoch> e = engine->epochs()->clock().epochFor(engine->nextSeq());
    TH_CHECK(theseus::api::copyOut(e->table.describe(), buffer, size, needed));
    if (version != nullptr) *version = e->version;
    return theseus::Status::ok();
  });
}

THESEUS_API(ncclResult_t, theseusGetEpochInfo, ncclComm_t comm, uint64_t* nextSeq, uint64_t* version,
            uint64_t* horizon) {
  return TH_API_GUARD({
    TH_ASSIGN(theseus::comm::CollectiveEngine * engine, engineOf(comm));
    uint64_t next = engine->nextSeq();
    if (nextSeq != nullptr) *nextSeq = next;
    if (version != nullptr) *version = engine->epochs()->clock().epochFor(next)->version;
    if (horizon != nullptr) *horizon = engine->epochs()->clock().horizon();
    return theseus::Status::ok();
  });
}

THESEUS_API(ncclResult_t, theseusCommSetTimeout, ncclComm_t comm, int64_t timeoutMs) {
  return TH_API_GUARD({
    TH_ASSIGN(theseus::comm::Communicator * c, theseus::comm::fromHandle(comm));
    if (timeoutMs < 0) return theseus::invalidArgument("timeoutMs %lld is negative", static_cast<long long>(timeoutMs));
    c->setTimeoutMs(timeoutMs);
    return theseus::Status::ok();
  });
}
