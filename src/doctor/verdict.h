// The doctor's conclusions: what is wrong, which ranks, hosts and links are to
// blame, in plain words and as JSON, with the evidence. One vocabulary for
// theseus-doctor (flight-recorder dumps, doctor/dump_analysis.h) and the
// leader's live verdicts (doctor/live_doctor.h).
//
// Kinds of finding, most decisive first:
//   mismatch           ranks ran different operations at one collective number
//   never_arrived      ranks never started the collective the others wait in
//   died               a rank the others saw fail first (the survivors' errors)
//   missing_dump       ranks of the communicator with no dump
//   waits_for          the end of a wait chain: a rank stuck ranks wait for
//   slow_host          a host whose links to other hosts are slow (out, in, both)
//   comm_straggler     a rank whose own sends (or receives) are slow on most of
//                      its links, while it arrives on time
//   compute_straggler  a rank that starts collectives late (busy outside the
//                      library): the others wait for it
//   slow_link          one link slower than the links like it
//   bad_dump           an input that is not a flight-recorder dump
// A finding's culprits: its ranks, its hosts and its links. A slow link blames
// its sender (where a shaper or a throttle acts); a slow host the ranks on it.
#pragma once

#include <compare>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace theseus::doctor {

// Where the ranks run.
struct Placement {
  int nranks = 0;
  std::vector<int> hostOf;             // host index of every rank; empty: all on one host
  std::vector<std::string> hostNames;  // by host index (may be shorter: then "host <i>")

  int hostIndex(int rank) const;
  int nhosts() const;
  std::vector<int> ranksOn(int host) const;
  // "host 2 (node7)", or "host 2" without a name.
  std::string hostText(int host) const;
};

struct Link {
  int from = -1;
  int to = -1;
  auto operator<=>(const Link&) const = default;
};

struct Finding {
  std::string kind;
  std::vector<int> ranks;   // culprit ranks, ascending
  std::vector<int> hosts;   // culprit hosts, ascending
  std::vector<Link> links;  // culprit links
  double factor = 0;        // slow_*: times slower than typical; compute_straggler: µs late per collective
  std::string words;
  std::vector<std::string> evidence;
};

struct Verdict {
  std::vector<Finding> findings;
  std::vector<std::string> notes;

  // Every finding's ranks, and the hosts named or holding those ranks (ascending).
  std::vector<int> culpritRanks() const;
  std::vector<int> culpritHosts(const Placement& p) const;
};

// {"findings": [{"kind", "ranks", "hosts", "links": [[a, b]], "factor", "words", "evidence"}],
//  "culprits": {"ranks": [...], "hosts": [...]}, "notes": [...]}
nlohmann::json toJson(const Verdict& v, const Placement& p);
// "kind: words" and the evidence indented under it, a finding after another.
std::string toText(const Verdict& v);

// "rank 3", "ranks 1, 2 and 5".
std::string rankList(const std::vector<int>& ranks);
// printf into a std::string.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace theseus::doctor
