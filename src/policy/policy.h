// Policies: cluster-wide attributes in, a DecisionTable out.
//
// Only the communicator's leader runs a policy (the epoch protocol ships the
// resulting table to every rank and switches all of them at the same
// collective), so a policy may keep state between calls and need not be
// deterministic. The leader loop calls evaluate() every THESEUS_POLICY_INTERVAL_MS
// with the merged ClusterView, and starts a swap when the table it gets back
// differs from the current one (DecisionTable::sameDecisions). Policies handle
// hysteresis and dwell themselves: returning the current table means "no change".
//
// Kinds (load()):
//   "static"        built in: the size thresholds of default_selector, written
//                   in the policy language (the text of policies/static.json)
//   "<path>.json"   a JSON policy (json_policy.h, docs/policy-language.md)
//   "<path>.so[.N]" a C policy plugin (plugin_policy.h, include/theseus/policy_plugin.h)
// THESEUS_POLICY selects one; unset means "static".
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attrs/cluster_view.h"
#include "common/status.h"
#include "policy/decision_table.h"

namespace theseus::policy {

// Everything a policy may look at.
struct PolicyInput {
  const attrs::ClusterView* view = nullptr;  // the merged attributes; never null in decide()
  uint64_t nowNs = 0;                        // the leader's clock, the view's time base
  int nranks = 1;
  std::vector<int> hostOf;                   // host index of every rank; empty = all on one host
  std::vector<std::string> hostNames;        // attrs::hostLabel() of each host index (node.<host>.* names)
  std::vector<uint64_t> sizes;               // message sizes of interest (bytes), e.g. recently seen; may be empty
  const DecisionTable* current = nullptr;    // the table in effect, null before the first decision
  uint64_t currentAgeNs = 0;                 // how long `current` has been in effect

  int nnodes() const;
  int hostIndex(int rank) const { return hostOf.empty() ? 0 : hostOf[rank]; }
};

class Policy {
 public:
  virtual ~Policy() = default;
  // Short name: "static", the JSON policy's "name", the plugin's name.
  virtual const std::string& name() const = 0;
  // One line: kind, name and where it came from.
  virtual std::string describe() const = 0;
  // The table for the situation `in` describes (version 0: the epoch module
  // numbers tables). Called by one thread at a time.
  virtual Result<DecisionTable> decide(const PolicyInput& in) = 0;
  // Whether decisions depend on link measurements (slow_links, avoid_slow_links):
  // only then do ranks probe links they do not use (epoch/link_prober.h).
  virtual bool usesLinkMeasurements() const { return false; }
};

// The `why` of decisions a policy did not make itself but took from the static
// choice (a collective or size no rule matched). An NCCL tuner decides there.
extern const char* const kStaticChoiceWhy;

// Loads a policy by spec (above). Errors name the file and the problem.
Result<std::unique_ptr<Policy>> load(const std::string& spec);
// THESEUS_POLICY, "static" when unset.
std::string configuredSpec();

// Runs p.decide(in) and makes the table safe to ship:
//  * every decision must name a schedule that exists and serves its
//    collective at in.nranks, with parameters valid for in.nranks (an error
//    names the policy, the collective, the range and the problem);
//  * THESEUS_SCHEDULE overrides the policy where the forced schedule serves;
//  * collectives the policy left out get default_selector's choice.
Result<DecisionTable> evaluate(Policy& p, const PolicyInput& in);

// The static choice (default_selector) as a table: per collective one range
// up to THESEUS_SMALL_MSG_BYTES and one above it.
DecisionTable defaultTable(int nranks, int nnodes);

}  // namespace theseus::policy
