// Loading JSON policies: structure, types, ranges and references are all
// checked here, so a policy that loads can always be evaluated. Every error
// names the file, the rule (index and name) and the field.
#include <sys/stat.h>

#include <algorithm>
#include <climits>
#include <cstdarg>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "policy/default_selector.h"
#include "policy/json_policy.h"
#include "schedule/builtins.h"
#include "schedule/user/user_schedules.h"

namespace theseus::policy {

using Json = nlohmann::json;

namespace {

constexpr uint32_t kAllCollectives = (1u << 0) | (1u << 1) | (1u << 2) | (1u << 3) | (1u << 4) | (1u << 8) |
                                     (1u << 9) | (1u << 10);
const schedule::Collective kCollectives[] = {
    schedule::Collective::kBroadcast, schedule::Collective::kReduce,   schedule::Collective::kAllGather,
    schedule::Collective::kReduceScatter, schedule::Collective::kAllReduce, schedule::Collective::kAlltoAll,
    schedule::Collective::kScatter,   schedule::Collective::kGather};

std::string joined(std::initializer_list<const char*> names) {
  std::string out;
  for (const char* n : names) out += std::string(out.empty() ? "" : ", ") + "'" + n + "'";
  return out;
}

bool isFileSchedule(const std::string& s) {
  return s.rfind("file:", 0) == 0 || s.find('/') != std::string::npos;
}

}  // namespace

Result<uint64_t> parseSize(const std::string& text) {
  if (text == "inf") return UINT64_MAX;
  if (text == "$small_msg_bytes") return static_cast<uint64_t>(smallMessageBytes());
  if (text.empty() || text.size() > 24) return invalidArgument("'%s' is not a size", text.c_str());
  size_t digits = 0;
  while (digits < text.size() && isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0) return invalidArgument("'%s' is not a size (expected e.g. 4096, \"64K\", \"1M\", \"inf\")",
                                          text.c_str());
  if (digits > 19) return invalidArgument("'%s' is too large", text.c_str());
  uint64_t v = strtoull(text.substr(0, digits).c_str(), nullptr, 10);
  if (v == ULLONG_MAX) return invalidArgument("'%s' is too large", text.c_str());
  std::string suffix = text.substr(digits);
  int shift = 0;
  if (suffix.empty()) shift = 0;
  else if (suffix == "K" || suffix == "k" || suffix == "KiB") shift = 10;
  else if (suffix == "M" || suffix == "MiB") shift = 20;
  else if (suffix == "G" || suffix == "GiB") shift = 30;
  else if (suffix == "T" || suffix == "TiB") shift = 40;
  else return invalidArgument("'%s': unknown size suffix '%s' (K, M, G, T are binary multiples)", text.c_str(),
                              suffix.c_str());
  if (shift && v > (UINT64_MAX >> shift)) return invalidArgument("'%s' is too large", text.c_str());
  return v << shift;
}

class JsonPolicyParser {
 public:
  JsonPolicyParser(std::string where, std::string baseDir) : where_(std::move(where)), baseDir_(std::move(baseDir)) {}

  Result<std::unique_ptr<JsonPolicy>> run(const std::string& text);

 private:
  Status fail(const std::string& context, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
  Status checkKeys(const Json& obj, std::initializer_list<const char*> allowed, const std::string& context);
  Result<uint64_t> size(const Json& v, const std::string& context);
  Result<int64_t> integer(const Json& v, int64_t min, int64_t max, const std::string& context);
  Result<double> number(const Json& v, double min, double max, const std::string& context);
  Status parseSettings(const Json& v, PolicySettings* s);
  Status parseRule(const Json& v, int index, const PolicySettings& defaults, Rule* r);
  // Entry `index` of `section` must be an object; its optional "name" is read, and *context names
  // both ("rules[2] ('name')") for the errors that follow.
  Status parseRuleHead(const Json& v, const char* section, int index, std::string* name, std::string* context);
  // A rule's "hold" and "margin", else the settings'.
  Status parseHysteresis(const Json& v, const std::string& context, const PolicySettings& defaults, int* hold,
                         double* margin);
  Status parseNicRule(const Json& v, int index, const PolicySettings& defaults, NicRule* r, bool* usesSlowLinks);
  // The rule's part of an error context ("rules[2] ('name')") and a field path in it.
  static std::string field(const std::string& rule, const std::string& path) {
    return (rule.empty() ? std::string() : rule + ": ") + "field '" + path + "'";
  }
  Status parseRange(const Json& v, const std::string& rule, const std::string& path, int* min, int* max);
  Status parseCollectives(const Json& v, const std::string& rule, Rule* r);
  Status parseUse(const Json& v, const std::string& rule, Rule* r);
  Status parseOrder(const Json& v, const std::string& rule, const std::string& path, RuleUse* use);
  Status parseUseObject(const Json& v, const std::string& rule, const std::string& path, bool candidate, RuleUse* out);
  Result<std::string> resolveSchedule(const std::string& name, const std::string& context);
  Status checkUseServes(const std::string& rule, bool listed, Rule* r);

  std::string where_;
  std::string baseDir_;
};

Status JsonPolicyParser::fail(const std::string& context, const char* fmt, ...) {
  char text[512];
  va_list args;
  va_start(args, fmt);
  vsnprintf(text, sizeof(text), fmt, args);
  va_end(args);
  return invalidArgument("%s: %s%s%s", where_.c_str(), context.c_str(), context.empty() ? "" : ": ", text);
}

Status JsonPolicyParser::checkKeys(const Json& obj, std::initializer_list<const char*> allowed,
                                   const std::string& context) {
  for (const auto& [key, value] : obj.items()) {
    bool known = false;
    for (const char* a : allowed) known |= key == a;
    if (!known) return fail(context, "unknown field '%s' (expected %s)", key.c_str(), joined(allowed).c_str());
  }
  return Status::ok();
}

Result<uint64_t> JsonPolicyParser::size(const Json& v, const std::string& context) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_string()) {
    auto s = parseSize(v.get<std::string>());
    if (!s.isOk()) return fail(context, "%s", s.status().message().c_str());
    return s.value();
  }
  return fail(context, "expected a size: a number of bytes, \"64K\", \"1M\", \"inf\" or \"$small_msg_bytes\" (got %s)",
              v.dump().c_str());
}

Result<int64_t> JsonPolicyParser::integer(const Json& v, int64_t min, int64_t max, const std::string& context) {
  if (!v.is_number_integer() || v.get<int64_t>() < min || v.get<int64_t>() > max)
    return fail(context, "expected an integer in %lld..%lld (got %s)", static_cast<long long>(min),
                static_cast<long long>(max), v.dump().c_str());
  return v.get<int64_t>();
}

Result<double> JsonPolicyParser::number(const Json& v, double min, double max, const std::string& context) {
  if (!v.is_number() || !(v.get<double>() >= min) || !(v.get<double>() <= max))
    return fail(context, "expected a number in %g..%g (got %s)", min, max, v.dump().c_str());
  return v.get<double>();
}

Status JsonPolicyParser::parseSettings(const Json& v, PolicySettings* s) {
  if (!v.is_object()) return fail("field 'settings'", "expected an object");
  TH_CHECK(checkKeys(v, {"min_dwell_ms", "hold", "margin", "max_age_ms", "slow_link_ratio"}, "field 'settings'"));
  if (v.contains("min_dwell_ms")) {
    TH_ASSIGN(int64_t ms, integer(v["min_dwell_ms"], 0, 86400000, "field 'settings.min_dwell_ms'"));
    s->minDwellNs = static_cast<uint64_t>(ms) * 1000000;
  }
  if (v.contains("hold")) {
    TH_ASSIGN(int64_t h, integer(v["hold"], 1, 1000000, "field 'settings.hold'"));
    s->hold = static_cast<int>(h);
  }
  if (v.contains("margin")) {
    TH_ASSIGN(s->margin, number(v["margin"], 0, 10, "field 'settings.margin'"));
  }
  if (v.contains("max_age_ms")) {
    TH_ASSIGN(int64_t ms, integer(v["max_age_ms"], 0, 86400000, "field 'settings.max_age_ms'"));
    s->maxAgeNs = static_cast<uint64_t>(ms) * 1000000;
  }
  if (v.contains("slow_link_ratio")) {
    TH_ASSIGN(s->slowRatio, number(v["slow_link_ratio"], 0.01, 0.99, "field 'settings.slow_link_ratio'"));
  }
  return Status::ok();
}

Status JsonPolicyParser::parseRange(const Json& v, const std::string& rule, const std::string& path, int* min,
                                    int* max) {
  const std::string context = field(rule, path);
  if (v.is_number_integer()) {
    TH_ASSIGN(int64_t exact, integer(v, 1, INT32_MAX, context));
    *min = *max = static_cast<int>(exact);
    return Status::ok();
  }
  if (!v.is_object()) return fail(context, "expected a count or {\"min\": n, \"max\": m} (got %s)", v.dump().c_str());
  TH_CHECK(checkKeys(v, {"min", "max"}, context));
  if (v.contains("min")) {
    TH_ASSIGN(int64_t lo, integer(v["min"], 1, INT32_MAX, field(rule, path + ".min")));
    *min = static_cast<int>(lo);
  }
  if (v.contains("max")) {
    TH_ASSIGN(int64_t hi, integer(v["max"], 1, INT32_MAX, field(rule, path + ".max")));
    *max = static_cast<int>(hi);
  }
  if (*min > *max) return fail(context, "min %d is larger than max %d", *min, *max);
  return Status::ok();
}

Status JsonPolicyParser::parseCollectives(const Json& v, const std::string& rule, Rule* r) {
  if (v.is_string() && v.get<std::string>() == "all") {
    r->collectives = kAllCollectives;
    return Status::ok();
  }
  if (!v.is_array() || v.empty())
    return fail(field(rule, "collectives"), "expected \"all\" or a non-empty array of collective names (got %s)",
                v.dump().c_str());
  r->collectives = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    schedule::Collective c;
    if (!v[i].is_string() || !schedule::parseCollective(v[i].get<std::string>(), &c))
      return fail(field(rule, "collectives[" + std::to_string(i) + "]"),
                  "%s is not a collective (allreduce, allgather, reducescatter, broadcast, reduce, alltoall, "
                  "gather, scatter)", v[i].dump().c_str());
    r->collectives |= 1u << static_cast<unsigned>(c);
  }
  return Status::ok();
}

Result<std::string> JsonPolicyParser::resolveSchedule(const std::string& name, const std::string& context) {
  if (name == "default" || schedule::isBuiltin(name)) return name;
  if (isFileSchedule(name)) {
    std::string path = name.rfind("file:", 0) == 0 ? name.substr(5) : name;
    if (!path.empty() && path[0] != '/') path = baseDir_ + "/" + path;
    struct stat st;
    if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
      return fail(context, "schedule file '%s' does not exist", path.c_str());
    return "file:" + path;
  }
  if (schedule::user::knows(name)) return name;
  std::string builtins;
  for (const auto& b : schedule::builtinNames()) builtins += (builtins.empty() ? "" : ", ") + b;
  return fail(context, "unknown schedule '%s' (built-ins: %s, default; user schedules come from THESEUS_SCHEDULES; "
              "files are written as \"file:path.json\")", name.c_str(), builtins.c_str());
}

Status JsonPolicyParser::parseOrder(const Json& v, const std::string& rule, const std::string& path, RuleUse* use) {
  const std::string context = field(rule, path + ".order");
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    if (s == "avoid_slow_links") use->order = RuleUse::Order::kAvoidSlowLinks;
    else if (s == "identity") use->order = RuleUse::Order::kIdentity;
    else if (s == "by_host") use->order = RuleUse::Order::kByHost;
    else if (s == "by_rail") use->order = RuleUse::Order::kByRail;
    else return fail(context, "unknown order '%s' (expected \"avoid_slow_links\", \"by_host\", \"by_rail\", "
                     "\"identity\" or an array of ranks)", s.c_str());
    return Status::ok();
  }
  if (!v.is_array() || v.empty())
    return fail(context, "expected \"avoid_slow_links\", \"by_host\", \"by_rail\", \"identity\" or a non-empty "
                "array of ranks");
  std::vector<char> seen(v.size(), 0);
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = field(rule, path + ".order[" + std::to_string(i) + "]");
    TH_ASSIGN(int64_t r, integer(v[i], 0, static_cast<int64_t>(v.size()) - 1, at));
    if (seen[r]++) return fail(at, "rank %lld appears twice (the order must be a permutation)", static_cast<long long>(r));
    use->explicitOrder.push_back(static_cast<int>(r));
  }
  use->order = RuleUse::Order::kExplicit;
  return Status::ok();
}

constexpr size_t kMaxCandidates = 16;  // of a "fastest" use

Status JsonPolicyParser::parseUse(const Json& v, const std::string& rule, Rule* r) {
  const std::string context = field(rule, "use");
  if (v.is_object() && v.contains("fastest")) {
    TH_CHECK(checkKeys(v, {"fastest"}, context));
    const Json& list = v["fastest"];
    if (!list.is_array() || list.empty() || list.size() > kMaxCandidates)
      return fail(field(rule, "use.fastest"), "expected an array of 1 to %zu candidates (each like a rule's use)",
                  kMaxCandidates);
    for (size_t i = 0; i < list.size(); ++i) {
      RuleUse candidate;
      TH_CHECK(parseUseObject(list[i], rule, "use.fastest[" + std::to_string(i) + "]", true, &candidate));
      r->use.fastest.push_back(std::move(candidate));
    }
    return Status::ok();
  }
  return parseUseObject(v, rule, "use", false, &r->use);
}

Status JsonPolicyParser::parseUseObject(const Json& v, const std::string& rule, const std::string& path,
                                        bool candidate, RuleUse* out) {
  RuleUse& use = *out;
  const std::string context = field(rule, path);
  Json obj = v.is_string() ? Json{{"schedule", v}} : v;
  if (!obj.is_object()) return fail(context, "expected a schedule name or an object with \"schedule\"");
  if (candidate && obj.contains("fastest")) return fail(context, "a candidate cannot have candidates of its own");
  TH_CHECK(checkKeys(obj, {"schedule", "order", "root", "channels", "bidirectional", "pipeline", "slice_bytes"},
                     context));
  if (!obj.contains("schedule")) return fail(context, "field 'schedule' is missing");
  const Json& s = obj["schedule"];
  std::vector<std::string> names;
  if (s.is_string()) {
    names.push_back(s.get<std::string>());
  } else if (s.is_array() && !s.empty()) {
    for (size_t i = 0; i < s.size(); ++i) {
      if (!s[i].is_string())
        return fail(field(rule, path + ".schedule[" + std::to_string(i) + "]"), "expected a schedule name (got %s)",
                    s[i].dump().c_str());
      names.push_back(s[i].get<std::string>());
    }
  } else {
    return fail(field(rule, path + ".schedule"), "expected a schedule name or a non-empty array of names (got %s)",
                s.dump().c_str());
  }
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string at = field(rule, path + ".schedule" + (s.is_array() ? "[" + std::to_string(i) + "]" : std::string()));
    TH_ASSIGN(std::string resolved, resolveSchedule(names[i], at));
    use.schedules.push_back(std::move(resolved));
  }
  if (obj.contains("order")) TH_CHECK(parseOrder(obj["order"], rule, path, &use));
  if (obj.contains("root")) {
    const Json& root = obj["root"];
    if (root.is_string() && root.get<std::string>() == "straggler") {
      use.root = RuleUse::Root::kStraggler;
    } else if (candidate && root.is_string() && root.get<std::string>() == "any") {
      use.root = RuleUse::Root::kAny;
    } else {
      if (!root.is_number_integer())
        return fail(field(rule, path + ".root"), "expected a rank or \"straggler\"%s (got %s%s)",
                    candidate ? " or \"any\"" : "", root.dump().c_str(),
                    candidate ? "" : "; \"any\" only in a \"fastest\" candidate");
      TH_ASSIGN(int64_t rank, integer(root, 0, INT32_MAX - 1, field(rule, path + ".root")));
      use.root = RuleUse::Root::kRank;
      use.rootRank = static_cast<int>(rank);
    }
  }
  if (obj.contains("channels")) {
    TH_ASSIGN(int64_t c, integer(obj["channels"], 1, schedule::ScheduleParams::kMaxChannels, field(rule, path + ".channels")));
    use.channels = static_cast<int>(c);
  }
  if (obj.contains("bidirectional")) {
    if (!obj["bidirectional"].is_boolean()) return fail(field(rule, path + ".bidirectional"), "expected true or false");
    use.bidirectional = obj["bidirectional"].get<bool>();
  }
  if (obj.contains("pipeline")) {
    TH_ASSIGN(int64_t p, integer(obj["pipeline"], 1, schedule::ScheduleParams::kMaxPipelineChunks,
                                 field(rule, path + ".pipeline")));
    use.pipeline = static_cast<int>(p);
  }
  if (obj.contains("slice_bytes")) {
    TH_ASSIGN(use.sliceBytes, size(obj["slice_bytes"], field(rule, path + ".slice_bytes")));
    if (use.sliceBytes < 64 || use.sliceBytes > (uint64_t(1) << 30))
      return fail(field(rule, path + ".slice_bytes"), "%llu is outside 64 bytes..1G", (unsigned long long)use.sliceBytes);
  }
  return Status::ok();
}

// Every collective the rule lists must be served by one of its schedules with
// the rule's parameters (checked by generating a small instance), and a rule
// that lists none keeps only the collectives some schedule serves.
//
// A rule with an explicit order applies at exactly that many ranks. Generating
// a built-in costs O(n^2) steps for n ranks (every rank's loop runs, one rank's
// steps are kept), so an order of 2,400 ranks took 5 s here and 10,000 would
// take minutes: past kCheckRanks ranks the rank count is checked with
// builtinSupports() and the parameters on a kCheckRanks-rank instance.
// Evaluation still checks the real size, when a communicator of that size
// exists (paramsUsable).
constexpr int kCheckRanks = 16;

Status JsonPolicyParser::checkUseServes(const std::string& rule, bool listed, Rule* r) {
  const std::string context = field(rule, "use");
  std::vector<const RuleUse*> uses;
  if (r->use.fastest.empty()) uses.push_back(&r->use);
  for (const RuleUse& candidate : r->use.fastest) uses.push_back(&candidate);
  uint32_t served = 0;
  std::string why;
  for (schedule::Collective c : kCollectives) {
    const uint32_t bit = 1u << static_cast<unsigned>(c);
    if (!(r->collectives & bit)) continue;
    for (size_t u = 0; u < uses.size() && !(served & bit); ++u) {
      const RuleUse& use = *uses[u];
      const std::string path = r->use.fastest.empty() ? "use" : "use.fastest[" + std::to_string(u) + "]";
      const int n = use.order == RuleUse::Order::kExplicit ? static_cast<int>(use.explicitOrder.size()) : 4;
      const int generated = std::min(n, kCheckRanks);
      for (const std::string& name : use.schedules) {
        if (name == "default") {
          served |= bit;
          break;
        }
        if (!schedule::isBuiltin(name)) {
          auto handle = schedule::user::processRegistry().find(name);
          if (!handle.isOk()) return fail(field(rule, path + ".schedule"), "%s", handle.status().message().c_str());
          if (handle.value()->info().collectives & bit) {
            served |= bit;
            break;
          }
          continue;
        }
        if (generated < n && !schedule::builtinSupports(name, c, n)) {
          if (listed && why.empty())
            why = name + " does not serve " + schedule::collectiveName(c) + " on " + std::to_string(n) + " ranks";
          continue;
        }
        schedule::GenerateRequest req;
        req.collective = c;
        req.nranks = generated;
        req.onlyRank = 0;
        if (use.order != RuleUse::Order::kDefault || use.root == RuleUse::Root::kAny) {
          req.params.order.resize(generated);
          for (int i = 0; i < generated; ++i) req.params.order[i] = i;
        }
        if (use.channels) req.params.channels = use.channels;
        req.params.bidirectional = use.bidirectional.value_or(false);
        req.params.pipelineChunks = use.pipeline;
        auto program = schedule::generateBuiltin(name, req);
        if (program.isOk()) {
          served |= bit;
          break;
        }
        if (listed && why.empty()) why = program.status().message();
      }
    }
    if (listed && !(served & bit))
      return fail(context, "no schedule of this rule serves %s%s%s", schedule::collectiveName(c),
                  why.empty() ? "" : " (", why.empty() ? "" : (why + ")").c_str());
  }
  if (served == 0) return fail(context, "its schedules serve none of the collectives it applies to");
  r->collectives = served;
  return Status::ok();
}

Status JsonPolicyParser::parseHysteresis(const Json& v, const std::string& context, const PolicySettings& defaults,
                                         int* hold, double* margin) {
  *hold = defaults.hold;
  *margin = defaults.margin;
  if (v.contains("hold")) {
    TH_ASSIGN(int64_t h, integer(v["hold"], 1, 1000000, field(context, "hold")));
    *hold = static_cast<int>(h);
  }
  if (v.contains("margin")) {
    TH_ASSIGN(*margin, number(v["margin"], 0, 10, field(context, "margin")));
  }
  return Status::ok();
}

Status JsonPolicyParser::parseRuleHead(const Json& v, const char* section, int index, std::string* name,
                                       std::string* context) {
  *context = std::string(section) + "[" + std::to_string(index) + "]";
  if (!v.is_object()) return fail(*context, "expected an object");
  if (v.contains("name")) {
    if (!v["name"].is_string()) return fail(field(*context, "name"), "expected a string");
    *name = v["name"].get<std::string>();
    *context += " ('" + *name + "')";
  }
  return Status::ok();
}

Status JsonPolicyParser::parseRule(const Json& v, int index, const PolicySettings& defaults, Rule* r) {
  r->index = index;
  std::string context;
  TH_CHECK(parseRuleHead(v, "rules", index, &r->name, &context));
  TH_CHECK(checkKeys(v, {"name", "comment", "collectives", "min_bytes", "max_bytes", "ranks", "nodes", "when", "hold",
                         "margin", "use"}, context));
  r->collectives = kAllCollectives;
  bool listed = v.contains("collectives");
  if (listed) TH_CHECK(parseCollectives(v["collectives"], context, r));
  if (v.contains("collectives") && v["collectives"].is_string()) listed = false;
  if (v.contains("min_bytes")) {
    TH_ASSIGN(r->minBytes, size(v["min_bytes"], field(context, "min_bytes")));
  }
  if (v.contains("max_bytes")) {
    TH_ASSIGN(r->maxBytes, size(v["max_bytes"], field(context, "max_bytes")));
  }
  if (r->minBytes > r->maxBytes)
    return fail(field(context, "min_bytes"), "%llu is larger than max_bytes %llu", (unsigned long long)r->minBytes,
                (unsigned long long)r->maxBytes);
  if (v.contains("ranks")) TH_CHECK(parseRange(v["ranks"], context, "ranks", &r->minRanks, &r->maxRanks));
  if (v.contains("nodes")) TH_CHECK(parseRange(v["nodes"], context, "nodes", &r->minNodes, &r->maxNodes));
  if (v.contains("when")) {
    if (!v["when"].is_string()) return fail(field(context, "when"), "expected a condition (a string)");
    auto c = Condition::parse(v["when"].get<std::string>());
    if (!c.isOk()) return fail(field(context, "when"), "%s", c.status().message().c_str());
    r->when = c.take();
  }
  TH_CHECK(parseHysteresis(v, context, defaults, &r->hold, &r->margin));
  if (!v.contains("use")) return fail(context, "field 'use' is missing");
  TH_CHECK(parseUse(v["use"], context, r));
  std::vector<std::pair<const RuleUse*, std::string>> uses = {{&r->use, "use"}};
  for (size_t i = 0; i < r->use.fastest.size(); ++i)
    uses.emplace_back(&r->use.fastest[i], "use.fastest[" + std::to_string(i) + "]");
  for (const auto& [use, path] : uses) {
    if (use->order != RuleUse::Order::kExplicit) continue;
    int n = static_cast<int>(use->explicitOrder.size());
    r->minRanks = std::max(r->minRanks, n);
    r->maxRanks = std::min(r->maxRanks, n);
    if (r->minRanks > r->maxRanks)
      return fail(field(context, path + ".order"), "lists %d ranks, outside the rule's rank range", n);
  }
  return checkUseServes(context, listed, r);
}

Status JsonPolicyParser::parseNicRule(const Json& v, int index, const PolicySettings& defaults, NicRule* r,
                                      bool* usesSlowLinks) {
  r->index = index;
  std::string context;
  TH_CHECK(parseRuleHead(v, "nics", index, &r->name, &context));
  TH_CHECK(checkKeys(v, {"name", "comment", "when", "move", "hold", "margin"}, context));
  if (!v.contains("when")) return fail(context, "field 'when' is missing (a condition; $r is the rank)");
  if (!v["when"].is_string()) return fail(field(context, "when"), "expected a condition (a string)");
  r->when = v["when"].get<std::string>();
  auto c = Condition::parse(NicRule::forRank(r->when, 0));
  if (!c.isOk()) return fail(field(context, "when"), "%s (with $r = 0)", c.status().message().c_str());
  *usesSlowLinks = c.value().usesSlowLinks();
  r->move = NicChoice::kOtherNic;
  if (v.contains("move")) {
    const Json& m = v["move"];
    if (m == "other_nic") r->move = NicChoice::kOtherNic;
    else if (m == "any") r->move = NicChoice::kAnyPath;
    else return fail(field(context, "move"), "expected \"other_nic\" or \"any\" (got %s)", m.dump().c_str());
  }
  TH_CHECK(parseHysteresis(v, context, defaults, &r->hold, &r->margin));
  return Status::ok();
}

// Bounds on what a policy may be, so the leader never spends the bootstrap's timeout (or
// its memory) on one: parsing is linear, about 10 us per rule.
constexpr size_t kMaxPolicyBytes = size_t(16) << 20;
constexpr size_t kMaxRules = 100000;

// Cold path: the JSON library's exceptions end here.
Result<std::unique_ptr<JsonPolicy>> JsonPolicyParser::run(const std::string& text) {
  if (text.size() > kMaxPolicyBytes)
    return fail("", "%zu bytes; a policy may have at most %zu MiB", text.size(), kMaxPolicyBytes >> 20);
  Json j;
  try {
    j = Json::parse(text);
  } catch (const std::exception& e) {
    return fail("", "not valid JSON: %s", e.what());
  }
  if (!j.is_object()) return fail("", "the top level must be an object");
  TH_CHECK(checkKeys(j, {"version", "name", "description", "comment", "settings", "rules", "nics"}, ""));
  if (!j.contains("version")) return fail("field 'version'", "missing (this is format version 1)");
  if (!j["version"].is_number_integer() || j["version"].get<int64_t>() != 1)
    return fail("field 'version'", "unsupported version %s (this library reads version 1)", j["version"].dump().c_str());
  std::unique_ptr<JsonPolicy> p(new JsonPolicy());
  p->where_ = where_;
  p->name_ = "unnamed";
  if (j.contains("name")) {
    if (!j["name"].is_string() || j["name"].get<std::string>().empty())
      return fail("field 'name'", "expected a non-empty string");
    p->name_ = j["name"].get<std::string>();
  }
  if (j.contains("description")) {
    if (!j["description"].is_string()) return fail("field 'description'", "expected a string");
    p->description_ = j["description"].get<std::string>();
  }
  if (j.contains("settings")) TH_CHECK(parseSettings(j["settings"], &p->settings_));
  if (!j.contains("rules")) return fail("field 'rules'", "missing");
  if (!j["rules"].is_array()) return fail("field 'rules'", "expected an array of rules");
  const Json& rules = j["rules"];
  if (rules.size() > kMaxRules)
    return fail("field 'rules'", "%zu rules; a policy may have at most %zu", rules.size(), kMaxRules);
  for (size_t i = 0; i < rules.size(); ++i) {
    Rule r;
    TH_CHECK(parseRule(rules[i], static_cast<int>(i), p->settings_, &r));
    bool avoids = r.use.order == RuleUse::Order::kAvoidSlowLinks || !r.use.fastest.empty();
    p->usesLinks_ = p->usesLinks_ || avoids || (r.when && r.when->usesSlowLinks());
    p->rules_.push_back(std::move(r));
  }
  if (j.contains("nics")) {
    const Json& nics = j["nics"];
    if (!nics.is_array()) return fail("field 'nics'", "expected an array of NIC rules");
    if (nics.size() > kMaxRules)
      return fail("field 'nics'", "%zu rules; a policy may have at most %zu", nics.size(), kMaxRules);
    for (size_t i = 0; i < nics.size(); ++i) {
      NicRule r;
      bool slowLinks = false;
      TH_CHECK(parseNicRule(nics[i], static_cast<int>(i), p->settings_, &r, &slowLinks));
      p->usesLinks_ = p->usesLinks_ || slowLinks;
      p->nicRules_.push_back(std::move(r));
    }
  }
  return p;
}

Result<std::unique_ptr<JsonPolicy>> JsonPolicy::parse(const std::string& text, const std::string& where,
                                                      const std::string& baseDir) {
  return JsonPolicyParser(where, baseDir).run(text);
}

Result<std::unique_ptr<JsonPolicy>> JsonPolicy::loadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return errnoStatus(errno, "policy file %s: cannot open it", path.c_str());
  const auto size = static_cast<size_t>(std::max<std::streamoff>(in.tellg(), 0));
  if (size > kMaxPolicyBytes)
    return invalidArgument("%s: %zu bytes; a policy may have at most %zu MiB", path.c_str(), size,
                           kMaxPolicyBytes >> 20);
  in.seekg(0);
  std::stringstream text;
  text << in.rdbuf();
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  return parse(text.str(), path, dir);
}

}  // namespace theseus::policy
