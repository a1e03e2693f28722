// What the harness matrix tests share: the nccl-tests-compatible programs with
// what each takes (-o, -r), their cases on 1..N ranks with readable names, and
// the count of result rows in a program's report.
#pragma once

#include <gtest/gtest.h>

#include <ostream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace theseus::test {

struct PerfCase {
  const char* prog;  // e.g. "all_reduce_perf"
  bool usesOp;       // takes -o
  bool usesRoot;     // takes -r
  int nranks;
};
// How ctest lists a case (the default prints the struct's bytes).
inline void PrintTo(const PerfCase& p, std::ostream* os) { *os << p.prog << " on " << p.nranks << " rank(s)"; }

// Every program, once per rank count in `rankCounts`.
inline std::vector<PerfCase> everyPerfProgram(const std::vector<int>& rankCounts) {
  const PerfCase base[] = {{"all_reduce_perf", true, false, 0},     {"all_gather_perf", false, false, 0},
                           {"broadcast_perf", false, true, 0},      {"reduce_perf", true, true, 0},
                           {"reduce_scatter_perf", true, false, 0}, {"alltoall_perf", false, false, 0},
                           {"gather_perf", false, true, 0},         {"scatter_perf", false, true, 0},
                           {"sendrecv_perf", false, false, 0},      {"hypercube_perf", false, false, 0}};
  std::vector<PerfCase> all;
  for (PerfCase p : base)
    for (int n : rankCounts) {
      p.nranks = n;
      all.push_back(p);
    }
  return all;
}

// "all_reduce_2ranks": the test name of a case.
inline std::string perfCaseName(const testing::TestParamInfo<PerfCase>& i) {
  std::string name = i.param.prog;
  return name.substr(0, name.size() - 5) + "_" + std::to_string(i.param.nranks) + "ranks";  // drop "_perf"
}

// The flags that leave a program's in-place half out where that half is a race
// by NCCL's semantics: sendrecv's send and receive share one buffer in one
// group (nccl-tests times that half but does not check it). The device-buffer
// tests pass them: there the CUDA executor's thread blocks read and overwrite
// that buffer at once, which a ThreadSanitizer build rightly reports.
inline std::vector<std::string> racyInPlaceLeftOut(const std::string& prog) {
  if (prog == "sendrecv_perf") return {"--in_place", "0"};
  return {};
}

// Result rows (size, count, type, op, root, ...) in a report.
inline int perfDataRows(const std::string& out) {
  std::istringstream in(out);
  int n = 0;
  static const std::regex kRow(R"(^ +[0-9]+ +[0-9]+ +\S+ +\S+ +-?[0-9]+ .*)");
  for (std::string line; std::getline(in, line);)
    if (std::regex_match(line, kRow)) ++n;
  return n;
}

}  // namespace theseus::test
