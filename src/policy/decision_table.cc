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

const char* NicChoice::moveName(Move m) {
  switch (m) {
    case kStay: return "stay";
    case kOtherNic: return "other_nic";
    case kAnyPath: return "any";
  }
  return "?";
}

Status DecisionTable::addNicChoice(NicChoice choice) {
  if (choice.rank < 0) return invalidArgument("decision table: NIC choice for rank %d", choice.rank);
  if (choice.move != NicChoice::kOtherNic && choice.move != NicChoice::kAnyPath)
    return invalidArgument("decision table: NIC choice %d for rank %d (expected other_nic or any)",
                           static_cast<int>(choice.move), choice.rank);
  auto at = std::lower_bound(nics_.begin(), nics_.end(), choice.rank,
                             [](const NicChoice& c, int rank) { return c.rank < rank; });
  if (at != nics_.end() && at->rank == choice.rank)
    return invalidArgument("decision table: two NIC choices for rank %d", choice.rank);
  nics_.insert(at, std::move(choice));
  return Status::ok();
}

NicChoice::Move DecisionTable::nicMove(int rank) const {
  for (const NicChoice& c : nics_)
    if (c.rank == rank) return c.move;
  return NicChoice::kStay;
}

bool DecisionTable::sameDecisions(const DecisionTable& other) const {
  if (nics_ != other.nics_) return false;
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
  if (!nics_.empty()) {
    nlohmann::json ns = nlohmann::json::array();
    for (const NicChoice& n : nics_)
      ns.push_back({{"rank", n.rank}, {"move", static_cast<int>(n.move)}, {"why", n.why}});
    j["nics"] = ns;
  }
  // A policy plugin's `why` is any NUL-terminated text: bytes that are not UTF-8 become U+FFFD
  // instead of an exception from the JSON library.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

using Json = nlohmann::json;

// Strict readers for the wire format: the text comes from another process, so
// every field must have exactly its type (nlohmann's get<> would convert a
// float to an integer, which is undefined behaviour when it is out of range).
Result<uint64_t> unsignedField(const Json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_unsigned())
    return invalidArgument("decision table: %s: \"%s\" must be a non-negative integer", where.c_str(), key);
  return it->get<uint64_t>();
}

Result<std::string> stringField(const Json& obj, const char* key, const std::string& where, bool optional = false) {
  auto it = obj.find(key);
  if (optional && it == obj.end()) return std::string();
  if (it == obj.end() || !it->is_string())
    return invalidArgument("decision table: %s: \"%s\" must be a string", where.c_str(), key);
  return it->get<std::string>();
}

}  // namespace

Result<DecisionTable> DecisionTable::deserialize(const std::string& text) {
  Json j;
  try {
    j = Json::parse(text);
  } catch (const std::exception& e) {
    return invalidArgument("decision table: malformed message: %s", e.what());
  }
  if (!j.is_object()) return invalidArgument("decision table: malformed message: not a JSON object");
  auto format = j.find("format");
  if (format == j.end() || !format->is_number_unsigned() || format->get<uint64_t>() != 1)
    return invalidArgument("decision table: unknown wire format");
  DecisionTable t;
  TH_ASSIGN(t.version_, unsignedField(j, "version", "the table"));
  auto ranges = j.find("ranges");
  if (ranges == j.end() || !ranges->is_array()) return invalidArgument("decision table: \"ranges\" must be an array");
  for (size_t i = 0; i < ranges->size(); ++i) {
    const Json& r = (*ranges)[i];
    const std::string where = "range " + std::to_string(i);
    if (!r.is_object()) return invalidArgument("decision table: %s is not an object", where.c_str());
    Decision d;
    TH_ASSIGN(d.schedule, stringField(r, "schedule", where));
    TH_ASSIGN(std::string paramText, stringField(r, "params", where));
    auto params = schedule::ScheduleParams::parse(paramText);
    if (!params.isOk()) return params.status().withContext("decision table: " + where);
    d.params = params.take();
    TH_ASSIGN(d.sliceBytes, unsignedField(r, "slice", where));
    TH_ASSIGN(d.why, stringField(r, "why", where, /*optional=*/true));
    TH_ASSIGN(uint64_t c, unsignedField(r, "collective", where));
    if (c >= static_cast<uint64_t>(kCollectives))
      return invalidArgument("decision table: %s: bad collective %llu", where.c_str(), static_cast<unsigned long long>(c));
    TH_ASSIGN(uint64_t minBytes, unsignedField(r, "min", where));
    TH_ASSIGN(uint64_t maxBytes, unsignedField(r, "max", where));
    TH_CHECK(t.add(static_cast<schedule::Collective>(c), minBytes, maxBytes, std::move(d)));
  }
  auto nics = j.find("nics");
  if (nics != j.end()) {
    if (!nics->is_array()) return invalidArgument("decision table: \"nics\" must be an array");
    for (size_t i = 0; i < nics->size(); ++i) {
      const Json& n = (*nics)[i];
      const std::string where = "NIC choice " + std::to_string(i);
      if (!n.is_object()) return invalidArgument("decision table: %s is not an object", where.c_str());
      NicChoice choice;
      TH_ASSIGN(uint64_t rank, unsignedField(n, "rank", where));
      TH_ASSIGN(uint64_t move, unsignedField(n, "move", where));
      if (rank > INT32_MAX || move > 255) return invalidArgument("decision table: %s out of range", where.c_str());
      choice.rank = static_cast<int>(rank);
      choice.move = static_cast<NicChoice::Move>(move);
      TH_ASSIGN(choice.why, stringField(n, "why", where, /*optional=*/true));
      TH_CHECK(t.addNicChoice(std::move(choice)));
    }
  }
  return t;
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
  for (const NicChoice& n : nics_) {
    out += "  rank " + std::to_string(n.rank) + " NIC -> " + NicChoice::moveName(n.move);
    if (!n.why.empty()) out += "  (" + n.why + ")";
    out += "\n";
  }
  return out;
}

}  // namespace theseus::policy
