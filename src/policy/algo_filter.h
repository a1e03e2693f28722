// NCCL_ALGO as a filter on schedule choice.
//
// Syntax (NCCL's): "[^]elem[,elem...][;func:[^]elem[,elem...]]...", e.g. "ring",
// "^nvls", "ring,tree;allreduce:tree". The first list may omit the function
// prefix and then applies to every collective; "^" means "all except". NCCL's
// algorithm names map onto Theseus schedules: Ring -> ring; Tree -> tree and
// double_binary_tree, PAT -> recursive_doubling/halving_doubling (the table of
// nccl_algorithms.h). Theseus schedule names are accepted too. Names with no
// host-memory equivalent (CollNetDirect, CollNetChain, NVLS, NVLSTree) and
// unknown names are accepted and ignored with an INFO line.
//
// NCCL_PROTO has the same syntax over protocol names (LL, LL128, Simple); its
// filter limits the cells an NCCL tuner plugin may choose (nccl_tuner.h).
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
  // The same over protocol names; allows(c, "Simple").
  static Result<AlgoFilter> parseProtocols(const std::string& text);
  static const AlgoFilter& protocolsFromEnv();

  bool allows(schedule::Collective c, const std::string& schedule) const;
  bool restricts(schedule::Collective c) const;
  // "tree,double_binary_tree; allreduce: ring" ("all" when unrestricted).
  std::string describe() const;

 private:
  static Result<AlgoFilter> parseWith(const std::string& text, const char* variable,
                                      std::set<std::string> (*namesFor)(const std::string&));
  struct Rule {
    bool set = false;
    bool invert = false;
    std::set<std::string> schedules;
  };
  Rule all_;
  Rule perCollective_[11];
};

}  // namespace theseus::policy
