// User-defined schedules: versioned JSON files, MSCCL-style XML algorithms and
// C schedule plugins, loaded into the one schedule IR (schedule/ir.h).
//
// Where they come from. THESEUS_SCHEDULES lists files and directories
// (separated by ',' or ':'); a directory contributes its *.json, *.xml and
// *.so files (not recursively), in name order. Everything is loaded once per
// process, on first use. A file that does not load is skipped with a WARN that
// names the file and the problem (JSON path, or rank + step); the other
// schedules stay available.
//
// How they are named. A JSON schedule by its "name" field, an MSCCL algorithm
// by its algo name (characters outside [A-Za-z0-9_.-] become '_'), a plugin
// by the name in its descriptor. A name may also be a path: "file:/abs/x.json"
// (or anything containing '/') loads that file on first use, so a policy can
// reference a file directly.
//
// How they run. The collective engine builds its ProgramCache with
// Options{.external = user::generate}; the cache verifies every program that
// comes through the external hook (verifier.h) before anything runs it, and
// caches the result, so a user schedule costs what a built-in costs once its
// program exists. JSON and XML files are verified for every program they
// contain already when they load, so a wrong file never becomes selectable.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "schedule/builtins.h"
#include "schedule/ir.h"

namespace theseus::schedule::user {

enum class SourceKind { kJson, kMscclXml, kPlugin };
const char* sourceKindName(SourceKind k);  // "json", "msccl-xml", "plugin"

// Which buffer layouts a fixed program is valid for.
enum class Layout { kOutOfPlace, kInPlace, kBoth };
const char* layoutName(Layout l);  // "out-of-place", "in-place", "both"

// What a loaded schedule says about itself (tools, logs, policies).
struct ScheduleInfo {
  std::string name;
  std::string path;               // the file it came from
  SourceKind kind = SourceKind::kJson;
  uint32_t collectives = 0;       // bit (1 << Collective) per collective it implements
  std::vector<int> rankCounts;    // fixed programs: the rank counts it has; empty = any (plugins)
  uint64_t minBytes = 0;          // size range it is meant for (a hint for policies)
  uint64_t maxBytes = UINT64_MAX;
  std::string description;
  uint64_t contentHash = 0;       // FNV-1a of the file's bytes: ranks can compare that they loaded the same file
};

// One loaded schedule. Thread-safe: generate() may be called concurrently.
class UserSchedule {
 public:
  virtual ~UserSchedule() = default;
  const ScheduleInfo& info() const { return info_; }
  const std::string& name() const { return info_.name; }
  virtual bool supports(Collective c, int nranks) const = 0;
  // Whether generate(req) has a program for this exact request (layout, root):
  // fixed programs may cover only some layouts; generators serve every request
  // of what they support.
  virtual bool serves(const GenerateRequest& req) const { return supports(req.collective, req.nranks); }
  // The program for the request (req.onlyRank >= 0: only that rank's steps
  // are filled in). Not verified here: the ProgramCache verifies it.
  virtual Result<Program> generate(const GenerateRequest& req) const = 0;

 protected:
  ScheduleInfo info_;
};
using ScheduleHandle = std::shared_ptr<const UserSchedule>;

// Loads one file by its extension (.json, .xml, .so / .so.N), with the full
// error text on failure. JSON and XML programs are verified here.
Result<ScheduleHandle> loadFile(const std::string& path);

// A set of loaded schedules by name. The process-wide one (below) is filled
// from THESEUS_SCHEDULES; tests and tools make their own.
class Registry {
 public:
  // Loads every file named by `spec` (THESEUS_SCHEDULES syntax). Returns one
  // error per file or entry that was skipped; the rest is registered.
  std::vector<Status> addSpec(const std::string& spec);
  // Registers a loaded schedule; fails when the name is taken (by a built-in
  // or an earlier file), leaving the first one in place.
  Status add(ScheduleHandle schedule);
  // By name, or by path ("file:/x.json", or a name containing '/'), loading
  // the file on first use (failures are remembered and reported every time).
  Result<ScheduleHandle> find(const std::string& name) const;
  std::vector<ScheduleHandle> all() const;  // in registration order

 private:
  Status addFile(const std::string& path);

  mutable std::mutex mu_;
  std::vector<ScheduleHandle> order_;
  std::unordered_map<std::string, ScheduleHandle> byName_;
  mutable std::unordered_map<std::string, Result<ScheduleHandle>> byPath_;
};

// The process-wide registry, loaded from THESEUS_SCHEDULES on first use
// (errors logged as WARN, bad files skipped).
Registry& processRegistry();

// The integration contract used by the collective engine and policies; all
// three use processRegistry().
bool knows(const std::string& name);
bool supports(const std::string& name, Collective c, int nranks);
bool serves(const std::string& name, const GenerateRequest& req);
// ProgramCache::Options::external. Picks the JSON/XML program for
// req.nranks / req.inPlace / req.root, or calls the plugin.
Result<Program> generate(const std::string& name, const GenerateRequest& req);

// Rules of the executor beyond what verifyProgram proves: today, that no step
// of a reducing collective reads a range that is partly the rank's raw input
// and partly partial results (the executor scales raw input exactly once for
// PreMulSum/avg). Checked with the executor's own template builder for every
// rank that has steps, so user schedules fail when they load (or in the
// ProgramCache's external hook), not on every call.
Status checkRunnable(const Program& p);

// A schedule name as users may write it: 1..128 characters of [A-Za-z0-9_.-],
// not a built-in's name.
Status checkScheduleName(const std::string& name);
// FNV-1a, 64 bit.
uint64_t fnv1a(const std::string& bytes);

}  // namespace theseus::schedule::user
