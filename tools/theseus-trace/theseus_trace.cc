// theseus-trace merge: joins the per-rank traces THESEUS_TRACE wrote (telemetry/trace_writer.h)
// into one Chrome/Perfetto trace, every rank's events moved onto rank 0's clock by the offset
// its file carries, one process per rank and one track per communicator.
//   theseus-trace merge [-o merged.json] <trace files or directories>...
// Prints how many ranks and communicators it merged and the largest clock error. Exit status 2
// on bad usage or a file that is not a Theseus trace.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

int usage() {
  fprintf(stderr, "usage: theseus-trace merge [-o merged.json] <trace files or directories>...\n");
  return 2;
}

bool load(const std::string& path, std::vector<std::pair<std::string, nlohmann::json>>* out) {
  std::ifstream f(path);
  if (!f) {
    fprintf(stderr, "theseus-trace: cannot read %s: %s\n", path.c_str(), strerror(errno));
    return false;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    auto j = nlohmann::json::parse(ss.str());
    if (!j.contains("theseus") || j["theseus"].value("format", 0) != 1 || !j.contains("traceEvents")) {
      fprintf(stderr, "theseus-trace: %s is not a Theseus trace (no \"theseus\" block of format 1)\n", path.c_str());
      return false;
    }
    out->emplace_back(path, std::move(j));
  } catch (const std::exception& e) {
    fprintf(stderr, "theseus-trace: %s is not JSON: %s\n", path.c_str(), e.what());
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) != "merge") return usage();
  std::string output = "-";
  std::vector<std::string> inputs;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-o" && i + 1 < argc) output = argv[++i];
    else inputs.push_back(a);
  }
  if (inputs.empty()) return usage();
  std::vector<std::pair<std::string, nlohmann::json>> traces;
  for (const std::string& in : inputs) {
    struct stat st {};
    if (stat(in.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      std::vector<std::string> names;
      if (DIR* d = opendir(in.c_str())) {
        while (dirent* e = readdir(d)) {
          std::string n = e->d_name;
          if (n.rfind("theseus-trace.", 0) == 0 && n.size() > 5 && n.compare(n.size() - 5, 5, ".json") == 0)
            names.push_back(in + "/" + n);
        }
        closedir(d);
      }
      std::sort(names.begin(), names.end());
      for (const std::string& n : names)
        if (!load(n, &traces)) return 2;
    } else if (!load(in, &traces)) {
      return 2;
    }
  }
  // Tracks per communicator, numbered in order of appearance: kTracksPerComm apart.
  constexpr int kTracksPerComm = 1 << 16;
  std::map<std::string, int> trackOf;
  std::set<int> ranks;
  int64_t maxError = 0;
  nlohmann::json events = nlohmann::json::array(), sources = nlohmann::json::array();
  for (auto& [path, j] : traces) {
    const auto& meta = j["theseus"];
    const int rank = meta.value("rank", 0);
    const std::string comm = meta.value("comm", "?");
    const int64_t offset = meta.value("clock_offset_ns", int64_t{0}), error = meta.value("clock_error_ns", int64_t{-1});
    const int track = trackOf.emplace(comm, static_cast<int>(trackOf.size())).first->second;
    ranks.insert(rank);
    maxError = std::max(maxError, error);
    sources.push_back({{"file", path}, {"rank", rank}, {"comm", comm}, {"clock_offset_ns", offset},
                       {"clock_error_ns", error}});
    for (auto& e : j["traceEvents"]) {
      // A rank's tracks: 0 the communicator's operations, 1 + p its steps with peer p.
      const int tid = e.value("tid", 0);
      e["pid"] = rank;
      e["tid"] = track * kTracksPerComm + tid;
      if (e.value("ph", "") == "M") {
        if (e.value("name", "") == "thread_name")
          e["args"]["name"] = "comm " + comm + (tid == 0 ? "" : ": steps with peer " + std::to_string(tid - 1));
      } else if (e.contains("ts")) {
        e["ts"] = e["ts"].get<double>() + static_cast<double>(offset) / 1e3;  // onto rank 0's clock
      }
      events.push_back(std::move(e));
    }
  }
  nlohmann::json merged = {{"traceEvents", events},
                           {"displayTimeUnit", "ns"},
                           {"theseus",
                            {{"format", 1},
                             {"merged", true},
                             {"ranks", ranks.size()},
                             {"communicators", trackOf.size()},
                             {"max_clock_error_ns", maxError},
                             {"sources", sources}}}};
  const std::string text = merged.dump() + "\n";
  if (output == "-") {
    fwrite(text.data(), 1, text.size(), stdout);
  } else {
    std::ofstream out(output);
    out << text;
    if (!out) {
      fprintf(stderr, "theseus-trace: cannot write %s\n", output.c_str());
      return 2;
    }
  }
  fprintf(stderr, "theseus-trace: merged %zu rank(s) of %zu communicator(s), %zu events; clocks aligned to rank 0's "
                  "within %.1f us\n", ranks.size(), trackOf.size(), events.size(), static_cast<double>(maxError) / 1e3);
  return 0;
}
