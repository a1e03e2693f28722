// Policy plugins: a C shared library behind include/theseus/policy_plugin.h.
//
// Loading (common/plugin_library.h): the newest descriptor symbol this
// library knows (theseusPolicyPlugin_v1). A library that exports only a
// newer symbol, a wrong struct_size or abi_version, a bad name or a NULL
// decide() is rejected with an error naming the file and the problem, and
// nothing of it is called. init() runs once; a failing init() fails the load.
//
// Calling. decide() gets the merged view as a sorted C array of attributes,
// the rank-to-host map, the sizes of interest and the current table, plus host
// services: schedule_supports, estimate_cost (the alpha-beta cost model of
// schedule/user/cost_model.h on the real program, with per-link parameters)
// and avoid_slow_links_order (ring_order.h). Its decisions are copied out and
// checked field by field (collective, NUL-terminated strings, parameters that
// parse, ranges that do not overlap); evaluate() (policy.h) then checks the
// schedules against the communicator.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/plugin_library.h"
#include "policy/cost_estimator.h"
#include "policy/policy.h"
#include "schedule/ir.h"
#include "theseus/policy_plugin.h"

namespace theseus::policy {

class PluginPolicy final : public Policy {
 public:
  static constexpr size_t kMaxDecisions = 1024;

  static Result<std::unique_ptr<PluginPolicy>> load(const std::string& path);
  ~PluginPolicy() override;

  const std::string& name() const override { return name_; }
  std::string describe() const override;
  bool usesLinkMeasurements() const override { return true; }  // it may ask for avoid_slow_links_order
  Result<DecisionTable> decide(const PolicyInput& in) override;

  // Host services (called back from the plugin during decide()).
  Status estimate(const PolicyInput& in, const std::string& schedule, const std::string& params, int collective,
                  uint64_t bytes, const theseusPolicyLinkModel_v1_t* model, double* timeUs);

 private:
  PluginPolicy() = default;
  Result<DecisionTable> convert(const theseusPolicyTable_v1_t& out) const;

  std::string path_;
  std::string name_;
  std::unique_ptr<plugin::Library> library_;
  const theseusPolicyPlugin_v1_t* plugin_ = nullptr;
  void* context_ = nullptr;
  std::mutex mu_;  // one call into the plugin at a time
  CostEstimator estimator_;  // estimate_cost's programs
};

}  // namespace theseus::policy
