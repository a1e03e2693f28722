#include "policy/decision_table.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace theseus::policy {

std::string Decision::toString() const {
  std::string p = params.toString();
  std::string s = p.empty() ? schedule : schedule + "(" + p + ")";
  if (sliceBytes) s += "[slice=" + std::to_string(sliceBytes) + "]";
  return s;
}

Status DecisionTable::add(schedule::Collective c, uint64_t minBytes, uint64_t maxBytes, Decision d) {
  int ci = static_cast<int>(c);
  if (ci < 0 || ci >= kCollectives) return invalidArgument("decision table: bad collective %d", ci);
  if (minBytes > maxBytes) return invalidArgument("decision table: empty size range [%llu, %llu]",
                                                  (unsigned long long)minBytes, (unsigned long long)maxBytes);
  // The ranges are kept sorted and disjoint, so only the neighbours of the insertion point
  // can overlap: O(log n) per range added in order (how tables are built), not O(n log n).
  auto& v = ranges_[ci];
  auto at = std::upper_bound(v.begin(), v.end(), minBytes,
                             [](uint64_t m, const Range& r) { return m < r.minBytes; });
  const Range* clash = nullptr;
  if (at != v.end() && at->minBytes <= maxBytes) clash = &*at;
  if (at != v.begin() && std::prev(at)->maxBytes >= minBytes) clash = &*std::prev(at);
  if (clash != nullptr)
    return invalidArgument("decision table: %s range [%llu, %llu] overlaps [%llu, %llu]",
                           schedule::collectiveName(c), (unsigned long long)minBytes, (unsigned long long)maxBytes,
                           (unsigned long long)clash->minBytes, (unsigned long long)clash->maxBytes);
  v.insert(at, Range{minBytes, maxBytes, std::move(d)});
  return Status::ok();
}

int DecisionTable::rangeIndex(schedule::Collective c, uint64_t bytes) const {
  const auto& v = ranges_[static_cast<int>(c)];
  int best = -1;
  for (size_t i = 0; i < v.size(); ++i) {
    if (bytes >= v[i].minBytes) best = static_cast<int>(i);
    else break;
  }
  if (best < 0 && !v.empty()) best = 0;
  return best;
}

bool DecisionTable::sameDecisions(const DecisionTable& other) const {
  for (int c = 0; c < kCollectives; ++c) {
    const auto &a = ranges_[c], &b = other.ranges_[c];
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i].minBytes != b[i].minBytes || a[i].maxBytes != b[i].maxBytes || !(a[i].decision == b[i].decision))
        return false;
  }
  return true;
}

std::string DecisionTable::serialize() const {
  nlohmann::json j;
  j["format"] = 1;
  j["version"] = version_;
  nlohmann::json rs = nlohmann::json::array();
  for (int c = 0; c < kCollectives; ++c) {
    for (const Range& r : ranges_[c]) {
      rs.push_back({{"collective", c},
                    {"min", r.minBytes},
                    {"max", r.maxBytes},
                    {"schedule", r.decision.schedule},
                    {"params", r.decision.params.toString()},
                    {"slice", r.decision.sliceBytes},
                    {"why", r.decision.why}});
    }
  }
  j["ranges"] = rs;
  return j.dump();
}

Result<DecisionTable> DecisionTable::deserialize(const std::string& text) {
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    if (j.value("format", 0) != 1) return invalidArgument("decision table: unknown wire format");
    DecisionTable t;
    t.version_ = j.at("version").get<uint64_t>();
    for (const auto& r : j.at("ranges")) {
      Decision d;
      d.schedule = r.at("schedule").get<std::string>();
      auto params = schedule::ScheduleParams::parse(r.at("params").get<std::string>());
      if (!params.isOk()) return params.status();
      d.params = params.take();
      d.sliceBytes = r.at("slice").get<uint64_t>();
      d.why = r.value("why", "");
      int c = r.at("collective").get<int>();
      if (c < 0 || c >= kCollectives) return invalidArgument("decision table: bad collective %d", c);
      TH_CHECK(t.add(static_cast<schedule::Collective>(c), r.at("min").get<uint64_t>(), r.at("max").get<uint64_t>(),
                     std::move(d)));
    }
    return t;
  } catch (const std::exception& e) {
    return invalidArgument("decision table: malformed message: %s", e.what());
  }
}

std::string DecisionTable::describe() const {
  std::string out = "decision table v" + std::to_string(version_) + "\n";
  for (int c = 0; c < kCollectives; ++c) {
    for (const Range& r : ranges_[c]) {
      out += "  " + std::string(schedule::collectiveName(static_cast<schedule::Collective>(c))) + " [" +
             std::to_string(r.minBytes) + ", " + (r.maxBytes == UINT64_MAX ? "inf" : std::to_string(r.maxBytes)) +
             "] -> " + r.decision.toString();
      if (!r.decision.why.empty()) out += "  (" + r.decision.why + ")";
      out += "\n";
    }
  }
  return out;
}

}  // namespace theseus::policy
