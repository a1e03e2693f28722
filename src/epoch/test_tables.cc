#include "epoch/test_tables.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "schedule/builtins.h"

namespace theseus::epoch {
namespace {

using schedule::Collective;

struct Caps {
  bool order, bidirectional, pipeline;
};

// Which parameters each built-in accepts (schedule/builtins.cc validates the same).
Caps capsOf(const std::string& name) {
  if (name == "ring") return {true, true, true};
  if (name == "tree" || name == "double_binary_tree") return {true, false, true};
  if (name == "hierarchical") return {false, false, true};
  return {false, false, false};
}

constexpr Collective kCollectives[] = {Collective::kBroadcast,     Collective::kReduce,   Collective::kAllGather,
                                       Collective::kReduceScatter, Collective::kAllReduce, Collective::kAlltoAll,
                                       Collective::kScatter,       Collective::kGather};

policy::Decision randomDecision(std::mt19937_64& rng, Collective c, int nranks, const RandomTableLimits& limits) {
  std::vector<std::string> names;
  for (const auto& n : schedule::builtinNames())
    if (n != "hierarchical" && schedule::builtinSupports(n, c, nranks)) names.push_back(n);
  policy::Decision d;
  d.schedule = names[rng() % names.size()];
  Caps caps = capsOf(d.schedule);
  if (caps.order && nranks > 1 && rng() % 2 == 0) {
    d.params.order.resize(nranks);
    std::iota(d.params.order.begin(), d.params.order.end(), 0);
    std::shuffle(d.params.order.begin(), d.params.order.end(), rng);
  }
  d.params.channels = 1 + static_cast<int>(rng() % static_cast<uint64_t>(std::max(1, limits.maxChannels)));
  if (caps.bidirectional && d.params.channels > 1) d.params.bidirectional = rng() % 2 == 0;
  if (caps.pipeline && rng() % 2 == 0) d.params.pipelineChunks = 1 + static_cast<int>(rng() % 8);
  static constexpr uint64_t kSlices[] = {0, 4096, 16384, 65536, 131072};
  uint64_t slice = kSlices[rng() % (sizeof(kSlices) / sizeof(kSlices[0]))];
  d.sliceBytes = std::min(slice, limits.maxSliceBytes / 64 * 64);
  d.why = "random test table";
  return d;
}

}  // namespace

policy::DecisionTable randomTable(uint64_t seed, uint64_t version, int nranks, const RandomTableLimits& limits) {
  std::seed_seq seq{seed, version, static_cast<uint64_t>(nranks)};
  std::mt19937_64 rng(seq);
  policy::DecisionTable t;
  static constexpr uint64_t kCuts[] = {256, 4096, 65536, 1 << 20};
  for (Collective c : kCollectives) {
    // 1..3 ranges: pick distinct cut points, sorted.
    std::vector<uint64_t> cuts;
    int nranges = 1 + static_cast<int>(rng() % 3);
    while (static_cast<int>(cuts.size()) < nranges - 1) {
      uint64_t cut = kCuts[rng() % 4];
      if (std::find(cuts.begin(), cuts.end(), cut) == cuts.end()) cuts.push_back(cut);
    }
    std::sort(cuts.begin(), cuts.end());
    uint64_t lo = 0;
    for (size_t i = 0; i <= cuts.size(); ++i) {
      uint64_t hi = i < cuts.size() ? cuts[i] - 1 : UINT64_MAX;
      // Every range is valid by construction; add() cannot fail here.
      (void)t.add(c, lo, hi, randomDecision(rng, c, nranks, limits));
      lo = hi + 1;
    }
  }
  t.setVersion(version);
  return t;
}

}  // namespace theseus::epoch
