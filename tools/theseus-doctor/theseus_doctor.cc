// theseus-doctor: reads the flight-recorder dumps of a job's ranks (THESEUS_FLIGHT_RECORDER_DUMP,
// SIGUSR1, theseusGetFlightRecorder) and says which rank never arrived, died or diverged, what
// stuck ranks wait for, and which link, host or rank makes the job slow (src/doctor/), in words
// or, with --json, as JSON.
//   theseus-doctor [--json] <dump or directory of dumps>...
// A dump that is not a Theseus flight recorder is reported (a bad_dump finding naming the file,
// the JSON path and the problem) and left out. Exit status: 0 with a verdict (even "nothing
// wrong"), 2 on bad usage, unreadable input, or when no input is a dump.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "doctor/dump.h"
#include "doctor/dump_analysis.h"

namespace {

constexpr const char* kUsage = "usage: theseus-doctor [--json] <flight-recorder dump or directory>...\n";

struct Inputs {
  std::vector<theseus::doctor::RankDump> dumps;
  std::vector<theseus::doctor::Finding> bad;
};

bool readOne(const std::string& path, Inputs* in) {
  std::ifstream f(path);
  if (!f) {
    fprintf(stderr, "theseus-doctor: cannot read %s: %s\n", path.c_str(), strerror(errno));
    return false;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  std::string why;
  if (j.is_discarded()) {
    why = path + ": not JSON";
  } else {
    auto d = theseus::doctor::parseDump(j, path);
    if (d.isOk()) {
      in->dumps.push_back(d.take());
      return true;
    }
    why = d.status().message();
  }
  fprintf(stderr, "theseus-doctor: %s (left out)\n", why.c_str());
  in->bad.push_back({"bad_dump", {}, {}, {}, 0, "not a Theseus flight-recorder dump: " + why, {}});
  return true;
}

// A directory: every file in it except temporaries (name order).
bool readPath(const std::string& path, Inputs* in) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return readOne(path, in);
  DIR* d = opendir(path.c_str());
  if (d == nullptr) {
    fprintf(stderr, "theseus-doctor: cannot read %s: %s\n", path.c_str(), strerror(errno));
    return false;
  }
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name[0] != '.' && (name.size() < 4 || name.compare(name.size() - 4, 4, ".tmp") != 0)) names.push_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  for (const std::string& n : names)
    if (!readOne(path + "/" + n, in)) return false;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json") {
      json = true;
    } else if (a == "-h" || a == "--help") {
      printf("%s", kUsage);
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      fprintf(stderr, "theseus-doctor: unknown option %s\n%s", a.c_str(), kUsage);
      return 2;
    } else {
      paths.push_back(a);
    }
  }
  if (paths.empty()) {
    fprintf(stderr, "%s", kUsage);
    return 2;
  }
  Inputs in;
  for (const std::string& p : paths)
    if (!readPath(p, &in)) return 2;
  if (in.dumps.empty()) {
    fprintf(stderr, "theseus-doctor: no flight-recorder dump among the inputs\n");
    return 2;
  }
  theseus::doctor::Diagnosis d = theseus::doctor::diagnose(in.dumps);
  d.verdict.findings.insert(d.verdict.findings.end(), in.bad.begin(), in.bad.end());
  if (json) printf("%s\n", theseus::doctor::toJson(d.verdict, d.placement).dump(1).c_str());
  else printf("%s", theseus::doctor::toText(d.verdict).c_str());
  return 0;
}
