// Fixed-size user schedules (fixed_schedule.h): load-time verification,
// program selection, root rotation and in-place no-op removal.
#include "schedule/user/fixed_schedule.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "schedule/analysis.h"
#include "schedule/verifier.h"

namespace theseus::schedule::user {
namespace {

bool servesLayout(Layout l, bool inPlace) {
  return l == Layout::kBoth || (l == Layout::kInPlace) == inPlace;
}

// A copy whose source and destination are the same memory in this layout.
bool isNoop(const Program& p, int rank, const Step& s) {
  // A single rank's reduction: the copy onto itself is where a PreMulSum scales
  // its input (raw_input.h); it stays (the executor skips the copy itself when
  // there is nothing to scale).
  if (s.op != Op::kCopy || !p.inPlace || (p.nranks == 1 && isReducing(p.collective))) return false;
  PhysRange a = physicalRange(p, rank, s.src), b = physicalRange(p, rank, s.dst);
  return a.buf == b.buf && a.first == b.first && a.count == b.count;
}

// Everything but the steps; ranks sized nranks, empty.
Program headerOf(const Program& p) {
  Program out;
  out.name = p.name;
  out.collective = p.collective;
  out.nranks = p.nranks;
  out.root = p.root;
  out.inPlace = p.inPlace;
  out.chunksPerBlock = p.chunksPerBlock;
  out.scratchBlocks = p.scratchBlocks;
  out.nchannels = p.nchannels;
  out.ranks.resize(p.nranks);
  return out;
}

// Rank v of `p` plays rank (v + shift) mod n.
Program rotateRanks(const Program& p, int newRoot, int onlyRank) {
  const int n = p.nranks, shift = ((newRoot - p.root) % n + n) % n;
  Program out = headerOf(p);
  out.root = newRoot;
  for (int v = 0; v < n; ++v) {
    const int to = (v + shift) % n;
    if (onlyRank >= 0 && to != onlyRank) continue;
    RankProgram rp = p.ranks[v];
    for (Step& s : rp.steps) {
      if (s.recvPeer >= 0) s.recvPeer = (s.recvPeer + shift) % n;
      if (s.sendPeer >= 0) s.sendPeer = (s.sendPeer + shift) % n;
    }
    out.ranks[to] = std::move(rp);
  }
  return out;
}

}  // namespace

Program dropInPlaceNoops(const Program& p, std::vector<std::vector<uint32_t>>* kept) {
  Program out = p;
  if (kept) kept->assign(p.ranks.size(), {});
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    const std::vector<Step>& steps = p.ranks[r].steps;
    std::vector<int64_t> newIndex(steps.size(), -1);
    // Deps of a dropped step, already translated to new indices.
    std::vector<std::vector<uint32_t>> inherited(steps.size());
    std::vector<Step> result;
    std::vector<uint32_t> origin;
    for (uint32_t i = 0; i < steps.size(); ++i) {
      std::set<uint32_t> deps;
      for (uint32_t d : steps[i].deps) {
        if (d >= i) continue;  // malformed: left for the structure check (kept below)
        if (newIndex[d] >= 0) deps.insert(static_cast<uint32_t>(newIndex[d]));
        else deps.insert(inherited[d].begin(), inherited[d].end());
      }
      bool malformed = std::any_of(steps[i].deps.begin(), steps[i].deps.end(), [&](uint32_t d) { return d >= i; });
      if (!malformed && isNoop(p, static_cast<int>(r), steps[i])) {
        inherited[i].assign(deps.begin(), deps.end());
        continue;
      }
      Step s = steps[i];
      if (!malformed) s.deps.assign(deps.begin(), deps.end());
      newIndex[i] = static_cast<int64_t>(result.size());
      result.push_back(std::move(s));
      origin.push_back(i);
    }
    out.ranks[r].steps = std::move(result);
    if (kept) (*kept)[r] = std::move(origin);
  }
  return out;
}

std::string locateInMessage(const std::string& message, const FixedProgram& fp,
                            const std::vector<std::vector<uint32_t>>* kept) {
  if (!fp.locate) return message;
  size_t pos = 0;
  while ((pos = message.find("rank ", pos)) != std::string::npos) {
    int rank = -1;
    unsigned step = 0;
    int used = 0;
    if (sscanf(message.c_str() + pos, "rank %d step %u%n", &rank, &step, &used) == 2 && used > 0) {
      if (rank < 0 || rank >= fp.program.nranks) return message;
      if (kept) {
        if (static_cast<size_t>(rank) >= kept->size() || step >= (*kept)[rank].size()) return message;
        step = (*kept)[rank][step];
      }
      std::string where = fp.locate(rank, step);
      return where.empty() ? message : message + " (at " + where + ")";
    }
    pos += 5;
  }
  return message;
}

FixedSchedule::FixedSchedule(ScheduleInfo info, Collective collective, std::vector<FixedProgram> programs)
    : collective_(collective), programs_(std::move(programs)) {
  info_ = std::move(info);
}

Result<std::shared_ptr<FixedSchedule>> FixedSchedule::create(ScheduleInfo info, Collective collective,
                                                             std::vector<FixedProgram> programs) {
  if (programs.empty()) return invalidArgument("%s: the schedule has no programs", info.path.c_str());
  std::set<int> counts;
  for (FixedProgram& fp : programs) {
    fp.program.name = info.name;
    fp.program.collective = collective;
    for (int inPlace = 0; inPlace < 2; ++inPlace) {
      if (!servesLayout(fp.layout, inPlace != 0)) continue;
      fp.program.inPlace = inPlace != 0;
      std::vector<std::vector<uint32_t>> kept;
      Program checked = fp.program.inPlace ? dropInPlaceNoops(fp.program, &kept) : fp.program;
      Status st = verifyProgram(checked);
      if (st.isOk()) st = checkRunnable(checked);
      if (!st.isOk()) {
        std::string msg = locateInMessage(st.message(), fp, fp.program.inPlace ? &kept : nullptr);
        if (fp.origin.empty()) return invalidArgument("%s: %s", info.path.c_str(), msg.c_str());
        return invalidArgument("%s: %s: %s", info.path.c_str(), fp.origin.c_str(), msg.c_str());
      }
    }
    fp.program.inPlace = false;
    counts.insert(fp.program.nranks);
  }
  // Two programs for the same request would make the choice ambiguous.
  for (size_t i = 0; i < programs.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      const FixedProgram &a = programs[i], &b = programs[j];
      bool sameRoot = !isRooted(collective) || a.program.root == b.program.root;
      bool layoutsMeet = a.layout == Layout::kBoth || b.layout == Layout::kBoth || a.layout == b.layout;
      if (a.program.nranks == b.program.nranks && sameRoot && layoutsMeet)
        return invalidArgument("%s: %s and %s both serve %s nranks=%d%s (one program per rank count, root and layout)",
                               info.path.c_str(), b.origin.c_str(), a.origin.c_str(), collectiveName(collective),
                               a.program.nranks,
                               isRooted(collective) ? (" root=" + std::to_string(a.program.root)).c_str() : "");
    }
  }
  info.collectives = 1u << static_cast<unsigned>(collective);
  info.rankCounts.assign(counts.begin(), counts.end());
  return std::shared_ptr<FixedSchedule>(new FixedSchedule(std::move(info), collective, std::move(programs)));
}

bool FixedSchedule::supports(Collective c, int nranks) const {
  if (c != collective_) return false;
  for (const FixedProgram& fp : programs_)
    if (fp.program.nranks == nranks) return true;
  return false;
}

std::string FixedSchedule::available() const {
  std::string out;
  for (const FixedProgram& fp : programs_) {
    out += (out.empty() ? "" : ", ") + std::string("nranks=") + std::to_string(fp.program.nranks);
    if (isRooted(collective_)) out += " root=" + std::to_string(fp.program.root);
    out += std::string(" ") + layoutName(fp.layout);
  }
  return out;
}

const FixedProgram* FixedSchedule::pick(const GenerateRequest& req, bool* relabel) const {
  const FixedProgram* rotatable = nullptr;
  for (const FixedProgram& fp : programs_) {
    if (fp.program.nranks != req.nranks || !servesLayout(fp.layout, req.inPlace)) continue;
    if (!isRooted(collective_) || fp.program.root == req.root) {
      *relabel = false;
      return &fp;
    }
    if (!rotatable) rotatable = &fp;
  }
  bool rotates = collective_ == Collective::kBroadcast || collective_ == Collective::kReduce;
  *relabel = rotatable != nullptr;
  return rotates ? rotatable : nullptr;
}

bool FixedSchedule::serves(const GenerateRequest& req) const {
  bool relabel = false;
  return req.collective == collective_ && pick(req, &relabel) != nullptr;
}

Result<Program> FixedSchedule::generate(const GenerateRequest& req) const {
  if (req.collective != collective_)
    return invalidArgument("schedule '%s' (%s) implements %s, not %s", info_.name.c_str(), info_.path.c_str(),
                           collectiveName(collective_), collectiveName(req.collective));
  if (req.onlyRank < -1 || req.onlyRank >= req.nranks)
    return invalidArgument("schedule '%s': onlyRank %d out of range for %d ranks", info_.name.c_str(), req.onlyRank,
                           req.nranks);
  if (!req.params.toString().empty())
    return invalidArgument("schedule '%s' (%s) is a fixed program and takes no parameters (got '%s')",
                           info_.name.c_str(), info_.path.c_str(), req.params.toString().c_str());
  bool relabel = false;
  const FixedProgram* fp = pick(req, &relabel);
  if (!fp)
    return invalidArgument("schedule '%s' (%s) has no program for %s nranks=%d%s %s (it has: %s)", info_.name.c_str(),
                           info_.path.c_str(), collectiveName(req.collective), req.nranks,
                           isRooted(req.collective) ? (" root=" + std::to_string(req.root)).c_str() : "",
                           req.inPlace ? "in-place" : "out-of-place", available().c_str());
  Program p;
  if (relabel) {
    p = rotateRanks(fp->program, req.root, req.onlyRank);
  } else if (req.onlyRank >= 0) {
    p = headerOf(fp->program);
    p.ranks[req.onlyRank] = fp->program.ranks[req.onlyRank];
  } else {
    p = fp->program;
  }
  p.inPlace = req.inPlace;
  if (p.inPlace) p = dropInPlaceNoops(p);
  return p;
}

}  // namespace theseus::schedule::user
