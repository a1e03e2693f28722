// Epoch protocol messages (bootstrap MsgType::kEpoch) and their wire format.
//
// Leader -> rank:  GRANT    the lease: collectives with seq < horizon may start;
//                           report progress once seq reaches reportAt
//                  PREPARE  a new decision table (version v) will take effect at
//                           the frozen horizon: build its programs, open its
//                           connections, then ACK
//                  COMMIT   table v takes effect at collective `effectiveSeq`;
//                           the new lease is `horizon`
//                  CANCEL   forget the prepared table v; leases resume
// Rank -> leader:  PROGRESS the rank reached collective `seq`
//                  ACK      table v is prepared (ok) or could not be (error text)
//
// Encoding: little-endian binary, a 4-byte header {magic 'E','P', format
// version, type} then the fields of the type; strings are a u32 length plus
// bytes. decode() validates the header, the type, every length and that
// nothing is left over, so a peer that speaks garbage (or another format
// version) produces an error naming the problem, never a crash or a guess.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace theseus::epoch {

enum class MsgKind : uint8_t {
  kGrant = 1,
  kPrepare = 2,
  kCommit = 3,
  kCancel = 4,
  kProgress = 5,
  kAck = 6,
};
const char* msgKindName(MsgKind k);

// Messages that flow leader -> rank (the others flow rank -> leader).
inline bool isLeaderToRank(MsgKind k) { return k == MsgKind::kGrant || k == MsgKind::kPrepare || k == MsgKind::kCommit || k == MsgKind::kCancel; }

struct EpochMsg {
  static constexpr uint8_t kFormat = 1;
  static constexpr size_t kMaxTextBytes = 64u << 20;

  MsgKind kind = MsgKind::kGrant;
  uint64_t version = 0;       // PREPARE, COMMIT, CANCEL, ACK: table version
  uint64_t horizon = 0;       // GRANT, COMMIT: the lease; PREPARE: the frozen horizon (= effective seq)
  uint64_t reportAt = 0;      // GRANT, COMMIT: report progress when seq reaches this
  uint64_t effectiveSeq = 0;  // COMMIT
  uint64_t seq = 0;           // PROGRESS
  bool ok = true;             // ACK
  std::string text;           // PREPARE: serialized table; ACK: error; CANCEL: why
  std::string reason;         // PREPARE: why the leader swaps (decision log)

  std::string encode() const;
  static Result<EpochMsg> decode(std::string_view bytes);
  std::string describe() const;  // "COMMIT v3 at seq 128 (lease 192)"
};

}  // namespace theseus::epoch
