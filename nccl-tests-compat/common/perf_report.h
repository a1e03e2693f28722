// nccl-tests' text output (reference §3.5) and the JSON results file (-J).
//
// Text: the table header, one row per size with an out-of-place and an
// in-place half, and the footer, with nccl-tests' exact column widths so
// scripts written for nccl-tests parse ours unchanged.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "perf_status.h"

namespace theseus::perf {

// nccl-tests' getFloatStr: "%*.2f", else "%*.1f", else "%*.0f", else "%*.1e",
// whichever first fits in `width` characters.
std::string formatFloat(double value, int width);

// The three table header lines (out-of-place/in-place, column names, units);
// with -C the time columns are called "cputime".
std::vector<std::string> tableHeader(bool cputime = false);
// "%12li  %12li  %8s  %6s  %6i": size (bytes), count, type, redop, root.
std::string rowPrefix(size_t bytes, size_t count, const char* type, const char* op, int root);
// "  time  algbw  busbw  #wrong" (wrong: std::nullopt prints N/A, as with -c 0).
std::string rowHalf(double usec, double algBw, double busBw, std::optional<double> wrong);
// The columns of a half that did not run (--in_place 0): N/A throughout.
std::string rowHalfNotRun();
// "# Out of bounds values : N OK|FAILED" and "# Avg bus bandwidth    : X[ OK|FAILED]".
// minBw < 0: no bandwidth check (NCCL_TESTS_MIN_BW unset).
std::vector<std::string> footer(long long errors, double avgBusBw, double minBw);

// One measured half-row.
struct Measurement {
  double usec = 0;
  double algBw = 0;
  double busBw = 0;
  std::optional<double> wrong;  // nullopt: not checked
  bool ran = true;              // false: not run (--in_place 0)
};

struct ResultRow {
  size_t bytes = 0;
  size_t count = 0;
  std::string type;
  std::string op;
  int root = -1;
  Measurement outOfPlace;
  Measurement inPlace;
};

// The -J file. Schema "theseus.perf.results", version 1 (docs/benchmarking.md).
struct JsonReport {
  std::string program;
  int ncclHeaders = 0;
  int ncclLibrary = 0;
  int nranks = 0;
  int nprocs = 0;
  int nThreads = 0;
  int nGpus = 0;
  std::string memory;           // "host" or "cuda"
  std::vector<std::string> devices;  // the "Using devices" lines, without "#  "
  std::vector<std::pair<std::string, std::string>> options;  // flag -> value
  std::vector<ResultRow> rows;
  long long outOfBounds = 0;
  double avgBusBw = 0;
  bool passed = true;

  std::string toJson() const;
  Status write(const std::string& path) const;
};

}  // namespace theseus::perf
