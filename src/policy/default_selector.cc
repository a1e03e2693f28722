#include "policy/default_selector.h"

#include <algorithm>

#include "common/knobs.h"
#include "common/log.h"

namespace theseus::policy {
namespace {

using schedule::Collective;

const StringKnob kForce("THESEUS_SCHEDULE", nullptr,
                         "Force schedules by name: 'ring', or per collective 'allreduce:my_sched;allgather:ring' "
                         "(built-ins or user schedules from THESEUS_SCHEDULES); ignored where it does not apply");

const IntKnob kSmallBytes("THESEUS_SMALL_MSG_BYTES", 32 << 10,
                          "Default policy: operations up to this size use latency-optimal schedules "
                          "(recursive doubling, trees, direct); larger ones use bandwidth-optimal rings");

// Candidates in preference order for a size class.
std::vector<const char*> candidates(const RequestShape& r, bool small) {
  switch (r.collective) {
    case Collective::kAllReduce:
      return small ? std::vector<const char*>{"recursive_doubling", "halving_doubling", "tree", "ring"}
                   : std::vector<const char*>{"ring", "halving_doubling", "double_binary_tree", "tree"};
    case Collective::kAllGather:
      return small ? std::vector<const char*>{"recursive_doubling", "direct", "ring"}
                   : std::vector<const char*>{"ring", "direct", "recursive_doubling"};
    case Collective::kReduceScatter:
      return small ? std::vector<const char*>{"halving_doubling", "direct", "ring"}
                   : std::vector<const char*>{"ring", "halving_doubling", "direct"};
    case Collective::kBroadcast:
      return small ? std::vector<const char*>{"tree", "direct", "ring"}
                   : std::vector<const char*>{"ring", "double_binary_tree", "tree", "direct"};
    case Collective::kReduce:
      return small ? std::vector<const char*>{"tree", "direct", "ring"}
                   : std::vector<const char*>{"ring", "tree", "direct"};
    case Collective::kAlltoAll:
    case Collective::kGather:
    case Collective::kScatter: return {"direct", "ring"};
  }
  return {"ring"};
}

}  // namespace

bool scheduleSupports(const std::string& name, schedule::Collective c, int nranks) {
  return schedule::builtinSupports(name, c, nranks);
}

std::string forcedSchedule(Collective c) {
  static const std::vector<std::pair<int, std::string>> rules = [] {
    std::vector<std::pair<int, std::string>> out;  // (collective or -1 for all, name)
    std::string text = kForce.get();
    size_t pos = 0;
    while (pos <= text.size() && !text.empty()) {
      size_t semi = text.find(';', pos);
      std::string entry = text.substr(pos, semi == std::string::npos ? std::string::npos : semi - pos);
      pos = semi == std::string::npos ? text.size() + 1 : semi + 1;
      if (entry.empty()) continue;
      size_t colon = entry.find(':');
      schedule::Collective coll;
      if (colon != std::string::npos && schedule::parseCollective(entry.substr(0, colon), &coll))
        out.emplace_back(static_cast<int>(coll), entry.substr(colon + 1));
      else
        out.emplace_back(-1, entry);
    }
    return out;
  }();
  std::string any;
  for (const auto& [coll, name] : rules) {
    if (coll == static_cast<int>(c)) return name;
    if (coll == -1) any = name;
  }
  return any;
}

size_t smallMessageBytes() {
  static const size_t small = static_cast<size_t>(std::max<int64_t>(kSmallBytes.get(), 0));
  return small;
}

int sizeClass(size_t bytes) { return bytes <= smallMessageBytes() ? 0 : 1; }

Choice defaultChoice(const RequestShape& req, const AlgoFilter& filter) {
  std::string forced = forcedSchedule(req.collective);
  if (!forced.empty() && scheduleSupports(forced, req.collective, req.nranks)) return Choice{forced, {}};
  bool small = req.sizeClass == 0;
  const char* fallback = nullptr;
  for (const char* name : candidates(req, small)) {
    if (!scheduleSupports(name, req.collective, req.nranks)) continue;
    if (fallback == nullptr) fallback = name;
    if (filter.allows(req.collective, name)) return Choice{name, {}};
  }
  // Nothing the filter allows serves this collective: keep working, say why.
  for (const auto& name : schedule::builtinNames()) {
    if (schedule::builtinSupports(name, req.collective, req.nranks) && filter.allows(req.collective, name))
      return Choice{name, {}};
  }
  TH_INFO(log::kTuning, "NCCL_ALGO allows no schedule for %s with %d ranks; using %s",
          schedule::collectiveName(req.collective), req.nranks, fallback ? fallback : "ring");
  return Choice{fallback ? fallback : "ring", {}};
}

}  // namespace theseus::policy
