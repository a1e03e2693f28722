#include "attrs/attribute_store.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "common/deadline.h"

namespace theseus::attrs {
namespace {

bool nameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
         c == ':';
}

}  // namespace

const char* sourceName(Source s) {
  switch (s) {
    case Source::kProbe: return "probe";
    case Source::kFile: return "file";
    case Source::kApi: return "api";
    case Source::kMerged: return "merged";
  }
  return "?";
}

bool parseSource(const std::string& text, Source* out) {
  for (Source s : {Source::kProbe, Source::kFile, Source::kApi, Source::kMerged}) {
    if (text == sourceName(s)) {
      *out = s;
      return true;
    }
  }
  return false;
}

Status checkName(const std::string& name) {
  if (name.empty()) return invalidArgument("attribute name is empty");
  if (name.size() > kMaxNameLength)
    return invalidArgument("attribute name '%.40s...' is %zu characters long; the limit is %zu", name.c_str(),
                           name.size(), kMaxNameLength);
  size_t componentStart = 0;
  for (size_t i = 0; i <= name.size(); ++i) {
    if (i == name.size() || name[i] == '.') {
      if (i == componentStart)
        return invalidArgument("attribute name '%s' has an empty component at character %zu", name.c_str(), i + 1);
      componentStart = i + 1;
      continue;
    }
    if (!nameChar(name[i]))
      return invalidArgument("attribute name '%s': character %zu ('%c') is not one of [A-Za-z0-9_:-] or '.'",
                             name.c_str(), i + 1, name[i] >= 32 && name[i] < 127 ? name[i] : '?');
  }
  return Status::ok();
}

std::string hostLabel(const std::string& hostname) {
  std::string out = hostname.empty() ? std::string("unknown") : hostname;
  for (char& c : out)
    if (!nameChar(c)) c = '_';
  return out;
}

std::string Snapshot::serialize() const {
  nlohmann::json a = nlohmann::json::array();
  for (const SnapshotEntry& e : entries) {
    nlohmann::json row = {e.name, e.value, static_cast<int>(e.source), e.ageNs / 1000, e.writeId};
    if (e.rank != rank) row.push_back(e.rank);
    a.push_back(std::move(row));
  }
  nlohmann::json j = {{"format", kFormat}, {"rank", rank}, {"a", std::move(a)}};
  return j.dump();
}

// Cold path: exceptions from the JSON library are caught here and become errors.
Result<Snapshot> Snapshot::deserialize(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    return invalidArgument("attribute snapshot: not JSON: %s", e.what());
  }
  if (!j.is_object()) return invalidArgument("attribute snapshot: not a JSON object");
  auto format = j.find("format");
  if (format == j.end() || !format->is_number_integer() || format->get<int64_t>() != kFormat)
    return invalidArgument("attribute snapshot: \"format\" must be %d", kFormat);
  auto rank = j.find("rank");
  if (rank == j.end() || !rank->is_number_integer() || rank->get<int64_t>() < 0 || rank->get<int64_t>() > INT32_MAX)
    return invalidArgument("attribute snapshot: \"rank\" must be a rank (an integer >= 0)");
  auto a = j.find("a");
  if (a == j.end() || !a->is_array()) return invalidArgument("attribute snapshot: \"a\" must be an array");
  if (a->size() > kMaxEntries)
    return invalidArgument("attribute snapshot: %zu entries, more than the limit of %zu", a->size(), kMaxEntries);
  Snapshot s;
  s.rank = static_cast<int>(rank->get<int64_t>());
  s.entries.reserve(a->size());
  for (size_t i = 0; i < a->size(); ++i) {
    const nlohmann::json& row = (*a)[i];
    if (!row.is_array() || row.size() < 5 || row.size() > 6 || !row[0].is_string() || !row[1].is_number() ||
        !row[2].is_number_unsigned() || !row[3].is_number_unsigned() || !row[4].is_number_unsigned() ||
        (row.size() == 6 && !row[5].is_number_integer()))
      return invalidArgument("attribute snapshot: entry %zu must be [name, value, source, age_us, write_id(, rank)]",
                             i);
    SnapshotEntry e;
    e.name = row[0].get<std::string>();
    Status st = checkName(e.name);
    if (!st.isOk()) return st.withContext("attribute snapshot: entry " + std::to_string(i));
    e.value = row[1].get<double>();
    if (!std::isfinite(e.value))
      return invalidArgument("attribute snapshot: entry %zu ('%s') is not a finite number", i, e.name.c_str());
    uint64_t source = row[2].get<uint64_t>();
    if (source > static_cast<uint64_t>(Source::kMerged))
      return invalidArgument("attribute snapshot: entry %zu ('%s') has unknown source %llu", i, e.name.c_str(),
                             static_cast<unsigned long long>(source));
    e.source = static_cast<Source>(source);
    uint64_t ageUs = row[3].get<uint64_t>();
    e.ageNs = ageUs > UINT64_MAX / 1000 ? UINT64_MAX : ageUs * 1000;
    e.writeId = row[4].get<uint64_t>();
    int64_t r = row.size() == 6 ? row[5].get<int64_t>() : s.rank;
    if (r < -1 || r > INT32_MAX)
      return invalidArgument("attribute snapshot: entry %zu ('%s') has bad rank %lld", i, e.name.c_str(),
                             static_cast<long long>(r));
    e.rank = static_cast<int>(r);
    if (!s.entries.empty() && s.entries.back().name >= e.name)
      return invalidArgument("attribute snapshot: entry %zu ('%s') is out of order or repeated", i, e.name.c_str());
    s.entries.push_back(std::move(e));
  }
  return s;
}

Status AttributeStore::set(const std::string& name, double value, Source source) {
  return set(name, value, source, nowNs());
}

Status AttributeStore::set(const std::string& name, double value, Source source, uint64_t timestampNs) {
  TH_CHECK(checkName(name));
  if (!std::isfinite(value)) return invalidArgument("attribute '%s': value %g is not finite", name.c_str(), value);
  std::lock_guard<std::mutex> lock(mu_);
  values_[name] = Attribute{value, source, timestampNs, rank(), bump()};
  return Status::ok();
}

bool AttributeStore::clear(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t erased = values_.erase(name);
  if (erased) bump();
  return erased > 0;
}

std::optional<Attribute> AttributeStore::get(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

Status AttributeStore::replaceSource(Source source, const std::vector<std::pair<std::string, double>>& values) {
  for (const auto& [name, value] : values) {
    TH_CHECK(checkName(name));
    if (!std::isfinite(value)) return invalidArgument("attribute '%s': value %g is not finite", name.c_str(), value);
  }
  const uint64_t now = nowNs();
  const int r = rank();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = values_.begin(); it != values_.end();) {
    if (it->second.source == source) it = values_.erase(it);
    else ++it;
  }
  for (const auto& [name, value] : values) values_[name] = Attribute{value, source, now, r, bump()};
  bump();  // also when `values` is empty but something was erased
  return Status::ok();
}

Snapshot AttributeStore::snapshot() const {
  Snapshot s;
  s.rank = rank();
  const uint64_t now = nowNs();
  std::lock_guard<std::mutex> lock(mu_);
  s.entries.reserve(values_.size());
  for (const auto& [name, a] : values_)
    s.entries.push_back(
        SnapshotEntry{name, a.value, a.source, now > a.timestampNs ? now - a.timestampNs : 0, a.rank, a.writeId});
  return s;
}

std::vector<std::pair<std::string, Attribute>> AttributeStore::list() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {values_.begin(), values_.end()};
}

size_t AttributeStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return values_.size();
}

}  // namespace theseus::attrs
