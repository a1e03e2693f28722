// One rank's flight-recorder dump (telemetry/flight_recorder.h's JSON, format
// 1), parsed and checked for theseus-doctor. Every field is validated; an
// error names the dump, the JSON path and the problem
// ("fr.3: entries[4].seq: expected an unsigned integer, got \"x\"").
// Fields added after the first version (host_of, peers, attributes,
// created_ns) are optional: older dumps still parse, with less evidence.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "attrs/attribute_store.h"
#include "common/status.h"

namespace theseus::doctor {

struct DumpOp {
  uint64_t seq = 0;
  std::string op, dtype, state, waiting, error;
  std::string memory, executor;  // its buffers' kinds and what ran it ("" when the dump does not say)
  uint64_t count = 0, startNs = 0, endNs = 0;
  bool collective = true;  // not a group of point-to-point operations
};

// A peer's transport counters since the connections opened (transport::PeerStats).
struct PeerCounters {
  int peer = -1;
  uint64_t bytesSent = 0, sendBusyNs = 0, linkBusyNs = 0, bytesReceived = 0, recvWaitNs = 0;
};

struct RankDump {
  std::string source;  // where it came from (a file name), for messages
  int rank = -1;
  int nranks = 0;
  std::string comm, host, reason;
  uint64_t nowNs = 0, createdNs = 0;
  std::vector<DumpOp> ops;  // oldest first
  std::vector<int> hostOf;  // empty when the dump does not say
  std::vector<PeerCounters> peers;
  std::optional<attrs::Snapshot> attributes;
};

Result<RankDump> parseDump(const nlohmann::json& j, const std::string& source);

}  // namespace theseus::doctor
