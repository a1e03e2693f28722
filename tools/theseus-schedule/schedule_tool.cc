// theseus-schedule: verify, inspect, cost and export schedules.
//
//   theseus-schedule verify FILE [--nranks N] [--collective C] [--root R] [--in-place|--out-of-place]
//   theseus-schedule show   FILE [selection] [--bytes B] [--alpha-us A] [--beta-gbps B] [--local-gbps L] [--no-steps]
//   theseus-schedule export FILE [selection] [--name NAME]
//   theseus-schedule list   [SPEC]
//
// FILE is a JSON schedule, an MSCCL XML algorithm, a schedule plugin (.so) or
// a built-in's name. Exit codes: 0 ok, 1 invalid schedule (it does not load,
// or a program fails verification), 2 usage error.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/knobs.h"
#include "schedule/user/cost_model.h"
#include "schedule/user/json_schedule.h"
#include "schedule/verifier.h"
#include "schedule_tool_show.h"
#include "schedule_tool_source.h"

namespace {

using namespace theseus;
using namespace theseus::tool;
using schedule::user::FixedProgram;
using schedule::user::Layout;

constexpr int kOk = 0, kInvalid = 1, kUsage = 2;

const char* const kUsageText =
    "usage:\n"
    "  theseus-schedule verify FILE [--nranks N] [--collective C] [--root R] [--in-place|--out-of-place]\n"
    "  theseus-schedule show   FILE [--nranks N] [--collective C] [--root R] [--in-place] [--bytes B]\n"
    "                               [--alpha-us A] [--beta-gbps B] [--local-gbps L] [--no-steps]\n"
    "  theseus-schedule export FILE [--nranks N] [--collective C] [--root R] [--name NAME]\n"
    "  theseus-schedule list   [SPEC]        (SPEC defaults to $THESEUS_SCHEDULES)\n"
    "FILE: a JSON schedule (.json), an MSCCL algorithm (.xml), a schedule plugin (.so) or a built-in name.\n"
    "B is the size of one block in bytes (NCCL's count x element size), K/M/G suffixes allowed.\n"
    "exit codes: 0 ok, 1 invalid schedule, 2 usage error\n";

struct Options {
  std::string command, file;
  Selection sel;
  size_t bytes = 1 << 20;
  schedule::user::LinkParams link;
  bool steps = true;
  std::string name;
};

int usage(const char* why) {
  if (why) fprintf(stderr, "theseus-schedule: %s\n", why);
  fputs(kUsageText, stderr);
  return kUsage;
}

bool parseNumber(const char* text, double* out) {
  char* end = nullptr;
  *out = strtod(text, &end);
  return end != text && *end == '\0';
}

// Returns "" or the usage problem.
std::string parseOption(int argc, char** argv, int* i, Options* o) {
  std::string a = argv[*i];
  auto value = [&]() -> const char* { return *i + 1 < argc ? argv[++*i] : nullptr; };
  if (a == "--in-place" || a == "--out-of-place") {
    o->sel.inPlace = a == "--in-place";
    return "";
  }
  if (a == "--no-steps") {
    o->steps = false;
    return "";
  }
  const char* v = value();
  if (!v) return a + " needs a value";
  if (a == "--nranks" || a == "--root") {
    auto n = parseIntWithSuffix(v);
    if (!n || *n < (a == "--root" ? 0 : 1) || *n > (1 << 20)) return a + ": '" + v + "' is not a valid number";
    (a == "--nranks" ? o->sel.nranks : o->sel.root) = static_cast<int>(*n);
  } else if (a == "--collective") {
    schedule::Collective c;
    if (!schedule::parseCollective(v, &c)) return std::string("--collective: unknown collective '") + v + "'";
    o->sel.collective = c;
  } else if (a == "--bytes") {
    auto n = parseIntWithSuffix(v);
    if (!n || *n < 0) return std::string("--bytes: '") + v + "' is not a byte count";
    o->bytes = static_cast<size_t>(*n);
  } else if (a == "--alpha-us" || a == "--beta-gbps" || a == "--local-gbps") {
    double d;
    if (!parseNumber(v, &d) || d < 0 || (a == "--beta-gbps" && d <= 0)) return a + ": '" + v + "' is not valid";
    (a == "--alpha-us" ? o->link.alphaUs : a == "--beta-gbps" ? o->link.betaGBps : o->link.localGBps) = d;
  } else if (a == "--name") {
    o->name = v;
  } else {
    return "unknown option " + a;
  }
  return "";
}

// Generates and verifies one case.
Result<Program> verifiedProgram(const Source& src, const GenerateRequest& req) {
  Result<Program> p = src.generate(req);
  if (!p.isOk()) return p.status();
  Status st = schedule::verifyProgram(p.value());
  if (st.isOk()) st = schedule::user::checkRunnable(p.value());
  if (!st.isOk()) return st;
  return p;
}

int runVerify(const Source& src, const Options& o) {
  std::vector<GenerateRequest> cases = src.cases(o.sel);
  printf("verifying %s (schedule '%s')\n", src.label().c_str(), src.name().c_str());
  if (cases.empty()) {
    fprintf(stderr, "INVALID: %s has no program for the requested rank count / collective / layout\n",
            src.label().c_str());
    return kInvalid;
  }
  for (const GenerateRequest& req : cases) {
    Result<Program> p = verifiedProgram(src, req);
    if (!p.isOk()) {
      fprintf(stderr, "INVALID: %s: %s\n", caseText(req).c_str(), p.status().message().c_str());
      return kInvalid;
    }
    size_t steps = 0;
    for (const schedule::RankProgram& rp : p.value().ranks) steps += rp.steps.size();
    printf("  ok  %-40s %zu steps, %u chunk(s) per block, %u scratch block(s), %u channel(s)\n",
           caseText(req).c_str(), steps, p.value().chunksPerBlock, p.value().scratchBlocks, p.value().nchannels);
  }
  printf("OK: %zu case(s) verified\n", cases.size());
  return kOk;
}

int runShow(const Source& src, const Options& o) {
  Result<GenerateRequest> req = pickCase(src, o.sel);
  if (!req.isOk()) return usage(req.status().message().c_str());
  Result<Program> p = verifiedProgram(src, req.value());
  if (!p.isOk()) {
    fprintf(stderr, "INVALID: %s: %s\n", caseText(req.value()).c_str(), p.status().message().c_str());
    return kInvalid;
  }
  const Program& prog = p.value();
  printf("schedule '%s' (%s)\n", src.name().c_str(), src.label().c_str());
  printf("  %s, %u chunk(s) per block, %u scratch block(s), %u channel(s), verified\n", caseText(req.value()).c_str(),
         prog.chunksPerBlock, prog.scratchBlocks, prog.nchannels);
  if (const schedule::user::UserSchedule* u = src.user()) {
    const schedule::user::ScheduleInfo& info = u->info();
    if (!info.description.empty()) printf("  %s\n", info.description.c_str());
    if (info.minBytes != 0 || info.maxBytes != UINT64_MAX)
      printf("  meant for %llu..%llu bytes\n", static_cast<unsigned long long>(info.minBytes),
             static_cast<unsigned long long>(info.maxBytes));
  }
  if (o.steps) {
    printf("\n");
    printSteps(stdout, prog);
  }
  Result<schedule::user::CostEstimate> cost = schedule::user::estimateCost(prog, o.bytes, o.link);
  if (!cost.isOk()) {
    fprintf(stderr, "INVALID: %s\n", cost.status().message().c_str());
    return kInvalid;
  }
  printCost(stdout, prog, cost.value(), o.bytes, o.link);
  return kOk;
}

// JSON for the selected case(s); fixed schedules without a selection export every program.
int runExport(const Source& src, const Options& o) {
  const schedule::user::FixedSchedule* f = src.fixed();
  std::string name = o.name.empty() ? src.name() : o.name;
  std::vector<FixedProgram> programs;
  bool selected = o.sel.nranks || o.sel.root || o.sel.collective || o.sel.inPlace;
  if (f && !selected) {
    programs = f->programs();
  } else {
    Result<GenerateRequest> req = pickCase(src, o.sel);
    if (!req.isOk()) return usage(req.status().message().c_str());
    GenerateRequest out = req.value(), in = req.value();
    out.inPlace = false;
    in.inPlace = true;
    Result<Program> a = verifiedProgram(src, out), b = verifiedProgram(src, in);
    for (const Result<Program>* r : {&a, &b})
      if (!r->isOk()) {
        fprintf(stderr, "INVALID: %s\n", r->status().message().c_str());
        return kInvalid;
      }
    bool same = a.value().ranks.size() == b.value().ranks.size();
    for (size_t r = 0; same && r < a.value().ranks.size(); ++r) {
      const auto &x = a.value().ranks[r].steps, &y = b.value().ranks[r].steps;
      same = x.size() == y.size();
      for (size_t i = 0; same && i < x.size(); ++i)
        same = x[i].op == y[i].op && x[i].channel == y[i].channel && x[i].recvPeer == y[i].recvPeer &&
               x[i].sendPeer == y[i].sendPeer && x[i].src == y[i].src && x[i].dst == y[i].dst && x[i].deps == y[i].deps;
    }
    programs.push_back({a.value(), same ? Layout::kBoth : Layout::kOutOfPlace, "", nullptr});
    if (!same) programs.push_back({b.value(), Layout::kInPlace, "", nullptr});
    if (o.name.empty() && !f && !src.user()) name = src.name() + "_" + schedule::collectiveName(out.collective) +
                                                    "_" + std::to_string(out.nranks);
  }
  Status st = schedule::user::checkScheduleName(name);
  if (!st.isOk()) return usage((st.message() + " (choose one with --name)").c_str());
  std::string description = src.user() ? src.user()->info().description : "exported from " + src.label();
  fputs(schedule::user::programsToJson(name, programs.front().program.collective, description, programs).c_str(),
        stdout);
  return kOk;
}

int runList(const std::string& spec) {
  schedule::user::Registry registry;
  std::vector<Status> errors = registry.addSpec(spec);
  for (const schedule::user::ScheduleHandle& s : registry.all()) {
    const schedule::user::ScheduleInfo& info = s->info();
    std::string colls, counts;
    for (unsigned c = 0; c < 32; ++c)
      if (info.collectives >> c & 1)
        colls += (colls.empty() ? "" : ",") + std::string(schedule::collectiveName(static_cast<Collective>(c)));
    for (int n : info.rankCounts) counts += (counts.empty() ? "" : ",") + std::to_string(n);
    printf("%-28s %-9s %-14s nranks=%-10s %s\n", info.name.c_str(), schedule::user::sourceKindName(info.kind),
           colls.c_str(), counts.empty() ? "any" : counts.c_str(), info.path.c_str());
  }
  for (const Status& e : errors) fprintf(stderr, "skipped: %s\n", e.message().c_str());
  return errors.empty() ? kOk : kInvalid;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    fputs(kUsageText, stdout);
    return kOk;
  }
  if (argc < 2) return usage("missing command");
  Options o;
  o.command = argv[1];
  if (o.command == "list") {
    if (argc > 3) return usage("list takes at most one argument");
    const char* env = getenv("THESEUS_SCHEDULES");
    return runList(argc == 3 ? argv[2] : env ? env : "");
  }
  if (o.command != "verify" && o.command != "show" && o.command != "export")
    return usage(("unknown command '" + o.command + "'").c_str());
  if (argc < 3 || argv[2][0] == '-') return usage((o.command + " needs a FILE").c_str());
  o.file = argv[2];
  for (int i = 3; i < argc; ++i) {
    std::string why = parseOption(argc, argv, &i, &o);
    if (!why.empty()) return usage(why.c_str());
  }
  Result<Source> src = Source::open(o.file);
  if (!src.isOk()) {
    fprintf(stderr, "INVALID: %s\n", src.status().message().c_str());
    return kInvalid;
  }
  if (o.command == "verify") return runVerify(src.value(), o);
  if (o.command == "show") return runShow(src.value(), o);
  return runExport(src.value(), o);
}
