// The flight-recorder part of Theseus' extension API (include/theseus/theseus.h, section 5).
#include "api/guard.h"
#include "comm/collective_engine.h"
#include "comm/communicator.h"
#include "telemetry/flight_recorder.h"
#include "theseus/theseus.h"

THESEUS_API(ncclResult_t, theseusGetFlightRecorder, ncclComm_t comm, char* buffer, size_t size, size_t* needed) {
  return TH_API_GUARD({
    TH_ASSIGN(theseus::comm::Communicator * c, theseus::comm::fromHandle(comm));
    theseus::comm::CollectiveEngine* engine = c->engine();
    if (engine == nullptr)
      return theseus::invalidUsage("communicator %p is not ready (still initialising, failed or destroyed)",
                                   static_cast<void*>(comm));
    return theseus::api::copyOut(engine->flightRecorder().json("theseusGetFlightRecorder"), buffer, size, needed);
  });
}
