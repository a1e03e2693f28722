// Runtime attributes: named numbers that describe the running cluster.
//
// Every rank keeps an AttributeStore per communicator: link throughput and
// latency measured from its own transfers, how long it waited for each peer,
// device and NIC health, values an operator wrote into THESEUS_ATTRS_FILE or
// set through theseusSetAttribute. Each value remembers where it came from
// (Source), when it was written (steady clock of this process) and which rank
// wrote it. The naming conventions (link.<a>.<b>.gbps, rank.<r>.wait_us, ...)
// are documented in docs/attributes.md.
//
// Cost model. Probes do not write here per transfer: they update atomics in a
// ProbeSet (probes.h) and publish() them into the store off the hot path. The
// store itself is a mutex-protected map, touched by publishers, the external
// file poller, the C API and the snapshot builder - never by a collective.
//
// Snapshots. A Snapshot is what a rank ships to its communicator's leader: the
// entries with their age (not their timestamp: steady clocks of different
// hosts are not comparable; the leader turns ages back into its own
// timestamps) and the id of the write that set them (so the leader can tell
// a value it already has from a new measurement of the same value). serialize()/deserialize() give a compact, versioned JSON text;
// deserialize() validates everything (names, finite values, sizes), so a peer
// that sends garbage gets an error, never a crash.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace theseus::attrs {

enum class Source : uint8_t {
  kProbe = 0,   // measured by this library (probes.h, host_probes.h)
  kFile = 1,    // THESEUS_ATTRS_FILE (external_attributes.h)
  kApi = 2,     // theseusSetAttribute
  kMerged = 3,  // the leader's combination of several ranks' reports (cluster_view.h)
};
const char* sourceName(Source s);  // "probe", "file", "api", "merged"
bool parseSource(const std::string& text, Source* out);

constexpr size_t kMaxNameLength = 200;

// Names are 1..kMaxNameLength characters of dot-separated, non-empty
// components made of [A-Za-z0-9_:-]. The error says what is wrong and where.
Status checkName(const std::string& name);
// A host name as one name component: '.' and other characters outside
// [A-Za-z0-9_:-] become '_' ("node1.cluster.org" -> "node1_cluster_org").
std::string hostLabel(const std::string& hostname);

struct Attribute {
  double value = 0;
  Source source = Source::kProbe;
  uint64_t timestampNs = 0;  // nowNs() of the process holding the value
  int rank = -1;             // the rank that wrote or measured it
  uint64_t writeId = 0;      // which write of this store set it (unique, increasing)
};

struct SnapshotEntry {
  std::string name;
  double value = 0;
  Source source = Source::kProbe;
  uint64_t ageNs = 0;    // how old the value was when the snapshot was taken
  int rank = -1;         // the rank that wrote it (the reporting rank unless merged)
  uint64_t writeId = 0;  // Attribute::writeId: equal in two snapshots = the same measurement
};

struct Snapshot {
  static constexpr int kFormat = 1;
  static constexpr size_t kMaxEntries = 1u << 20;

  int rank = -1;                       // the reporting rank
  std::vector<SnapshotEntry> entries;  // sorted by name, names unique

  // {"format":1,"rank":r,"a":[["name",value,source,age_us,write_id(,rank)],...]}
  std::string serialize() const;
  // Validates the text completely; errors name the entry and the problem.
  static Result<Snapshot> deserialize(const std::string& text);
};

class AttributeStore {
 public:
  explicit AttributeStore(int rank = -1) : rank_(rank) {}
  AttributeStore(const AttributeStore&) = delete;
  AttributeStore& operator=(const AttributeStore&) = delete;

  // The rank recorded with values written from now on (set when the
  // communicator knows its rank).
  void setRank(int rank) { rank_.store(rank, std::memory_order_relaxed); }
  int rank() const { return rank_.load(std::memory_order_relaxed); }

  // Writes a value (timestamp: now, unless given). Fails on a bad name or a
  // value that is not finite, changing nothing.
  Status set(const std::string& name, double value, Source source);
  Status set(const std::string& name, double value, Source source, uint64_t timestampNs);
  // Removes a name; false when it was not set.
  bool clear(const std::string& name);
  std::optional<Attribute> get(const std::string& name) const;

  // Replaces every value of `source` by `values` in one step: names of that
  // source that are not in `values` disappear. Names are checked first; on a
  // bad name nothing changes. (The external file uses this.)
  Status replaceSource(Source source, const std::vector<std::pair<std::string, double>>& values);

  Snapshot snapshot() const;
  std::vector<std::pair<std::string, Attribute>> list() const;  // sorted by name
  size_t size() const;
  // Changes with every write or removal: a shipper can skip unchanged stores.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

 private:
  // Called with mu_ held; returns the new generation (the id of this write).
  uint64_t bump() { return generation_.fetch_add(1, std::memory_order_acq_rel) + 1; }

  mutable std::mutex mu_;
  std::map<std::string, Attribute> values_;
  std::atomic<int> rank_;
  std::atomic<uint64_t> generation_{0};
};

}  // namespace theseus::attrs
