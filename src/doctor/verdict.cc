#include "doctor/verdict.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <set>

namespace theseus::doctor {

int Placement::hostIndex(int rank) const {
  return rank >= 0 && rank < static_cast<int>(hostOf.size()) ? hostOf[rank] : 0;
}

int Placement::nhosts() const {
  int n = 1;
  for (int h : hostOf) n = std::max(n, h + 1);
  return n;
}

std::vector<int> Placement::ranksOn(int host) const {
  std::vector<int> out;
  for (int r = 0; r < nranks; ++r)
    if (hostIndex(r) == host) out.push_back(r);
  return out;
}

std::string Placement::hostText(int host) const {
  std::string s = "host " + std::to_string(host);
  if (host >= 0 && host < static_cast<int>(hostNames.size()) && !hostNames[host].empty())
    s += " (" + hostNames[host] + ")";
  return s;
}

std::vector<int> Verdict::culpritRanks() const {
  std::set<int> ranks;
  for (const Finding& f : findings) ranks.insert(f.ranks.begin(), f.ranks.end());
  return {ranks.begin(), ranks.end()};
}

std::vector<int> Verdict::culpritHosts(const Placement& p) const {
  std::set<int> hosts;
  for (const Finding& f : findings) {
    hosts.insert(f.hosts.begin(), f.hosts.end());
    for (int r : f.ranks) hosts.insert(p.hostIndex(r));
  }
  return {hosts.begin(), hosts.end()};
}

nlohmann::json toJson(const Verdict& v, const Placement& p) {
  nlohmann::json findings = nlohmann::json::array();
  for (const Finding& f : v.findings) {
    nlohmann::json links = nlohmann::json::array();
    for (const Link& l : f.links) links.push_back({l.from, l.to});
    findings.push_back({{"kind", f.kind},
                        {"ranks", f.ranks},
                        {"hosts", f.hosts},
                        {"links", links},
                        {"factor", f.factor},
                        {"words", f.words},
                        {"evidence", f.evidence}});
  }
  return {{"findings", findings},
          {"culprits", {{"ranks", v.culpritRanks()}, {"hosts", v.culpritHosts(p)}}},
          {"notes", v.notes}};
}

std::string toText(const Verdict& v) {
  std::string out;
  for (const std::string& n : v.notes) out += "note: " + n + "\n";
  if (v.findings.empty()) out += "verdict: nothing wrong (every rank at the same operation, no slow link, host or rank)\n";
  for (const Finding& f : v.findings) {
    out += f.kind + ": " + f.words + "\n";
    for (const std::string& e : f.evidence) out += "    " + e + "\n";
  }
  return out;
}

std::string rankList(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i)
    s += (i ? (i + 1 == ranks.size() ? " and " : ", ") : "") + std::to_string(ranks[i]);
  return (ranks.size() == 1 ? "rank " : "ranks ") + s;
}

std::string format(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return buf;
}

}  // namespace theseus::doctor
