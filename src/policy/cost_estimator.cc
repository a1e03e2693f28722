#include "policy/cost_estimator.h"

#include <algorithm>

#include "attrs/pattern.h"
#include "policy/decision_check.h"
#include "schedule/builtins.h"
#include "schedule/user/user_schedules.h"

namespace theseus::policy {
namespace {

constexpr double kDefaultGBps = 10.0;
constexpr double kDefaultAlphaUs = 5.0;

double median(std::vector<double> v, double fallback) {
  if (v.empty()) return fallback;
  const size_t m = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + m, v.end());
  const double hi = v[m];
  if (v.size() % 2) return hi;
  return (*std::max_element(v.begin(), v.begin() + m) + hi) / 2;
}

}  // namespace

Result<double> CostEstimator::timeUs(const std::string& name, schedule::Collective c, int nranks,
                                     const std::vector<int>& hostOf, const schedule::ScheduleParams& params,
                                     uint64_t bytes, const schedule::user::LinkParams& link) {
  std::string key = name + "|" + std::to_string(static_cast<int>(c)) + "|" + std::to_string(nranks) + "|" +
                    params.toString() + "|";
  for (int h : hostOf) key += std::to_string(h) + ",";
  auto it = programs_.find(key);
  if (it == programs_.end()) {
    schedule::GenerateRequest req;
    req.collective = c;
    req.nranks = nranks;
    req.params = params;
    req.hostOf = hostOf;
    Result<schedule::Program> program = schedule::isBuiltin(name) ? schedule::generateBuiltin(name, req)
                                                                   : schedule::user::generate(name, req);
    if (!program.isOk()) return program.status().withContext("cost estimate: " + name);
    if (programs_.size() >= kMaxPrograms) programs_.clear();
    it = programs_.emplace(key, std::make_shared<const schedule::Program>(program.take())).first;
  }
  const uint32_t blocks = std::max(schedule::inputBlocks(c, nranks), schedule::outputBlocks(c, nranks));
  TH_ASSIGN(schedule::user::CostEstimate est, schedule::user::estimateCost(*it->second, bytes / blocks, link));
  return est.timeUs;
}

schedule::user::LinkParams verdictLinkModel(const PolicyInput& in, const LinkCosts& costs, uint64_t maxAgeNs,
                                            double slowRatio) {
  const int n = costs.nranks;
  const std::vector<int>& hostOf = costs.hostOf;
  std::vector<double> probes, between, within, latency;
  int a, b;
  auto collect = [&](const char* pattern, auto&& into) {
    auto p = attrs::Pattern::compile(pattern);
    if (!p.isOk()) return;
    in.view->forEach(p.value(), in.nowNs, maxAgeNs, [&](const std::string& name, const attrs::ViewEntry& e) {
      if (parseLinkName(name, n, &a, &b) && e.value > 0) into(e.value);
    });
  };
  collect("link.*.*.probe_gbps", [&](double v) { probes.push_back(v); });
  collect("link.*.*.gbps", [&](double v) { (hostOf[a] == hostOf[b] ? within : between).push_back(v); });
  collect("link.*.*.latency_us", [&](double v) { latency.push_back(v); });
  const double betweenGBps = probes.empty() ? median(between, kDefaultGBps) : median(probes, kDefaultGBps);
  const double withinGBps = median(within, betweenGBps);
  // Every slow link at the median slowness of the slow links.
  std::vector<double> slowOnes;
  for (double s : costs.slowness)
    if (s > 1.0 / slowRatio) slowOnes.push_back(s);
  const double slowness = median(slowOnes, 1.0);
  schedule::user::LinkParams link;
  link.alphaUs = median(latency, kDefaultAlphaUs);
  link.betaGBps = betweenGBps;
  link.linkGBps.assign(static_cast<size_t>(n) * n, 0.0);
  bool severalHosts = false;
  for (int x = 0; x < n; ++x) {
    for (int y = 0; y < n; ++y) {
      if (x == y) continue;
      const bool sameHost = hostOf[x] == hostOf[y];
      severalHosts = severalHosts || !sameHost;
      link.linkGBps[static_cast<size_t>(x) * n + y] = (sameHost ? withinGBps : betweenGBps) / (costs.at(x, y) > 1.0 / slowRatio ? slowness : 1.0);
    }
  }
  if (severalHosts) link.portOf = hostOf;
  return link;
}

}  // namespace theseus::policy
