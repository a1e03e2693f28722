// The program cache: one generated, analysed (and optionally verified)
// program per key, shared by every collective that uses it.
//
// Keys are built once, off the hot path (e.g. when a decision table is
// installed): ProgramKey::make() computes the hash, so a lookup hashes nothing,
// builds no string and allocates nothing; it takes a shared lock, probes the
// map and copies a shared_ptr. A miss generates + analyses the program exactly
// once per key even when several threads ask at the same time (the others wait
// for the first); a failure is cached too, so a bad key fails fast every time.
// The intended use keeps even that off the per-collective path: resolve the
// programs a decision table needs when the table is prepared (PREPARE of a
// swap), keep the shared_ptrs in the table, and let a collective just follow
// its entry's pointer.
//
// Built-in programs are verified only when THESEUS_VERIFY_BUILTINS=1 (the test
// suite verifies all of them); programs from an external generator (JSON
// schedules, plugins) are always verified before they can run.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "schedule/analysis.h"
#include "schedule/builtins.h"
#include "schedule/ir.h"

namespace theseus::schedule {

struct ProgramKey {
  std::string schedule;
  GenerateRequest request;
  size_t hash = 0;  // of everything above; set by make()

  static ProgramKey make(std::string schedule, GenerateRequest request);
  bool operator==(const ProgramKey& o) const;
  std::string toString() const;  // "ring(channels=2) allreduce nranks=8 root=0 in-place rank=3"
};

struct CachedProgram {
  Program program;               // with request.onlyRank >= 0 only that rank's steps are filled in
  std::vector<RankPlan> plans;   // per rank (empty for ranks not generated)
  bool verified = false;
};

// Makes programs for schedule names that are not built-ins.
using ProgramGenerator = std::function<Result<Program>(const std::string& schedule, const GenerateRequest& req)>;

class ProgramCache {
 public:
  struct Options {
    ProgramGenerator external;  // may be empty: built-ins only
    int verifyBuiltins = -1;    // -1: THESEUS_VERIFY_BUILTINS; 0/1 force
  };
  ProgramCache();
  explicit ProgramCache(Options options);

  Result<std::shared_ptr<const CachedProgram>> get(const ProgramKey& key);

  size_t size() const;
  // How many keys were generated so far (failures included).
  size_t generations() const { return generations_.load(std::memory_order_relaxed); }
  void clear();

 private:
  struct Entry {
    std::mutex mu;
    std::atomic<bool> ready{false};
    std::shared_ptr<const CachedProgram> value;
    Status error;
  };
  struct KeyHash {
    size_t operator()(const ProgramKey& k) const { return k.hash; }
  };

  static constexpr size_t kMaxEntries = 1024;
  Result<std::shared_ptr<const CachedProgram>> build(const ProgramKey& key);
  void evictUnusedLocked();  // mu_ held exclusively
  Result<Program> generate(const std::string& schedule, const GenerateRequest& req) const;

  Options options_;
  bool verifyBuiltins_;
  mutable std::shared_mutex mu_;
  std::unordered_map<ProgramKey, std::shared_ptr<Entry>, KeyHash> map_;
  std::atomic<size_t> generations_{0};
};

}  // namespace theseus::schedule
