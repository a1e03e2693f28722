// Predicted times of schedules for policies: the alpha-beta cost model
// (schedule/user/cost_model.h) run on the real program of a schedule, and the
// link model a JSON policy's `fastest` rules predict with.
//
// Programs are generated once per (schedule, collective, rank count, hosts,
// parameters) and kept (at most kMaxPrograms; the cache starts over past that),
// so a leader that evaluates the same candidates every policy interval pays
// for the simulation only. Sizes are NCCL's larger buffer (the table's axis);
// the model wants one block, so they are divided by the collective's blocks.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "policy/policy.h"
#include "policy/ring_order.h"
#include "schedule/ir.h"
#include "schedule/user/cost_model.h"

namespace theseus::policy {

class CostEstimator {
 public:
  static constexpr size_t kMaxPrograms = 256;

  Result<double> timeUs(const std::string& schedule, schedule::Collective c, int nranks, const std::vector<int>& hostOf,
                        const schedule::ScheduleParams& params, uint64_t bytes, const schedule::user::LinkParams& link);

 private:
  std::map<std::string, std::shared_ptr<const schedule::Program>> programs_;
};

// The link model of the link verdicts (`costs`, host health applied). The usual
// bandwidth between hosts is the median of the fresh link.*.*.probe_gbps (the
// probes measure the path itself; a TCP sender's own throughput can be its
// kernel buffer's), else of link.*.*.gbps between hosts; within a host the
// median of link.*.*.gbps within hosts; 10 GB/s where nothing is measured.
// Links that are not slow (ring_order.h) get their usual bandwidth, slow ones
// that over the median slowness of all slow links: which links are slow is the
// verdicts' finding, their magnitudes scatter (two measurements of one shaped
// link 8x and 64x), and predictions that followed them would change choices
// for nothing. Latency is the median link.*.*.latency_us (5 us by default);
// with more than one host every host is a port (its NIC: cost_model.h).
schedule::user::LinkParams verdictLinkModel(const PolicyInput& in, const LinkCosts& costs, uint64_t maxAgeNs,
                                            double slowRatio);

}  // namespace theseus::policy
