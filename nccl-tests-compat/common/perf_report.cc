#include "perf_report.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

namespace theseus::perf {

std::string formatFloat(double value, int width) {
  static const char* const kFormats[] = {"%*.2f", "%*.1f", "%*.0f", "%*.1e"};
  std::string s;
  for (const char* fmt : kFormats) {
    s = strprintf(fmt, width, value);
    if (static_cast<int>(s.size()) <= width) return s;
  }
  return s;  // the exponent form is the shortest we have
}

std::vector<std::string> tableHeader(bool cputime) {
  const char* time = cputime ? "cputime" : "time";
  return {
      strprintf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place", "",
                "", "", "", ""),
      strprintf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s", "size", "count", "type",
                "redop", "root", time, "algbw", "busbw", "#wrong", time, "algbw", "busbw", "#wrong"),
      strprintf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s", "(B)", "(elements)", "", "",
                "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""),
  };
}

std::string rowPrefix(size_t bytes, size_t count, const char* type, const char* op, int root) {
  std::string rootStr = strprintf("%6i", root);
  return strprintf("%12li  %12li  %8s  %6s  %6s", static_cast<long>(bytes), static_cast<long>(count), type, op,
                   rootStr.c_str());
}

std::string rowHalf(double usec, double algBw, double busBw, std::optional<double> wrong) {
  std::string t = formatFloat(usec, 7), a = formatFloat(algBw, 6), b = formatFloat(busBw, 6);
  if (!wrong) return strprintf("  %7s  %6s  %6s    N/A", t.c_str(), a.c_str(), b.c_str());
  return strprintf("  %7s  %6s  %6s  %6g", t.c_str(), a.c_str(), b.c_str(), *wrong);
}

std::string rowHalfNotRun() { return strprintf("  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A"); }

std::vector<std::string> footer(long long errors, double avgBusBw, double minBw) {
  std::vector<std::string> lines;
  lines.push_back(strprintf("# Out of bounds values : %lld %s", errors, errors ? "FAILED" : "OK"));
  if (minBw < 0)
    lines.push_back(strprintf("# Avg bus bandwidth    : %g", avgBusBw));
  else
    lines.push_back(strprintf("# Avg bus bandwidth    : %g %s", avgBusBw, avgBusBw < 0.9 * minBw ? "FAILED" : "OK"));
  return lines;
}

namespace {

nlohmann::json measurementJson(const Measurement& m) {
  if (!m.ran) return nullptr;
  nlohmann::json j;
  j["time_us"] = m.usec;
  j["algbw_gbs"] = m.algBw;
  j["busbw_gbs"] = m.busBw;
  j["wrong"] = m.wrong ? nlohmann::json(static_cast<long long>(*m.wrong)) : nlohmann::json(nullptr);
  return j;
}

}  // namespace

std::string JsonReport::toJson() const {
  nlohmann::json j;
  j["schema"] = "theseus.perf.results";
  j["version"] = 1;
  j["program"] = program;
  j["nccl_headers"] = ncclHeaders;
  j["nccl_library"] = ncclLibrary;
  j["nranks"] = nranks;
  j["nprocs"] = nprocs;
  j["nthreads"] = nThreads;
  j["ngpus"] = nGpus;
  j["memory"] = memory;
  j["devices"] = devices;
  nlohmann::json opts = nlohmann::json::object();
  for (const auto& [k, v] : options) opts[k] = v;
  j["options"] = opts;
  nlohmann::json rs = nlohmann::json::array();
  for (const ResultRow& r : rows) {
    rs.push_back({{"size", r.bytes},
                  {"count", r.count},
                  {"type", r.type},
                  {"redop", r.op},
                  {"root", r.root},
                  {"out_of_place", measurementJson(r.outOfPlace)},
                  {"in_place", measurementJson(r.inPlace)}});
  }
  j["results"] = rs;
  j["out_of_bounds"] = outOfBounds;
  j["avg_busbw_gbs"] = avgBusBw;
  j["status"] = passed ? "OK" : "FAILED";
  return j.dump(2) + "\n";
}

Status JsonReport::write(const std::string& path) const {
  std::ofstream f(path, std::ios::trunc);
  if (!f) return errorf(kExitError, "cannot open JSON output file '%s': %s", path.c_str(), strerror(errno));
  f << toJson();
  f.close();
  if (!f) return errorf(kExitError, "cannot write JSON output file '%s'", path.c_str());
  return Status::ok();
}

}  // namespace theseus::perf
