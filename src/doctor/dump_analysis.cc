#include "doctor/dump_analysis.h"

#include <algorithm>
#include <map>
#include <regex>
#include <set>

#include "doctor/arrivals.h"
#include "doctor/dump_measurements.h"

namespace theseus::doctor {
namespace {

std::string describe(const DumpOp& o) {
  std::string s = o.op + " #" + std::to_string(o.seq) + " (" + std::to_string(o.count) + " x " + o.dtype + ", " +
                  o.state + ")";
  if (!o.waiting.empty()) s += ": " + (o.waiting.size() > 160 ? o.waiting.substr(0, 157) + "..." : o.waiting);
  return s;
}

const DumpOp* lastCollective(const RankDump& r) {
  const DumpOp* last = nullptr;
  for (const DumpOp& o : r.ops)
    if (o.collective) last = &o;
  return last;
}

struct Job {
  std::vector<const RankDump*> ranks;  // sorted by rank
  int nranks = 0;
  std::map<uint64_t, std::map<int, const DumpOp*>> opAt;  // seq -> rank -> its collective
  std::set<int> dumped;
};

// Which FIFOs an operation waits on: the device FIFOs of the CUDA (or emulated
// device) executor, or the host FIFOs of the host and staging executors; ""
// when the dump does not say.
std::string fifosOf(const DumpOp& o) {
  if (o.executor.empty()) return "";
  return o.executor == "cuda" || o.executor.rfind("device", 0) == 0 ? "device" : "host";
}

// A mismatch at collective `seq` between `variants` (what each set of ranks did -> those ranks): the
// minority's ranks (all of them when more than two variants) are the culprits.
Finding mismatchAt(uint64_t seq, const std::map<int, const DumpOp*>& at,
                   const std::map<std::string, std::vector<int>>& variants, const std::string& what,
                   const std::string& advice) {
  Finding f{"mismatch", {}, {}, {}, 0, "", {}};
  std::string list;
  for (const auto& [desc, rs] : variants) {
    list += (list.empty() ? "" : "; ") + rankList(rs) + " " + desc;
    if (rs.size() * 2 <= at.size() || variants.size() > 2) f.ranks.insert(f.ranks.end(), rs.begin(), rs.end());
  }
  std::sort(f.ranks.begin(), f.ranks.end());
  f.words = "the ranks " + what + " at collective #" + std::to_string(seq) + ": " + list + advice;
  for (const auto& [rank, op] : at) f.evidence.push_back("rank " + std::to_string(rank) + ": " + describe(*op));
  return f;
}

// The first collective number where the ranks called different operations, or
// called the same one on buffers of kinds that put it on different FIFOs (a
// rank that passed pageable host memory where its peers passed device memory,
// on a communicator whose ranks use the CUDA executor): each then waits for
// messages its peers send elsewhere.
void findMismatch(const Job& job, std::vector<Finding>* out) {
  for (const auto& [seq, at] : job.opAt) {
    std::map<std::string, std::vector<int>> called;  // what -> ranks
    struct Family {
      std::set<std::string> memory, executors;
      std::vector<int> ranks;
    };
    std::map<std::string, Family> families;  // FIFOs -> what took them
    for (const auto& [rank, op] : at) {
      called["called " + op->op + " of " + std::to_string(op->count) + " x " + op->dtype].push_back(rank);
      if (const std::string f = fifosOf(*op); !f.empty()) {
        families[f].memory.insert(op->memory);
        families[f].executors.insert(op->executor);
        families[f].ranks.push_back(rank);
      }
    }
    if (called.size() > 1) {
      out->push_back(mismatchAt(seq, at, called, "disagree", ""));
      return;  // the first disagreement explains what follows
    }
    if (families.size() > 1) {
      auto joined = [](const std::set<std::string>& words) {
        std::string s;
        for (const std::string& w : words) s += (s.empty() ? "" : " or ") + w;
        return s;
      };
      std::map<std::string, std::vector<int>> fifos;
      for (const auto& [f, fam] : families)
        fifos["passed " + joined(fam.memory) + " memory (the " + joined(fam.executors) + " executor's " + f +
              " FIFOs)"] = fam.ranks;
      out->push_back(mismatchAt(seq, at, fifos, "ran the operation over different FIFOs",
                                ": each waits for messages the others send elsewhere. Pass buffers of the same kind "
                                "on every rank (device or pinned host memory everywhere, or pageable host memory "
                                "everywhere)"));
      return;
    }
  }
}

// Ranks without a dump that the survivors' errors name as the first failure or as gone.
void findDeaths(const Job& job, std::vector<Finding>* out) {
  static const std::regex kDied("rank ([0-9]+) \\([^)]*\\) (failed first|exited or lost its connection)");
  std::map<int, std::vector<std::string>> named;
  for (const RankDump* d : job.ranks)
    for (const DumpOp& o : d->ops) {
      const std::string& text = o.error;
      for (std::sregex_iterator it(text.begin(), text.end(), kDied), end; it != end; ++it) {
        const int r = std::stoi((*it)[1]);
        if (r < job.nranks && job.dumped.count(r) == 0 && named[r].size() < 3)
          named[r].push_back("rank " + std::to_string(d->rank) + ": " + describe(o) + ": " + text.substr(0, 200));
      }
    }
  for (auto& [rank, evidence] : named)
    out->push_back({"died", {rank}, {}, {}, 0,
                    rankList({rank}) + " failed or exited first: the others' errors name it and it left no dump",
                    std::move(evidence)});
}

// A rank is waited for only when the ranks in the newest collective are stuck in it (running, or
// failed for want of progress); when they failed on an error, the ranks behind stopped at their
// next call: victims, not culprits.
bool stuckIn(const Job& job, uint64_t seq) {
  auto at = job.opAt.find(seq);
  if (at == job.opAt.end()) return false;
  for (const auto& [rank, op] : at->second)
    if (op->state == "running" || op->error.find("made no progress") != std::string::npos) return true;
  return false;
}

void findNeverArrived(const Job& job, std::vector<Finding>* out) {
  uint64_t newest = 0;
  bool any = false;
  for (const RankDump* r : job.ranks)
    for (const DumpOp& o : r->ops)
      if (o.collective && o.state != "queued") newest = std::max(newest, o.seq), any = true;
  if (!any || !stuckIn(job, newest)) return;
  Finding f{"never_arrived", {}, {}, {}, 0, "", {}};
  for (const RankDump* r : job.ranks) {
    const DumpOp* last = lastCollective(*r);
    if (last == nullptr || last->seq < newest) {
      f.ranks.push_back(r->rank);
      f.evidence.push_back("rank " + std::to_string(r->rank) + "'s last collective: " +
                           (last ? describe(*last) : std::string("none")));
    }
  }
  if (f.ranks.empty() || f.ranks.size() == job.ranks.size()) return;
  auto at = job.opAt.find(newest);
  if (at != job.opAt.end())
    for (const auto& [rank, op] : at->second)
      if (f.evidence.size() < 8) f.evidence.push_back("rank " + std::to_string(rank) + ": " + describe(*op));
  f.words = rankList(f.ranks) + " never arrived at collective #" + std::to_string(newest) +
            ", which the other ranks started and wait in: the job waits for " + (f.ranks.size() == 1 ? "it" : "them") +
            " (stuck or busy outside the library, or not calling it)";
  out->push_back(std::move(f));
}

void findMissing(const Job& job, std::vector<Finding>* out) {
  Finding f{"missing_dump", {}, {}, {}, 0, "", {}};
  for (int r = 0; r < job.nranks; ++r)
    if (job.dumped.count(r) == 0) f.ranks.push_back(r);
  if (f.ranks.empty()) return;
  f.words = rankList(f.ranks) + " left no dump (the process died or hangs, or its dump was not written or not given)";
  out->push_back(std::move(f));
}

// The end of a wait chain: a rank stuck operations wait for that is not stuck itself
// (a stuck rank that waits in turn is a link of the chain, not its end).
void findWaitsFor(const Job& job, std::vector<Finding>* out) {
  std::set<int> blamed, stuck;
  for (const Finding& f : *out) blamed.insert(f.ranks.begin(), f.ranks.end());
  std::map<int, std::vector<std::string>> waitedFor;
  static const std::regex kPeer("rank ([0-9]+)");
  for (const RankDump* r : job.ranks)
    for (const DumpOp& o : r->ops) {
      if (o.waiting.empty() || (o.state != "running" && o.state != "failed")) continue;
      stuck.insert(r->rank);
      std::set<int> named;
      for (std::sregex_iterator it(o.waiting.begin(), o.waiting.end(), kPeer), end; it != end; ++it)
        named.insert(std::stoi((*it)[1]));
      for (int p : named) waitedFor[p].push_back("rank " + std::to_string(r->rank) + ": " + describe(o));
    }
  for (const auto& [rank, ev] : waitedFor) {
    if (blamed.count(rank) != 0 || stuck.count(rank) != 0 || rank >= job.nranks) continue;
    out->push_back({"waits_for", {rank}, {}, {}, 0,
                    rankList({rank}) + " is what " + std::to_string(ev.size()) + " stuck operation(s) wait for", ev});
  }
}

// The communicator with the most dumps; the others are noted.
Job pickJob(const std::vector<RankDump>& dumps, Placement* placement, std::vector<std::string>* notes) {
  std::map<std::string, std::vector<const RankDump*>> byComm;
  for (const RankDump& d : dumps) byComm[d.comm].push_back(&d);
  auto biggest = std::max_element(byComm.begin(), byComm.end(),
                                  [](const auto& a, const auto& b) { return a.second.size() < b.second.size(); });
  for (const auto& [comm, ranks] : byComm)
    if (comm != biggest->first)
      notes->push_back("communicator " + comm + " (" + std::to_string(ranks.size()) + " dumps) not analysed");
  Job job;
  job.ranks = biggest->second;
  std::sort(job.ranks.begin(), job.ranks.end(), [](const RankDump* a, const RankDump* b) { return a->rank < b->rank; });
  for (const RankDump* d : job.ranks) {
    job.nranks = std::max({job.nranks, d->nranks, d->rank + 1});
    job.dumped.insert(d->rank);
    if (placement->hostOf.empty()) placement->hostOf = d->hostOf;
    for (const DumpOp& o : d->ops)
      if (o.collective) job.opAt[o.seq][d->rank] = &o;
  }
  placement->nranks = job.nranks;
  if (placement->hostOf.size() != static_cast<size_t>(job.nranks)) placement->hostOf.assign(job.nranks, 0);
  placement->hostNames.assign(placement->nhosts(), "");
  for (const RankDump* d : job.ranks) placement->hostNames[placement->hostIndex(d->rank)] = d->host;
  notes->push_back("communicator " + biggest->first + ": " + std::to_string(job.ranks.size()) + " of " +
                   std::to_string(job.nranks) + " ranks dumped, on " + std::to_string(placement->nhosts()) + " host(s)");
  return job;
}

}  // namespace

Diagnosis diagnose(const std::vector<RankDump>& dumps, const Thresholds& t) {
  Diagnosis out;
  if (dumps.empty()) return out;
  std::vector<Finding>& findings = out.verdict.findings;
  Job job = pickJob(dumps, &out.placement, &out.verdict.notes);
  findMismatch(job, &findings);
  findDeaths(job, &findings);
  // A death or a divergence stops every rank wherever it is: who got furthest means nothing then.
  if (findings.empty()) findNeverArrived(job, &findings);
  findMissing(job, &findings);
  findWaitsFor(job, &findings);
  const Measurements m = measurementsFromDumps(job.ranks, out.placement);
  std::vector<Finding> late;
  const bool perCollective = findLateArrivals(job.ranks, t, &late);
  std::vector<int> lateRanks;
  for (const Finding& f : late) lateRanks.insert(lateRanks.end(), f.ranks.begin(), f.ranks.end());
  findings.insert(findings.end(), late.begin(), late.end());
  std::vector<Finding> slow = analyzePerformance(m, t, perCollective ? &lateRanks : nullptr);
  findings.insert(findings.end(), slow.begin(), slow.end());
  if (!perCollective) out.verdict.notes.push_back("too few collectives recorded by every rank to compare arrivals");
  return out;
}

}  // namespace theseus::doctor
