// NCCL tuner plugins (NCCL_TUNER_PLUGIN, ncclTunerPlugin_v6 .. _v2) as an input
// of the policy.
//
// A user's tuner keeps working: Theseus loads it by NCCL's rules
// (common/nccl_plugins.h), runs its init for the communicator, and asks it
// what NCCL would ask - getCollInfo() with a cost table per collective and
// message size - then maps the cheapest cell to a decision:
//
//   cost table   float[7 algorithms][3 protocols], microseconds. Theseus
//                fills each cell an algorithm can serve (nccl_algorithms.h:
//                Tree, Ring, PAT; allowed by NCCL_ALGO and NCCL_PROTO) with
//                the alpha-beta estimate of the schedule it maps to
//                (schedule/user/cost_model.h; 5 us + 10 GB/s within a host,
//                20 us + 1.25 GB/s between hosts) and every other cell with
//                NCCL_ALGO_PROTO_IGNORE (-1). The plugin edits costs as it
//                would under NCCL; the smallest non-negative cell that maps
//                to a schedule wins (cells without one are skipped, with an
//                INFO line once).
//   nChannels    passed as 0; a value the plugin sets becomes the schedule's
//                `channels` (1..32).
//   chunkSize    v6 getChunkSize(), when present: called with the chosen cell
//                and Theseus' slice size (THESEUS_SLICE_BYTES); a changed value
//                becomes the decision's slice size (64 B..1 GiB).
//   protocol     recorded in the decision's reason; Theseus runs one protocol.
//   v2 tuners    pick (algorithm, protocol) directly; an undefined answer
//                keeps the cheapest cell of Theseus' estimates.
//
// Only the communicator's leader runs the tuner (NCCL runs it on every rank):
// its answers go into the decision table the epoch protocol ships, so every
// rank runs the same schedule for the same collective even when the tuner is
// not deterministic. The table samples getCollInfo() at every power of two
// from 1 B to 16 GiB of NCCL's nBytes (the larger of the send and receive
// buffer: count x size for allreduce, broadcast, reduce; x nranks for
// allgather and reducescatter); a size between two samples takes the lower
// one's choice. NCCL tunes only broadcast, reduce, allgather, reducescatter
// and allreduce, and so does this.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/plugin_library.h"
#include "common/status.h"
#include "policy/algo_filter.h"
#include "policy/decision_table.h"
#include "policy/nccl_tuner_abi.h"

namespace theseus::policy {

struct TunerContext {
  uint64_t commId = 0;        // the communicator's hash (NCCL passes its commHash)
  int nranks = 1;
  std::vector<int> hostOf;    // host index per rank; empty = one host
};

// What the tuner chose for one (collective, size).
struct TunerChoice {
  int algorithm = NCCL_ALGO_UNDEF;
  int protocol = NCCL_PROTO_UNDEF;
  int channels = 0;           // 0: the plugin did not set any
  size_t chunkBytes = 0;      // 0: unchanged
  std::string schedule;       // "" when no cell maps to a schedule
  float cost = -1;
};

class NcclTuner {
 public:
  static constexpr int kOldestVersion = 2;
  static constexpr int kNewestVersion = 6;

  // NCCL_TUNER_PLUGIN as NCCL reads it. Null when no tuner is configured or
  // found (unset and no libnccl-tuner.so; "none"). An error when one is named
  // but cannot be used: not found, no ncclTunerPlugin_vN symbol, only a newer
  // one, a NULL required function, init() failing. The message says which.
  static Result<std::unique_ptr<NcclTuner>> loadConfigured(const TunerContext& ctx);
  // The same for an explicit NCCL_TUNER_PLUGIN value.
  static Result<std::unique_ptr<NcclTuner>> load(const std::string& value, const TunerContext& ctx);
  ~NcclTuner();  // finalize()/destroy()
  NcclTuner(const NcclTuner&) = delete;
  NcclTuner& operator=(const NcclTuner&) = delete;

  const std::string& name() const { return name_; }
  int version() const { return version_; }
  // "NCCL tuner plugin 'example' v6 (/path/libnccl-tuner-example.so)".
  std::string describe() const;

  // One getCollInfo() round for `c` at NCCL's `nBytes`.
  Result<TunerChoice> choose(schedule::Collective c, uint64_t nBytes, const AlgoFilter& algos,
                             const AlgoFilter& protocols);
  // Its choices for every tuned collective, sampled at powers of two (above).
  // Collectives where no cell maps to a schedule are left out.
  Result<DecisionTable> table(const AlgoFilter& algos, const AlgoFilter& protocols);

 private:
  NcclTuner() = default;
  static Result<std::unique_ptr<NcclTuner>> open(const std::string& value, bool set, const TunerContext& ctx);
  struct Estimates;
  const Estimates& estimates(schedule::Collective c);

  std::unique_ptr<plugin::Library> library_;
  const void* descriptor_ = nullptr;
  int version_ = 0;
  std::string name_;
  void* context_ = nullptr;
  TunerContext ctx_;
  uint64_t sliceBytes_ = 0;
  std::vector<std::unique_ptr<Estimates>> estimates_;  // per collective, computed on first use
  std::set<std::string> noted_;                        // INFO lines said once
};

}  // namespace theseus::policy
