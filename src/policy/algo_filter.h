// NCCL_ALGO as a filter on schedule choice.
//
// Syntax (NCCL's): "[^]elem[,elem...][;func:[^]elem[,elem...]]...", e.g. "ring",
// "^nvls", "ring,tree;allreduce:tree". The first list may omit the function
// prefix and then applies to every collective; "^" means "all except". NCCL's
// algorithm names map onto Theseus schedules: Ring -> ring; Tree -> tree and
// double_binary_tree. Theseus schedule names are accepted too. Names with no
// host-memory equivalent (CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT) and
// unknown names are accepted and ignored with an INFO line.
#pragma once

#include <set>
#include <string>

#include "common/status.h"
#include "schedule/ir.h"

namespace theseus::policy {

class AlgoFilter {
 public:
  // Empty text: everything allowed.
  static Result<AlgoFilter> parse(const std::string& text);
  // The filter NCCL_ALGO describes (parsed once per process).
  static const AlgoFilter& fromEnv();

  bool allows(schedule::Collective c, const std::string& schedule) const;
  bool restricts(schedule::Collective c) const;

 private:
  struct Rule {
    bool set = false;
    bool invert = false;
    std::set<std::string> schedules;
  };
  Rule all_;
  Rule perCollective_[11];
};

}  // namespace theseus::policy
