// Helpers for policy tests: views with link/host attributes, inputs, ring checks.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "attrs/cluster_view.h"
#include "policy/json_policy.h"
#include "policy/policy.h"

namespace theseus::policy::testing {

constexpr uint64_t kSec = 1000000000ull;

// A view in which every ring link r -> r+1 (and back) measured `gbps`.
inline void setRingLinks(attrs::ClusterView& v, int n, double gbps, uint64_t atNs) {
  for (int r = 0; r < n; ++r) {
    int next = (r + 1) % n;
    v.set("link." + std::to_string(r) + "." + std::to_string(next) + ".gbps", gbps, attrs::Source::kProbe, r, atNs);
    v.set("link." + std::to_string(next) + "." + std::to_string(r) + ".gbps", gbps, attrs::Source::kProbe, next, atNs);
  }
}

inline void setLink(attrs::ClusterView& v, int a, int b, const char* what, double value, uint64_t atNs) {
  v.set("link." + std::to_string(a) + "." + std::to_string(b) + "." + what, value, attrs::Source::kProbe, a, atNs);
}

// Only the links a unidirectional ring 0 1 .. n-1 sends over (what a ring measures).
inline void setRingForward(attrs::ClusterView& v, int n, double gbps, uint64_t atNs) {
  for (int r = 0; r < n; ++r) setLink(v, r, (r + 1) % n, "gbps", gbps, atNs);
}

inline PolicyInput input(const attrs::ClusterView& v, int n, uint64_t nowNs, std::vector<int> hostOf = {}) {
  PolicyInput in;
  in.view = &v;
  in.nowNs = nowNs;
  in.nranks = n;
  in.hostOf = std::move(hostOf);
  for (int h = 0; h < in.nnodes(); ++h) in.hostNames.push_back("h" + std::to_string(h));
  return in;
}

inline std::unique_ptr<JsonPolicy> parsePolicy(const std::string& text, const std::string& dir = ".") {
  auto p = JsonPolicy::parse(text, "test.json", dir);
  EXPECT_TRUE(p.isOk()) << p.status().message();
  return p.isOk() ? p.take() : nullptr;
}

// The ring `order` (empty = identity) of n ranks uses the directed link a -> b.
inline bool ringUses(std::vector<int> order, int n, int a, int b) {
  if (order.empty())
    for (int i = 0; i < n; ++i) order.push_back(i);
  for (int i = 0; i < n; ++i)
    if (order[i] == a && order[(i + 1) % n] == b) return true;
  return false;
}

// Both tables choose alike for every collective and size (their ranges may be cut differently):
// checked at every range boundary of either table.
inline bool sameChoices(const DecisionTable& a, const DecisionTable& b) {
  for (int c = 0; c < DecisionTable::kCollectives; ++c) {
    auto coll = static_cast<schedule::Collective>(c);
    for (const DecisionTable* t : {&a, &b}) {
      for (const auto& r : t->ranges(coll)) {
        for (uint64_t bytes : {r.minBytes, r.maxBytes}) {
          const Decision *x = a.lookup(coll, bytes), *y = b.lookup(coll, bytes);
          if ((x == nullptr) != (y == nullptr) || (x && !(*x == *y))) return false;
        }
      }
    }
  }
  return true;
}

inline bool isPermutation(const std::vector<int>& order, int n) {
  if (order.size() != static_cast<size_t>(n)) return false;
  std::vector<int> seen(n, 0);
  for (int r : order)
    if (r < 0 || r >= n || seen[r]++) return false;
  return true;
}

}  // namespace theseus::policy::testing
