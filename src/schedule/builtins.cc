// The built-in registry: parameters, request validation, the one-rank case and
// dispatch to the generator files (builtin_*.cc).
#include "schedule/builtins.h"

#include <cerrno>
#include <cstdlib>
#include <functional>

#include "schedule/builtin_common.h"

namespace theseus::schedule {
namespace {

using Generator = Result<Program> (*)(const GenerateRequest&, const std::string&);

constexpr uint32_t bit(Collective c) { return 1u << static_cast<unsigned>(c); }
constexpr uint32_t kAllCollectives = bit(Collective::kBroadcast) | bit(Collective::kReduce) |
                                     bit(Collective::kAllGather) | bit(Collective::kReduceScatter) |
                                     bit(Collective::kAllReduce) | bit(Collective::kAlltoAll) |
                                     bit(Collective::kScatter) | bit(Collective::kGather);

struct Entry {
  const char* name;
  uint32_t collectives;
  Generator generate;
  bool takesOrder, takesBidirectional, takesPipeline;
};

const Entry kEntries[] = {
    {"ring",
     bit(Collective::kAllReduce) | bit(Collective::kAllGather) | bit(Collective::kReduceScatter) |
         bit(Collective::kBroadcast) | bit(Collective::kReduce),
     builtin::generateRing, true, true, true},
    {"tree", bit(Collective::kAllReduce) | bit(Collective::kBroadcast) | bit(Collective::kReduce),
     builtin::generateTree, true, false, true},
    {"double_binary_tree", bit(Collective::kAllReduce) | bit(Collective::kBroadcast) | bit(Collective::kReduce),
     builtin::generateDoubleBinaryTree, true, false, true},
    {"recursive_doubling", bit(Collective::kAllReduce) | bit(Collective::kAllGather),
     builtin::generateRecursiveDoubling, false, false, false},
    {"halving_doubling", bit(Collective::kAllReduce) | bit(Collective::kReduceScatter),
     builtin::generateHalvingDoubling, false, false, false},
    {"direct", kAllCollectives, builtin::generateDirect, false, false, false},
    {"hierarchical", bit(Collective::kAllReduce) | bit(Collective::kAllGather) | bit(Collective::kBroadcast),
     builtin::generateHierarchical, false, false, true},
};

const Entry* find(const std::string& name) {
  for (const Entry& e : kEntries)
    if (name == e.name) return &e;
  return nullptr;
}

std::string supportedList(const Entry& e) {
  std::string out;
  for (unsigned c = 0; c < 32; ++c) {
    if (!(e.collectives >> c & 1)) continue;
    out += (out.empty() ? "" : ", ") + std::string(collectiveName(static_cast<Collective>(c)));
  }
  return out;
}

Status checkOrder(const std::vector<int>& order, int n) {
  if (order.empty()) return Status::ok();
  if (order.size() != static_cast<size_t>(n))
    return invalidArgument("order has %zu entries for %d ranks (it must be a permutation of 0..%d)", order.size(), n,
                           n - 1);
  std::vector<char> seen(n, 0);
  for (int r : order) {
    if (r < 0 || r >= n) return invalidArgument("order entry %d is out of range for %d ranks", r, n);
    if (seen[r]++) return invalidArgument("order lists rank %d twice (it must be a permutation)", r);
  }
  return Status::ok();
}

Status validate(const Entry& e, const GenerateRequest& req) {
  const ScheduleParams& prm = req.params;
  if (req.nranks < 1 || req.nranks > (1 << 20)) return invalidArgument("nranks %d out of range", req.nranks);
  if (!(e.collectives & bit(req.collective)))
    return invalidArgument("schedule '%s' does not implement %s (it implements %s)", e.name,
                           collectiveName(req.collective), supportedList(e).c_str());
  if (isRooted(req.collective) && (req.root < 0 || req.root >= req.nranks))
    return invalidArgument("root %d out of range for %d ranks", req.root, req.nranks);
  if (req.onlyRank < -1 || req.onlyRank >= req.nranks)
    return invalidArgument("onlyRank %d out of range for %d ranks", req.onlyRank, req.nranks);
  if (prm.channels < 1 || prm.channels > ScheduleParams::kMaxChannels)
    return invalidArgument("channels=%d out of range 1..%d", prm.channels, ScheduleParams::kMaxChannels);
  if (prm.pipelineChunks < 0 || prm.pipelineChunks > ScheduleParams::kMaxPipelineChunks)
    return invalidArgument("pipeline=%d out of range 0..%d", prm.pipelineChunks, ScheduleParams::kMaxPipelineChunks);
  if (!prm.order.empty() && !e.takesOrder) return invalidArgument("schedule '%s' takes no 'order' parameter", e.name);
  if (prm.bidirectional && !e.takesBidirectional)
    return invalidArgument("schedule '%s' takes no 'bidirectional' parameter", e.name);
  if (prm.pipelineChunks && !e.takesPipeline)
    return invalidArgument("schedule '%s' takes no 'pipeline' parameter", e.name);
  TH_CHECK(checkOrder(prm.order, req.nranks));
  if (!req.hostOf.empty()) {
    if (req.hostOf.size() != static_cast<size_t>(req.nranks))
      return invalidArgument("hostOf has %zu entries for %d ranks", req.hostOf.size(), req.nranks);
    for (size_t r = 0; r < req.hostOf.size(); ++r)
      if (req.hostOf[r] < 0) return invalidArgument("hostOf[%zu] = %d is negative", r, req.hostOf[r]);
  }
  return Status::ok();
}

// One rank: the output is the input (every collective has one block each way).
// One rank: its input is the result. In place, a reduction keeps the copy onto
// itself: it is the one read of the rank's input, where a PreMulSum scales it.
Program localProgram(const GenerateRequest& req, const std::string& name) {
  builtin::Builder b(req, name, 1, 1, 0);
  b.copy(0, ChunkRange{Buf::kInput, 0, 1}, ChunkRange{Buf::kOutput, 0, 1}, isReducing(req.collective));
  return b.finish();
}

bool parseInt(const std::string& text, int* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long v = strtol(text.c_str(), &end, 10);
  if (errno || *end || v < -(1l << 30) || v > (1l << 30)) return false;
  *out = static_cast<int>(v);
  return true;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

Status parseField(const std::string& key, const std::string& value, ScheduleParams* out) {
  if (key == "order") {
    out->order.clear();
    size_t pos = 0;
    while (pos <= value.size()) {
      size_t comma = value.find(',', pos);
      std::string item = trim(value.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
      int r;
      if (!parseInt(item, &r)) return invalidArgument("order: '%s' is not a rank", item.c_str());
      out->order.push_back(r);
      pos = comma == std::string::npos ? value.size() + 1 : comma + 1;
    }
    return Status::ok();
  }
  if (key == "bidirectional") {
    if (value == "1" || value == "true") out->bidirectional = true;
    else if (value == "0" || value == "false") out->bidirectional = false;
    else return invalidArgument("bidirectional: '%s' is not 0/1/true/false", value.c_str());
    return Status::ok();
  }
  int* target = key == "channels" ? &out->channels : key == "pipeline" ? &out->pipelineChunks : nullptr;
  if (!target) return invalidArgument("unknown parameter '%s' (known: order, channels, bidirectional, pipeline)",
                                      key.c_str());
  if (!parseInt(value, target)) return invalidArgument("%s: '%s' is not an integer", key.c_str(), value.c_str());
  return Status::ok();
}

}  // namespace

std::string ScheduleParams::toString() const {
  std::string out;
  auto field = [&](const std::string& text) { out += (out.empty() ? "" : ";") + text; };
  if (!order.empty()) {
    std::string list;
    for (size_t i = 0; i < order.size(); ++i) list += (i ? "," : "") + std::to_string(order[i]);
    field("order=" + list);
  }
  if (channels != 1) field("channels=" + std::to_string(channels));
  if (bidirectional) field("bidirectional=1");
  if (pipelineChunks != 0) field("pipeline=" + std::to_string(pipelineChunks));
  return out;
}

Result<ScheduleParams> ScheduleParams::parse(const std::string& text) {
  ScheduleParams prm;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t semi = text.find(';', pos);
    std::string field = trim(text.substr(pos, semi == std::string::npos ? std::string::npos : semi - pos));
    pos = semi == std::string::npos ? text.size() : semi + 1;
    if (field.empty()) continue;
    size_t eq = field.find('=');
    if (eq == std::string::npos)
      return invalidArgument("schedule parameters '%s': '%s' is not key=value", text.c_str(), field.c_str());
    Status st = parseField(trim(field.substr(0, eq)), trim(field.substr(eq + 1)), &prm);
    if (!st.isOk()) return st.withContext("schedule parameters '" + text + "'");
  }
  return prm;
}

size_t ScheduleParams::hash() const {
  size_t h = std::hash<int>()(channels) * 31 + static_cast<size_t>(bidirectional);
  h = h * 1000003 + static_cast<size_t>(pipelineChunks);
  for (int r : order) h = h * 1000003 + static_cast<size_t>(r) + 1;
  return h ^ (order.size() << 48);
}

const std::vector<std::string>& builtinNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Entry& e : kEntries) v.push_back(e.name);
    return v;
  }();
  return names;
}

bool isBuiltin(const std::string& name) { return find(name) != nullptr; }

bool builtinSupports(const std::string& name, Collective c, int nranks) {
  const Entry* e = find(name);
  return e && nranks >= 1 && (e->collectives & bit(c));
}

Result<Program> generateBuiltin(const std::string& name, const GenerateRequest& req) {
  const Entry* e = find(name);
  if (!e) {
    std::string known;
    for (const Entry& x : kEntries) known += (known.empty() ? "" : ", ") + std::string(x.name);
    return invalidArgument("unknown built-in schedule '%s' (built-ins: %s)", name.c_str(), known.c_str());
  }
  Status st = validate(*e, req);
  if (!st.isOk()) return st.withContext("schedule '" + name + "' for " + collectiveName(req.collective));
  std::string params = req.params.toString();
  std::string label = params.empty() ? name : name + "(" + params + ")";
  if (req.nranks == 1) return localProgram(req, label);
  return e->generate(req, label);
}

}  // namespace theseus::schedule
