#include "policy/algo_filter.h"

#include <cctype>

#include "common/knobs.h"
#include "common/log.h"
#include "policy/nccl_algorithms.h"

namespace theseus::policy {
namespace {

const StringKnob kNcclAlgo("NCCL_ALGO", nullptr,
                           "Restricts schedule choice, NCCL syntax: 'ring', '^nvls', 'ring;allreduce:tree'. Ring -> "
                           "ring, Tree -> tree/double_binary_tree, PAT -> recursive_doubling/halving_doubling; "
                           "Theseus schedule names also accepted");

const StringKnob kNcclProto("NCCL_PROTO", nullptr,
                            "Protocols an NCCL tuner plugin may choose, NCCL syntax: 'Simple', '^LL128', "
                            "'allreduce:LL,Simple'. Theseus runs one protocol; this limits the tuner's cost table");

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// NCCL algorithm or Theseus schedule name -> schedules it stands for (empty: no host-memory equivalent / unknown).
std::set<std::string> schedulesFor(const std::string& name) {
  std::string n = lower(name);
  static const char* ours[] = {"ring", "tree", "double_binary_tree", "recursive_doubling", "halving_doubling",
                               "direct", "hierarchical"};
  if (n == "tree") return {"tree", "double_binary_tree"};
  for (const char* o : ours)
    if (n == o) return {o};
  int algo = ncclAlgorithmIndex(name);
  if (algo >= 0) {
    auto schedules = schedulesForNcclAlgorithm(algo);
    if (schedules.empty())
      TH_INFO(log::kTuning | log::kEnv, "NCCL_ALGO: '%s' has no host-memory equivalent in Theseus; ignored",
              name.c_str());
    return {schedules.begin(), schedules.end()};
  }
  TH_INFO(log::kTuning | log::kEnv, "NCCL_ALGO: unknown algorithm '%s' ignored", name.c_str());
  return {};
}

// NCCL protocol name -> itself in canonical spelling (empty: unknown).
std::set<std::string> protocolsFor(const std::string& name) {
  int proto = ncclProtocolIndex(name);
  if (proto >= 0) return {ncclProtocolName(proto)};
  TH_INFO(log::kTuning | log::kEnv, "NCCL_PROTO: unknown protocol '%s' ignored", name.c_str());
  return {};
}

}  // namespace

Result<AlgoFilter> AlgoFilter::parse(const std::string& text) { return parseWith(text, "NCCL_ALGO", schedulesFor); }

Result<AlgoFilter> AlgoFilter::parseProtocols(const std::string& text) {
  return parseWith(text, "NCCL_PROTO", protocolsFor);
}

Result<AlgoFilter> AlgoFilter::parseWith(const std::string& text, const char* variable,
                                         std::set<std::string> (*namesFor)(const std::string&)) {
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
        return invalidUsage("%s='%s': unknown function prefix '%s'", variable, text.c_str(), func.c_str());
      rule = &f.perCollective_[static_cast<int>(c)];
      entry = trim(entry.substr(colon + 1));
    } else if (!first) {
      return invalidUsage("%s='%s': only the first entry may omit the function prefix", variable, text.c_str());
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
      for (const auto& s : namesFor(name)) rule->schedules.insert(s);
    }
    // A positive list naming only things we do not have restricts nothing.
    if (!rule->invert && rule->schedules.empty()) rule->set = false;
  }
  return f;
}

// The filter a variable describes, parsed once; a bad value is a WARN and filters nothing.
static AlgoFilter filterFromEnv(const StringKnob& knob, Result<AlgoFilter> (*parse)(const std::string&),
                                const char* effect, const char* note) {
  auto r = parse(knob.get());
  if (!r.isOk()) {
    TH_WARN("%s; %s ignored", r.status().message().c_str(), knob.name());
    return AlgoFilter();
  }
  if (knob.isSet())
    TH_INFO(log::kTuning | log::kEnv, "%s=%s takes effect%s %s%s", knob.name(), knob.get().c_str(), effect,
            r.value().describe().c_str(), note);
  return r.take();
}

const AlgoFilter& AlgoFilter::fromEnv() {
  static const AlgoFilter filter = filterFromEnv(kNcclAlgo, &AlgoFilter::parse, ": schedules allowed", "");
  return filter;
}

const AlgoFilter& AlgoFilter::protocolsFromEnv() {
  static const AlgoFilter filter =
      filterFromEnv(kNcclProto, &AlgoFilter::parseProtocols, " on the NCCL tuner's cost table: protocols allowed",
                    " (Theseus runs one protocol for all of them)");
  return filter;
}

bool AlgoFilter::allows(schedule::Collective c, const std::string& schedule) const {
  const Rule& specific = perCollective_[static_cast<int>(c)];
  const Rule& rule = specific.set ? specific : all_;
  if (!rule.set) return true;
  bool listed = rule.schedules.count(schedule) > 0;
  return rule.invert ? !listed : listed;
}

std::string AlgoFilter::describe() const {
  auto rule = [](const Rule& r) {
    if (!r.set) return std::string("all");
    std::string names;
    for (const auto& s : r.schedules) names += (names.empty() ? "" : ",") + s;
    return (r.invert ? "all but " : "") + (names.empty() ? std::string("none") : names);
  };
  std::string out = rule(all_);
  for (int c = 0; c < 11; ++c)
    if (perCollective_[c].set)
      out += std::string("; ") + schedule::collectiveName(static_cast<schedule::Collective>(c)) + ": " +
             rule(perCollective_[c]);
  return out;
}

bool AlgoFilter::restricts(schedule::Collective c) const {
  return perCollective_[static_cast<int>(c)].set || all_.set;
}

}  // namespace theseus::policy
