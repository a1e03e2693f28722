// TemplateMemo: a communicator's cache of what a collective needs before its
// buffers are known — the decision of the table in effect, the program (from
// the process-wide ProgramCache) and this rank's RankTemplate — keyed by
// (table version, collective, size range, root, in-place).
//
// Per collective, with nothing changing, a lookup is one hash probe; a miss
// builds the entry on the application thread and remembers the request's shape
// (at most kMaxShapes of them). When the leader announces a new table, the
// epoch thread builds the entries of every remembered shape under it
// (prepare(), touching no state of the application thread) and opens the
// connections they use; the application thread adopts them when the table
// takes effect, and drops entries of older tables at the next group, when no
// plan can still point into them.
//
// A decision whose schedule does not serve a call (a user schedule with
// out-of-place programs only, called in place; a forced THESEUS_SCHEDULE) is
// ignored for that call: the static choice runs it, and one INFO line says so.
#pragma once

#include <algorithm>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "epoch/epoch_clock.h"
#include "exec/rank_template.h"
#include "policy/decision_table.h"
#include "schedule/program_cache.h"

namespace theseus::transport {
class TransportManager;
}

namespace theseus::comm {

class TemplateMemo {
 public:
  struct Settings {
    int rank = 0;
    int nranks = 1;
    std::vector<int> hostOf;    // host index per rank (hierarchical schedules)
    size_t sliceBytes = 0;      // THESEUS_SLICE_BYTES
    size_t maxSliceBytes = 0;   // decisions' slice sizes are clamped to the smallest transport slot
    int maxChannels = 1;        // THESEUS_MAX_CHANNELS
    // Operations the device executor runs get this many channels (THESEUS_DEVICE_CHANNELS, capped by
    // maxChannels) from this size on, when their decision leaves a built-in at one (deviceParams).
    int deviceChannels = 1;
    size_t deviceChannelBytes = 0;
    // The channels of a device operation of `bytes` (1 below the threshold).
    int deviceChannelsFor(size_t bytes) const {
      return bytes < deviceChannelBytes ? 1 : std::max(1, std::min(deviceChannels, maxChannels));
    }
  };
  struct Request {
    schedule::Collective collective;
    size_t bytes;  // the larger of the input and output buffers
    int root;      // 0 for collectives without a root
    bool inPlace;
    bool device = false;  // the device executor runs it (its thread blocks run channels side by side)
  };
  struct Entry {
    std::shared_ptr<const schedule::CachedProgram> program;
    std::unique_ptr<exec::RankTemplate> tmpl;
    size_t sliceBytes = 0;  // the decision's slice size (or THESEUS_SLICE_BYTES)
  };

  explicit TemplateMemo(Settings s) : settings_(std::move(s)) {}
  const Settings& settings() const { return settings_; }

  // Application thread: the entry for `req` under `table` (version `version`).
  Result<const Entry*> find(const policy::DecisionTable& table, uint64_t version, const Request& req);
  // Epoch thread: the entries of every shape seen so far under the new table,
  // with the connections they use opened.
  Result<std::unique_ptr<epoch::Prepared>> prepare(const policy::DecisionTable& table, uint64_t version,
                                                   transport::TransportManager* transports);
  // Application thread: `version` took effect; its prepared entries join, older ones go at the next dropStale().
  void adopt(uint64_t version, std::unique_ptr<epoch::Prepared> prepared);
  // Application thread, between groups.
  void dropStale();
  // Message sizes seen so far (policy input), sorted, unique.
  std::vector<uint64_t> recentSizes();
  void clear();

 private:
  static constexpr size_t kMaxShapes = 256;  // request shapes remembered for PREPARE
  struct Key {
    uint64_t version;  // decision table version
    uint8_t collective, inPlace;
    uint8_t device;    // 0 host executor; device executor: 1 below Settings::deviceChannelBytes, 2 from it on
    int16_t range;     // DecisionTable::rangeIndex (< 0: the table leaves the collective out; -1 - size class)
    int32_t root;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return (k.version * 0x9e3779b97f4a7c15ull) ^ (size_t(k.collective) << 40) ^ (size_t(uint16_t(k.range)) << 24) ^
             (size_t(k.inPlace) << 56) ^ (size_t(k.device) << 57) ^ size_t(uint32_t(k.root));
    }
  };
  struct Warm;  // epoch::Prepared holding entries built by prepare()

  Key keyOf(const policy::DecisionTable& table, uint64_t version, const Request& req) const;
  // Builds an entry (either thread: touches no memo state but the log-once set).
  Result<Entry> build(const policy::DecisionTable& table, int range, const Request& req) const;
  // The decision's choice, or the static one when it does not serve the request.
  std::pair<std::string, schedule::ScheduleParams> choose(const policy::Decision* d, const Request& req) const;
  // Key::device of a request (the size range alone does not say whether it reaches deviceChannelBytes).
  uint8_t deviceClass(const Request& req) const;
  // The device executor's channels for a built-in choice (see Settings::deviceChannels).
  schedule::ScheduleParams deviceParams(const std::string& schedule, schedule::ScheduleParams params,
                                        const Request& req) const;

  Settings settings_;
  uint64_t floor_ = 0;  // entries of versions below this go at the next dropStale()
  std::unordered_map<Key, Entry, KeyHash> entries_;
  std::mutex shapesMu_;
  std::vector<Request> shapes_;
  mutable std::mutex loggedMu_;
  mutable std::set<std::tuple<std::string, int, bool, int>> logged_;  // fallbacks already reported
};

}  // namespace theseus::comm
