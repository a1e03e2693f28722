// DecisionTable: what a policy decided, in the form the hot path reads.
//
// For every collective, the message-size axis is cut into ranges, each with a
// Decision (schedule name + parameters + executor tuning). A table carries a
// version; the leader builds it, the epoch protocol delivers it to every rank
// and switches all ranks to it at the same collective sequence number, so a
// lookup is a pure function of (table, request): invariant 1 of ARCHITECTURE.md.
//
// A table may also move ranks' network traffic off their own NIC port
// (NicChoice): that takes effect at the same collective on every rank too.
//
// Lookup cost: one array index by collective and a short scan of sorted upper
// bounds (tables have a handful of ranges). No allocation, no strings.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "schedule/builtins.h"
#include "schedule/ir.h"

namespace theseus::policy {

struct Decision {
  std::string schedule;              // built-in or user schedule name (or "file:/path.json")
  schedule::ScheduleParams params;
  uint64_t sliceBytes = 0;           // executor slice size; 0 = THESEUS_SLICE_BYTES
  std::string why;                   // rule that produced it, for logs ("rule 2 'avoid slow links'")
  bool operator==(const Decision& o) const {
    return schedule == o.schedule && params == o.params && sliceBytes == o.sliceBytes;
  }
  std::string toString() const;     // "ring(order=0,2,1,3)"
};

// A policy's choice for the network port of one rank (its *home* port, the one
// the topology chose): traffic moves off it at the table's epoch boundary and
// back when a later table no longer says so (transport/ib/ib_comm.h, "Moves the
// policy asks for"). Ranks a table does not list stay on their home port.
struct NicChoice {
  enum Move : uint8_t {
    kStay = 0,      // the home port (what a table without an entry means)
    kOtherNic = 1,  // another port of the host when one is up, else stay: a slow port beats TCP
    kAnyPath = 2,   // another port of the host when one is up, else TCP
  };
  int rank = 0;
  Move move = kStay;
  std::string why;  // the rule that asked for it
  bool operator==(const NicChoice& o) const { return rank == o.rank && move == o.move; }
  static const char* moveName(Move m);  // "stay", "other_nic", "any"
};

class DecisionTable {
 public:
  static constexpr int kCollectives = 11;  // indexed by schedule::Collective values

  // Adds a range [minBytes, maxBytes] (inclusive) for a collective. Ranges of a
  // collective must not overlap; gaps fall back to the nearest range below.
  Status add(schedule::Collective c, uint64_t minBytes, uint64_t maxBytes, Decision d);

  // The decision for a request; nullptr when the table has nothing for `c`.
  const Decision* lookup(schedule::Collective c, uint64_t bytes) const {
    const auto& v = ranges_[static_cast<int>(c)];
    const Range* best = nullptr;
    for (const Range& r : v) {
      if (bytes >= r.minBytes) best = &r;
      else break;
    }
    if (best == nullptr && !v.empty()) best = &v.front();
    return best ? &best->decision : nullptr;
  }
  // Index of the range lookup() picks (stable id for caches), or -1.
  int rangeIndex(schedule::Collective c, uint64_t bytes) const;

  // NIC choices (only ranks that do not stay; sorted by rank, one entry per rank).
  Status addNicChoice(NicChoice choice);
  const std::vector<NicChoice>& nicChoices() const { return nics_; }
  NicChoice::Move nicMove(int rank) const;

  uint64_t version() const { return version_; }
  void setVersion(uint64_t v) { version_ = v; }
  bool sameDecisions(const DecisionTable& other) const;  // ignores version

  // Wire format for the control channel (JSON text; versioned).
  std::string serialize() const;
  static Result<DecisionTable> deserialize(const std::string& text);
  std::string describe() const;  // multi-line, for logs and tools

  struct Range {
    uint64_t minBytes = 0, maxBytes = UINT64_MAX;
    Decision decision;
  };
  const std::vector<Range>& ranges(schedule::Collective c) const { return ranges_[static_cast<int>(c)]; }

 private:
  uint64_t version_ = 0;
  std::vector<Range> ranges_[kCollectives];  // sorted by minBytes
  std::vector<NicChoice> nics_;               // sorted by rank
};

}  // namespace theseus::policy
