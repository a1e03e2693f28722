// theseus-schedule sources and verification cases (schedule_tool_source.h).
#include "schedule_tool_source.h"

#include <sys/stat.h>

#include <set>

namespace theseus::tool {
namespace {

using schedule::user::FixedProgram;
using schedule::user::FixedSchedule;
using schedule::user::Layout;

const Collective kAllCollectives[] = {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                                      Collective::kBroadcast, Collective::kReduce,    Collective::kAlltoAll,
                                      Collective::kGather,    Collective::kScatter};

bool layoutServes(Layout l, bool inPlace) { return l == Layout::kBoth || (l == Layout::kInPlace) == inPlace; }

// Roots a verification covers: all of them for small rank counts.
std::vector<int> rootsFor(Collective c, int n, const Selection& sel) {
  if (!schedule::isRooted(c)) return {0};
  if (sel.root) return {*sel.root};
  if (n <= 8) {
    std::vector<int> all;
    for (int r = 0; r < n; ++r) all.push_back(r);
    return all;
  }
  return {0, n / 2, n - 1};
}

void addCase(std::vector<GenerateRequest>* out, Collective c, int n, int root, bool inPlace) {
  GenerateRequest req;
  req.collective = c;
  req.nranks = n;
  req.root = root;
  req.inPlace = inPlace;
  out->push_back(req);
}

}  // namespace

Result<Source> Source::open(const std::string& what) {
  Source s;
  struct stat st;
  if (stat(what.c_str(), &st) != 0 && schedule::isBuiltin(what)) {
    s.builtin_ = what;
    return s;
  }
  if (stat(what.c_str(), &st) != 0 && what.find('/') == std::string::npos && what.find('.') == std::string::npos) {
    std::string known;
    for (const std::string& b : schedule::builtinNames()) known += (known.empty() ? "" : ", ") + b;
    return invalidArgument("'%s' is neither a schedule file nor a built-in schedule (built-ins: %s)", what.c_str(),
                           known.c_str());
  }
  TH_ASSIGN(s.user_, schedule::user::loadFile(what));
  return s;
}

std::string Source::label() const {
  if (!builtin_.empty()) return "built-in " + builtin_;
  return std::string(schedule::user::sourceKindName(user_->info().kind)) + " " + user_->info().path;
}

std::string Source::name() const { return builtin_.empty() ? user_->name() : builtin_; }

const FixedSchedule* Source::fixed() const { return dynamic_cast<const FixedSchedule*>(user_.get()); }

bool Source::supports(Collective c, int nranks) const {
  return builtin_.empty() ? user_->supports(c, nranks) : schedule::builtinSupports(builtin_, c, nranks);
}

Result<Program> Source::generate(const GenerateRequest& req) const {
  return builtin_.empty() ? user_->generate(req) : schedule::generateBuiltin(builtin_, req);
}

std::vector<GenerateRequest> Source::cases(const Selection& sel) const {
  std::vector<GenerateRequest> out;
  if (const FixedSchedule* f = fixed()) {
    if (sel.collective && *sel.collective != f->collective()) return out;
    std::set<std::tuple<int, int, bool>> seen;
    for (const FixedProgram& fp : f->programs()) {
      const int n = fp.program.nranks;
      if (sel.nranks && *sel.nranks != n) continue;
      for (bool inPlace : {false, true}) {
        if (!layoutServes(fp.layout, inPlace) || (sel.inPlace && *sel.inPlace != inPlace)) continue;
        for (int root : rootsFor(f->collective(), n, sel))
          if (seen.insert({n, root, inPlace}).second) addCase(&out, f->collective(), n, root, inPlace);
      }
    }
    return out;
  }
  std::vector<int> counts = {1, 2, 3, 4, 5, 6, 7, 8, 16};
  if (sel.nranks) counts = {*sel.nranks};
  for (Collective c : kAllCollectives) {
    if (sel.collective && *sel.collective != c) continue;
    for (int n : counts) {
      if (!supports(c, n)) continue;
      for (bool inPlace : {false, true}) {
        if (sel.inPlace && *sel.inPlace != inPlace) continue;
        for (int root : rootsFor(c, n, sel)) addCase(&out, c, n, root, inPlace);
      }
    }
  }
  return out;
}

Result<GenerateRequest> pickCase(const Source& src, const Selection& sel) {
  Selection narrowed = sel;
  if (!narrowed.root) narrowed.root = 0;
  std::vector<GenerateRequest> all = src.cases(narrowed);
  if (all.empty())
    return invalidUsage("%s has no program for the selection (check --nranks, --collective, --root, --in-place)",
                        src.label().c_str());
  std::set<int> counts;
  std::set<Collective> colls;
  for (const GenerateRequest& r : all) {
    counts.insert(r.nranks);
    colls.insert(r.collective);
  }
  if (colls.size() > 1) return invalidUsage("%s serves several collectives: add --collective", src.label().c_str());
  if (counts.size() > 1 && !src.fixed()) return invalidUsage("%s: add --nranks N", src.label().c_str());
  if (counts.size() > 1) {
    std::string list;
    for (int n : counts) list += (list.empty() ? "" : ", ") + std::to_string(n);
    return invalidUsage("%s has programs for nranks %s: add --nranks N", src.label().c_str(), list.c_str());
  }
  return all.front();  // out-of-place first when both layouts exist
}

std::string caseText(const GenerateRequest& req) {
  std::string out = std::string(schedule::collectiveName(req.collective)) + " nranks=" + std::to_string(req.nranks);
  if (schedule::isRooted(req.collective)) out += " root=" + std::to_string(req.root);
  out += req.inPlace ? " in-place" : " out-of-place";
  return out;
}

}  // namespace theseus::tool
