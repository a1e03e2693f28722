#include "policy/default_selector.h"

#include <algorithm>
#include <mutex>
#include <set>
#include <string>

#include "common/knobs.h"
#include "common/log.h"
#include "schedule/builtins.h"
#include "schedule/user/user_schedules.h"

namespace theseus::policy {
namespace {

using schedule::Collective;

const StringKnob kForce("THESEUS_SCHEDULE", nullptr,
                         "Force schedules by name: 'ring', or per collective 'allreduce:my_sched;allgather:ring' "
                         "(built-ins or user schedules from THESEUS_SCHEDULES); ignored where it does not apply");

const IntKnob kSmallBytes("THESEUS_SMALL_MSG_BYTES", 32 << 10,
                          "Default policy: operations up to this size use latency-optimal schedules "
                          "(recursive doubling, trees, direct); larger ones use bandwidth-optimal rings");

using C = Collective;

// The default choice. Small messages are latency-bound: schedules with few
// steps (recursive doubling, trees, direct); large ones are bandwidth-bound:
// rings first. Rules are tried in order; the first that names the collective
// and the request's size class decides.
const std::vector<DefaultRule> kRules = {
    {"small allreduce", {C::kAllReduce}, 0, {"recursive_doubling", "halving_doubling", "tree", "ring"}},
    {"large allreduce", {C::kAllReduce}, 1, {"ring", "halving_doubling", "double_binary_tree", "tree"}},
    {"small allgather", {C::kAllGather}, 0, {"recursive_doubling", "direct", "ring"}},
    {"large allgather", {C::kAllGather}, 1, {"ring", "direct", "recursive_doubling"}},
    {"small reducescatter", {C::kReduceScatter}, 0, {"halving_doubling", "direct", "ring"}},
    {"large reducescatter", {C::kReduceScatter}, 1, {"ring", "halving_doubling", "direct"}},
    {"small broadcast", {C::kBroadcast}, 0, {"tree", "direct", "ring"}},
    {"large broadcast", {C::kBroadcast}, 1, {"ring", "double_binary_tree", "tree", "direct"}},
    {"small reduce", {C::kReduce}, 0, {"tree", "direct", "ring"}},
    {"large reduce", {C::kReduce}, 1, {"ring", "tree", "direct"}},
    {"personalized exchanges", {C::kAlltoAll, C::kGather, C::kScatter}, -1, {"direct", "ring"}},
};

const std::vector<const char*>& candidates(Collective c, int sizeClass) {
  static const std::vector<const char*> kRingOnly = {"ring"};
  for (const DefaultRule& r : kRules) {
    if (r.sizeClass >= 0 && r.sizeClass != sizeClass) continue;
    for (Collective rc : r.collectives)
      if (rc == c) return r.candidates;
  }
  return kRingOnly;
}

// A JSON string list: ["a", "b"].
std::string jsonList(const std::vector<const char*>& names) {
  std::string out = "[";
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", \"" : "\"") + std::string(names[i]) + "\"";
  return out + "]";
}

std::string generateStaticPolicy() {
  std::string out =
      "{\n"
      "  \"version\": 1,\n"
      "  \"name\": \"static\",\n"
      "  \"description\": \"Size thresholds: latency-optimal schedules up to THESEUS_SMALL_MSG_BYTES, bandwidth-optimal "
      "ones above. Theseus' default policy; a starting point for your own.\",\n"
      "  \"rules\": [\n";
  for (size_t i = 0; i < kRules.size(); ++i) {
    const DefaultRule& r = kRules[i];
    std::vector<const char*> colls;
    for (Collective c : r.collectives) colls.push_back(collectiveName(c));
    out += "    {\"name\": \"" + std::string(r.name) + "\", \"collectives\": " + jsonList(colls) + ",";
    if (r.sizeClass == 0) out += " \"max_bytes\": \"$small_msg_bytes\",";
    out += "\n     \"use\": {\"schedule\": " + jsonList(r.candidates) + "}}" + (i + 1 < kRules.size() ? "," : "") + "\n";
  }
  return out + "  ]\n}\n";
}

}  // namespace

bool scheduleSupports(const std::string& name, schedule::Collective c, int nranks) {
  return schedule::builtinSupports(name, c, nranks);
}

std::vector<ForcedSchedule> parseForcedSchedules(const std::string& text) {
  std::vector<ForcedSchedule> out;
  size_t pos = 0;
  while (pos <= text.size() && !text.empty()) {
    size_t semi = text.find(';', pos);
    std::string entry = text.substr(pos, semi == std::string::npos ? std::string::npos : semi - pos);
    pos = semi == std::string::npos ? text.size() + 1 : semi + 1;
    if (entry.empty()) continue;
    size_t colon = entry.find(':');
    schedule::Collective coll;
    if (colon != std::string::npos && schedule::parseCollective(entry.substr(0, colon), &coll))
      out.push_back({static_cast<int>(coll), entry.substr(colon + 1)});
    else
      out.push_back({-1, entry});
  }
  return out;
}

std::string forcedFor(const std::vector<ForcedSchedule>& entries, Collective c) {
  std::string any;
  for (const ForcedSchedule& e : entries) {
    if (e.collective == static_cast<int>(c)) return e.schedule;
    if (e.collective == -1) any = e.schedule;
  }
  return any;
}

std::string forcedSchedule(Collective c) {
  static const std::vector<ForcedSchedule> entries = [] {
    std::vector<ForcedSchedule> out = parseForcedSchedules(kForce.get());
    // A name that is neither a built-in nor a loaded user schedule can never be forced.
    for (const ForcedSchedule& e : out) {
      if (schedule::isBuiltin(e.schedule) || schedule::user::knows(e.schedule)) continue;
      std::string builtins;
      for (const std::string& b : schedule::builtinNames()) builtins += (builtins.empty() ? "" : ", ") + b;
      TH_WARN("THESEUS_SCHEDULE: no schedule is named '%s' (built-ins: %s; user schedules come from "
              "THESEUS_SCHEDULES); it is ignored", e.schedule.c_str(), builtins.c_str());
    }
    return out;
  }();
  return forcedFor(entries, c);
}

size_t smallMessageBytes() {
  static const size_t small = static_cast<size_t>(std::max<int64_t>(kSmallBytes.get(), 0));
  return small;
}

int sizeClass(size_t bytes) { return bytes <= smallMessageBytes() ? 0 : 1; }

const std::vector<DefaultRule>& defaultRules() { return kRules; }

const std::string& staticPolicyText() {
  static const std::string text = generateStaticPolicy();
  return text;
}

Choice defaultChoice(const RequestShape& req, const AlgoFilter& filter) {
  std::string forced = forcedSchedule(req.collective);
  if (!forced.empty() && scheduleSupports(forced, req.collective, req.nranks)) return Choice{forced, {}};
  return staticChoice(req, filter);
}

Choice staticChoice(const RequestShape& req, const AlgoFilter& filter) {
  const char* fallback = nullptr;
  for (const char* name : candidates(req.collective, req.sizeClass)) {
    if (!scheduleSupports(name, req.collective, req.nranks)) continue;
    if (fallback == nullptr) fallback = name;
    if (filter.allows(req.collective, name)) return Choice{name, {}};
  }
  // Nothing the filter allows serves this collective: keep working, say why.
  for (const auto& name : schedule::builtinNames()) {
    if (schedule::builtinSupports(name, req.collective, req.nranks) && filter.allows(req.collective, name))
      return Choice{name, {}};
  }
  const char* chosen = fallback ? fallback : "ring";
  // Said once per process for each collective, rank count and fallback (the choice is made per size class
  // and per table evaluation).
  static std::mutex mu;
  static std::set<std::string> said;
  std::string key = std::string(schedule::collectiveName(req.collective)) + "/" + std::to_string(req.nranks) + "/" +
                    chosen;
  bool first;
  {
    std::lock_guard<std::mutex> lock(mu);
    first = said.insert(key).second;
  }
  if (first)
    TH_INFO(log::kTuning, "NCCL_ALGO allows no schedule for %s with %d ranks; using %s",
            schedule::collectiveName(req.collective), req.nranks, chosen);
  return Choice{chosen, {}};
}

}  // namespace theseus::policy
