#include "policy/algo_filter.h"

#include <cctype>

#include "common/knobs.h"
#include "common/log.h"

namespace theseus::policy {
namespace {

const StringKnob kNcclAlgo("NCCL_ALGO", nullptr,
                           "Restricts schedule choice, NCCL syntax: 'ring', '^nvls', 'ring;allreduce:tree'. Ring -> "
                           "ring, Tree -> tree/double_binary_tree; Theseus schedule names also accepted");

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// NCCL algorithm or Theseus schedule name -> schedules it stands for (empty: no host equivalent / unknown).
std::set<std::string> schedulesFor(const std::string& name) {
  std::string n = lower(name);
  if (n == "ring") return {"ring"};
  if (n == "tree") return {"tree", "double_binary_tree"};
  static const char* ours[] = {"double_binary_tree", "recursive_doubling", "halving_doubling", "direct",
                               "hierarchical"};
  for (const char* o : ours)
    if (n == o) return {o};
  if (n == "collnetdirect" || n == "collnetchain" || n == "nvls" || n == "nvlstree" || n == "pat") {
    TH_INFO(log::kTuning | log::kEnv, "NCCL_ALGO: '%s' has no host-memory equivalent in Theseus; ignored",
            name.c_str());
  } else {
    TH_INFO(log::kTuning | log::kEnv, "NCCL_ALGO: unknown algorithm '%s' ignored", name.c_str());
  }
  return {};
}

}  // namespace

Result<AlgoFilter> AlgoFilter::parse(const std::string& text) {
  AlgoFilter f;
  size_t pos = 0;
  bool first = true;
  while (pos <= text.size()) {
    size_t semi = text.find(';', pos);
    std::string entry = trim(text.substr(pos, semi == std::string::npos ? std::string::npos : semi - pos));
    pos = semi == std::string::npos ? text.size() + 1 : semi + 1;
    if (entry.empty()) continue;
    Rule* rule = &f.all_;
    size_t colon = entry.find(':');
    if (colon != std::string::npos) {
      schedule::Collective c;
      std::string func = trim(entry.substr(0, colon));
      if (!schedule::parseCollective(func, &c))
        return invalidUsage("NCCL_ALGO='%s': unknown function prefix '%s'", text.c_str(), func.c_str());
      rule = &f.perCollective_[static_cast<int>(c)];
      entry = trim(entry.substr(colon + 1));
    } else if (!first) {
      return invalidUsage("NCCL_ALGO='%s': only the first entry may omit the function prefix", text.c_str());
    }
    first = false;
    rule->set = true;
    if (!entry.empty() && entry[0] == '^') {
      rule->invert = true;
      entry = entry.substr(1);
    }
    size_t p = 0;
    while (p <= entry.size()) {
      size_t comma = entry.find(',', p);
      std::string name = trim(entry.substr(p, comma == std::string::npos ? std::string::npos : comma - p));
      p = comma == std::string::npos ? entry.size() + 1 : comma + 1;
      if (name.empty()) continue;
      for (const auto& s : schedulesFor(name)) rule->schedules.insert(s);
    }
    // A positive list naming only things we do not have restricts nothing.
    if (!rule->invert && rule->schedules.empty()) rule->set = false;
  }
  return f;
}

const AlgoFilter& AlgoFilter::fromEnv() {
  static const AlgoFilter filter = [] {
    auto r = parse(kNcclAlgo.get());
    if (!r.isOk()) {
      TH_WARN("%s; NCCL_ALGO ignored", r.status().message().c_str());
      return AlgoFilter();
    }
    return r.take();
  }();
  return filter;
}

bool AlgoFilter::allows(schedule::Collective c, const std::string& schedule) const {
  const Rule& specific = perCollective_[static_cast<int>(c)];
  const Rule& rule = specific.set ? specific : all_;
  if (!rule.set) return true;
  bool listed = rule.schedules.count(schedule) > 0;
  return rule.invert ? !listed : listed;
}

bool AlgoFilter::restricts(schedule::Collective c) const {
  return perCollective_[static_cast<int>(c)].set || all_.set;
}

}  // namespace theseus::policy
