#include "doctor_analysis.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <regex>
#include <set>

namespace theseus::doctor {
namespace {

struct Op {
  uint64_t seq = 0;
  std::string op, dtype, state, waiting, error;
  uint64_t count = 0, startNs = 0;
  bool collective = true;
};

struct Rank {
  int rank = -1;
  std::string host, reason;
  std::vector<Op> ops;  // oldest first
};

std::string describe(const Op& o) {
  std::string s = o.op + " #" + std::to_string(o.seq) + " (" + std::to_string(o.count) + " x " + o.dtype + ", " +
                  o.state + ")";
  if (!o.waiting.empty()) s += ": " + (o.waiting.size() > 160 ? o.waiting.substr(0, 157) + "..." : o.waiting);
  return s;
}

std::string rankList(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? (i + 1 == ranks.size() ? " and " : ", ") : "") + std::to_string(ranks[i]);
  return (ranks.size() == 1 ? "rank " : "ranks ") + s;
}

bool parse(const nlohmann::json& j, Rank* out, std::string* why) {
  try {
    if (j.at("format").get<int>() != 1) {
      *why = "format " + j.at("format").dump() + " is not 1";
      return false;
    }
    out->rank = j.at("rank").get<int>();
    out->host = j.value("host", "");
    out->reason = j.value("reason", "");
    for (const auto& e : j.at("entries")) {
      Op o;
      o.seq = e.at("seq").get<uint64_t>();
      o.op = e.at("op").get<std::string>();
      o.dtype = e.value("dtype", "");
      o.state = e.at("state").get<std::string>();
      o.count = e.value("count", uint64_t{0});
      o.startNs = e.value("start_ns", uint64_t{0});
      o.waiting = e.value("waiting", "");
      o.error = e.value("error", "");
      o.collective = o.op != "send/recv";
      out->ops.push_back(std::move(o));
    }
    return true;
  } catch (const std::exception& ex) {
    *why = ex.what();
    return false;
  }
}

}  // namespace

std::vector<Finding> diagnose(const std::vector<nlohmann::json>& dumps, std::vector<std::string>* notes) {
  std::vector<Finding> findings;
  // Group by communicator; analyse the one with the most ranks.
  std::map<std::string, std::vector<Rank>> byComm;
  std::map<std::string, int> nranksOf;
  for (const auto& j : dumps) {
    Rank r;
    std::string why;
    if (!parse(j, &r, &why)) {
      findings.push_back({"bad_dump", {}, "a dump is not a Theseus flight recorder: " + why, {}});
      continue;
    }
    const std::string comm = j.value("comm", "?");
    byComm[comm].push_back(std::move(r));
    nranksOf[comm] = j.value("nranks", 0);
  }
  if (byComm.empty()) return findings;
  auto biggest = std::max_element(byComm.begin(), byComm.end(),
                                  [](const auto& a, const auto& b) { return a.second.size() < b.second.size(); });
  for (const auto& [comm, ranks] : byComm)
    if (comm != biggest->first)
      notes->push_back("communicator " + comm + " (" + std::to_string(ranks.size()) + " dumps) not analysed");
  std::vector<Rank>& ranks = biggest->second;
  std::sort(ranks.begin(), ranks.end(), [](const Rank& a, const Rank& b) { return a.rank < b.rank; });
  const int nranks = nranksOf[biggest->first];
  notes->push_back("communicator " + biggest->first + ": " + std::to_string(ranks.size()) + " of " +
                   std::to_string(nranks) + " ranks dumped");

  // Mismatch: the same collective number, different operations.
  std::map<uint64_t, std::map<std::string, std::vector<int>>> bySeq;  // seq -> "op count dtype" -> ranks
  std::map<uint64_t, std::map<int, const Op*>> opAt;
  for (const Rank& r : ranks)
    for (const Op& o : r.ops)
      if (o.collective) {
        bySeq[o.seq][o.op + " of " + std::to_string(o.count) + " x " + o.dtype].push_back(r.rank);
        opAt[o.seq][r.rank] = &o;
      }
  for (const auto& [seq, variants] : bySeq) {
    if (variants.size() < 2) continue;
    Finding f{"mismatch", {}, "", {}};
    std::string what;
    for (const auto& [desc, rs] : variants) {
      what += (what.empty() ? "" : "; ") + rankList(rs) + " called " + desc;
      if (rs.size() * 2 <= static_cast<size_t>(ranks.size()) || variants.size() > 2)
        f.ranks.insert(f.ranks.end(), rs.begin(), rs.end());
    }
    std::sort(f.ranks.begin(), f.ranks.end());
    f.words = "the ranks disagree at collective #" + std::to_string(seq) + ": " + what;
    for (const auto& [rank, op] : opAt[seq]) f.evidence.push_back("rank " + std::to_string(rank) + ": " + describe(*op));
    findings.push_back(std::move(f));
    break;  // the first disagreement explains what follows
  }

  // Never arrived: the newest collective some rank started, which others never reached.
  uint64_t newest = 0;
  bool any = false;
  for (const Rank& r : ranks)
    for (const Op& o : r.ops)
      if (o.collective && o.state != "queued") newest = std::max(newest, o.seq), any = true;
  if (any) {
    Finding f{"never_arrived", {}, "", {}};
    for (const Rank& r : ranks) {
      const Op* last = nullptr;
      for (const Op& o : r.ops)
        if (o.collective) last = &o;
      if (last == nullptr || last->seq < newest) {
        f.ranks.push_back(r.rank);
        f.evidence.push_back("rank " + std::to_string(r.rank) + "'s last collective: " +
                             (last ? describe(*last) : std::string("none")));
      }
    }
    if (!f.ranks.empty() && f.ranks.size() < ranks.size()) {
      for (const auto& [rank, op] : opAt[newest])
        if (f.evidence.size() < 8) f.evidence.push_back("rank " + std::to_string(rank) + ": " + describe(*op));
      f.words = rankList(f.ranks) + " never arrived at collective #" + std::to_string(newest) +
                ", which the other ranks started and wait in: the job waits for " +
                (f.ranks.size() == 1 ? "it" : "them") + " (stuck or busy outside the library, or not calling it)";
      findings.push_back(std::move(f));
    }
  }

  // Ranks with no dump.
  if (nranks > 0) {
    std::set<int> have;
    for (const Rank& r : ranks) have.insert(r.rank);
    Finding f{"missing_dump", {}, "", {}};
    for (int r = 0; r < nranks; ++r)
      if (have.count(r) == 0) f.ranks.push_back(r);
    if (!f.ranks.empty()) {
      f.words = rankList(f.ranks) + " left no dump (the process died, or its dump was not written or not given)";
      findings.push_back(std::move(f));
    }
  }

  // What stuck operations wait for: a rank others wait for that is not stuck itself (a stuck
  // rank that waits in turn is a link of the chain, not its end).
  std::set<int> blamed, stuck;
  for (const Finding& f : findings) blamed.insert(f.ranks.begin(), f.ranks.end());
  std::map<int, std::vector<std::string>> waitedFor;
  const std::regex peer("rank ([0-9]+)");
  for (const Rank& r : ranks)
    for (const Op& o : r.ops) {
      if (o.waiting.empty() || (o.state != "running" && o.state != "failed")) continue;
      stuck.insert(r.rank);
      std::set<int> named;
      for (std::sregex_iterator it(o.waiting.begin(), o.waiting.end(), peer), end; it != end; ++it)
        named.insert(std::stoi((*it)[1]));
      for (int p : named) waitedFor[p].push_back("rank " + std::to_string(r.rank) + ": " + describe(o));
    }
  for (const auto& [rank, ev] : waitedFor) {
    if (blamed.count(rank) != 0 || stuck.count(rank) != 0) continue;
    findings.push_back({"waits_for", {rank},
                        rankList({rank}) + " is what " + std::to_string(ev.size()) + " stuck operation(s) wait for",
                        ev});
  }

  // Late arrival (one host: the steady clocks agree).
  std::set<std::string> hosts;
  for (const Rank& r : ranks) hosts.insert(r.host);
  if (hosts.size() == 1 && ranks.size() >= 2) {
    std::map<int, std::vector<double>> lateness;
    int complete = 0;
    for (const auto& [seq, at] : opAt) {
      if (at.size() != ranks.size()) continue;
      uint64_t first = UINT64_MAX;
      for (const auto& [rank, op] : at) if (op->startNs > 0) first = std::min(first, op->startNs);
      if (first == UINT64_MAX) continue;
      ++complete;
      for (const auto& [rank, op] : at)
        if (op->startNs > 0) lateness[rank].push_back(static_cast<double>(op->startNs - first) / 1e6);
    }
    std::map<int, double> median;
    for (auto& [rank, v] : lateness) {
      std::sort(v.begin(), v.end());
      median[rank] = v.empty() ? 0 : v[v.size() / 2];
    }
    if (complete >= 5) {
      auto worst = std::max_element(median.begin(), median.end(),
                                    [](const auto& a, const auto& b) { return a.second < b.second; });
      double others = 0;
      for (const auto& [rank, m] : median)
        if (rank != worst->first) others = std::max(others, m);
      if (worst->second >= 1.0 && worst->second > 3 * others && blamed.count(worst->first) == 0) {
        char buf[200];
        snprintf(buf, sizeof(buf),
                 "rank %d straggles in compute: it starts collectives %.1f ms after the first rank at the median "
                 "(others at most %.1f ms), over %d collectives",
                 worst->first, worst->second, others, complete);
        findings.push_back({"late_arrival", {worst->first}, buf, {}});
      }
    }
  } else if (hosts.size() > 1) {
    notes->push_back("dumps from " + std::to_string(hosts.size()) +
                     " hosts: their clocks are not aligned, so arrival times are not compared");
  }
  return findings;
}

nlohmann::json toJson(const std::vector<Finding>& findings, const std::vector<std::string>& notes) {
  nlohmann::json out = {{"findings", nlohmann::json::array()}, {"notes", notes}};
  for (const Finding& f : findings)
    out["findings"].push_back({{"kind", f.kind}, {"ranks", f.ranks}, {"words", f.words}, {"evidence", f.evidence}});
  return out;
}

}  // namespace theseus::doctor
