// Built-in schedule generators and their registry.
//
// A generator turns a request (collective, rank count, root, buffer layout,
// parameters, host map) into a Program in the schedule IR (schedule/ir.h).
// Every collective is served by at least one built-in for every rank count
// >= 1; with one rank every generator emits a local copy (or nothing in place).
//
//   name                 collectives
//   ring                 allreduce allgather reducescatter broadcast reduce
//   tree                 allreduce broadcast reduce
//   double_binary_tree   allreduce broadcast reduce
//   recursive_doubling   allreduce allgather
//   halving_doubling     allreduce reducescatter
//   direct               every collective (alltoall, gather and scatter only here)
//   hierarchical         allreduce allgather broadcast      (uses hostOf)
//
// Each generator file starts with a comment describing its algorithm, when it
// is good and its cost in the alpha-beta model (alpha: per-message latency,
// beta: seconds per byte, n ranks, S bytes per rank block).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/status.h"
#include "schedule/ir.h"

namespace theseus::schedule {

// Parameters of a built-in. Hashable, comparable and printable (decision logs
// show toString()); parse() accepts what toString() prints.
struct ScheduleParams {
  std::vector<int> order;      // rank order of rings/chains/trees (a permutation); empty = identity
  int channels = 1;            // disjoint sub-chunk sets run on separate channels, 1..kMaxChannels
  bool bidirectional = false;  // ring: odd channels run the ring in the reverse direction
  int pipelineChunks = 0;      // chunks per block (per channel, per tree) of chains/trees; 0 = default

  static constexpr int kMaxChannels = 32;
  static constexpr int kMaxPipelineChunks = 64;
  static constexpr int kDefaultPipelineChunks = 4;

  // "" for the defaults, else e.g. "order=0,2,1,3;channels=2;bidirectional=1;pipeline=8".
  std::string toString() const;
  static Result<ScheduleParams> parse(const std::string& text);
  bool operator==(const ScheduleParams&) const = default;
  size_t hash() const;
};

struct GenerateRequest {
  Collective collective = Collective::kAllReduce;
  int nranks = 1;
  int root = 0;          // rooted collectives only
  bool inPlace = false;  // the in-place buffer layout (ir.h inPlaceAlias)
  ScheduleParams params;
  std::vector<int> hostOf;  // host index of every rank; empty = all ranks on one host
  // -1: programs for every rank (what the verifier needs). r >= 0: only rank r's
  // program is filled in (the others stay empty), which is all an executor needs
  // and keeps memory O(steps of one rank) for large communicators.
  int onlyRank = -1;
};

// "ring", "tree", "double_binary_tree", "recursive_doubling", "halving_doubling", "direct", "hierarchical".
const std::vector<std::string>& builtinNames();
bool isBuiltin(const std::string& name);
bool builtinSupports(const std::string& name, Collective c, int nranks);
// The program, or a clear error: unknown name, unsupported collective, bad
// parameters (order not a permutation, channels out of range, hostOf size...).
Result<Program> generateBuiltin(const std::string& name, const GenerateRequest& req);

}  // namespace theseus::schedule
