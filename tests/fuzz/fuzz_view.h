// Cluster views the policy fuzz targets evaluate against: the situations the
// leader meets (one rank alone; a 4-rank, 2-host job with a slow link, an
// unhealthy NIC and a straggler; 13 ranks on 3 hosts, past the exact ring
// search), so conditions, ring orders and straggler roots all have data.
#pragma once

#include <string>
#include <vector>

#include "attrs/cluster_view.h"
#include "policy/policy.h"

namespace theseus::fuzz {

constexpr uint64_t kSecond = 1000000000ull;

struct Scenario {
  attrs::ClusterView view;
  int nranks = 1;
  std::vector<int> hostOf;
  std::vector<std::string> hostNames;

  policy::PolicyInput input(uint64_t nowNs) const {
    policy::PolicyInput in;
    in.view = &view;
    in.nowNs = nowNs;
    in.nranks = nranks;
    in.hostOf = hostOf;
    in.hostNames = hostNames;
    in.sizes = {8, 4096, 1 << 20};
    return in;
  }
};

inline void setRing(attrs::ClusterView& v, int n, double gbps, uint64_t atNs) {
  for (int r = 0; r < n; ++r) {
    const int next = (r + 1) % n;
    if (next == r) continue;
    v.set("link." + std::to_string(r) + "." + std::to_string(next) + ".gbps", gbps, attrs::Source::kProbe, r, atNs);
    v.set("link." + std::to_string(next) + "." + std::to_string(r) + ".gbps", gbps, attrs::Source::kProbe, next,
          atNs);
  }
}

inline const std::vector<Scenario>& scenarios() {
  static const std::vector<Scenario> all = [] {
    std::vector<Scenario> out(3);
    out[0].nranks = 1;
    out[0].hostNames = {"h0"};

    Scenario& s = out[1];
    s.nranks = 4;
    s.hostOf = {0, 0, 1, 1};
    s.hostNames = {"h0", "h1"};
    setRing(s.view, 4, 10, kSecond);
    s.view.set("link.1.2.gbps", 1, attrs::Source::kProbe, 1, kSecond);
    s.view.set("link.1.2.bottleneck", 0.9, attrs::Source::kProbe, 1, kSecond);
    s.view.set("link.0.3.penalty", 4, attrs::Source::kFile, 0, kSecond);
    s.view.set("rank.3.wait_us", 900, attrs::Source::kProbe, 2, kSecond);
    s.view.set("rank.1.wait_us", 20, attrs::Source::kProbe, 0, kSecond);
    s.view.set("node.h1.nic.mlx5_0.healthy", 0, attrs::Source::kFile, 2, kSecond);
    s.view.set("node.h0.healthy", 1, attrs::Source::kFile, 0, kSecond);

    Scenario& big = out[2];
    big.nranks = 13;
    for (int r = 0; r < 13; ++r) big.hostOf.push_back(r / 5);
    big.hostNames = {"h0", "h1", "h2"};
    setRing(big.view, 13, 25, kSecond);
    big.view.set("link.4.5.gbps", 2, attrs::Source::kProbe, 4, kSecond);
    big.view.set("link.9.10.gbps", 3, attrs::Source::kProbe, 9, 2 * kSecond);
    big.view.set("rank.7.wait_us", 5000, attrs::Source::kProbe, 6, kSecond);
    return out;
  }();
  return all;
}

}  // namespace theseus::fuzz
