// theseus-doctor: reads the flight-recorder dumps of a job's ranks (THESEUS_FLIGHT_RECORDER_DUMP,
// SIGUSR1, theseusGetFlightRecorder) and says which rank never arrived or diverged, what stuck
// ranks wait for, and who straggles (doctor_analysis.h), in words or, with --json, as JSON.
//   theseus-doctor [--json] <dump or directory of dumps>...
// Exit status: 0 with a verdict (even "nothing wrong"), 2 on bad usage or unreadable input.
#include <dirent.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "doctor_analysis.h"

namespace {

bool readJson(const std::string& path, std::vector<nlohmann::json>* out) {
  std::ifstream f(path);
  if (!f) {
    fprintf(stderr, "theseus-doctor: cannot read %s: %s\n", path.c_str(), strerror(errno));
    return false;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    out->push_back(nlohmann::json::parse(ss.str()));
  } catch (const std::exception& e) {
    fprintf(stderr, "theseus-doctor: %s is not JSON: %s\n", path.c_str(), e.what());
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json") json = true;
    else if (a == "-h" || a == "--help") {
      printf("usage: theseus-doctor [--json] <flight-recorder dump or directory>...\n");
      return 0;
    } else paths.push_back(a);
  }
  if (paths.empty()) {
    fprintf(stderr, "usage: theseus-doctor [--json] <flight-recorder dump or directory>...\n");
    return 2;
  }
  std::vector<nlohmann::json> dumps;
  for (const std::string& p : paths) {
    struct stat st {};
    if (stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      DIR* d = opendir(p.c_str());
      while (dirent* e = d ? readdir(d) : nullptr)
        if (e->d_name[0] != '.' && !readJson(p + "/" + e->d_name, &dumps)) return 2;
      if (d) closedir(d);
    } else if (!readJson(p, &dumps)) {
      return 2;
    }
  }
  std::vector<std::string> notes;
  auto findings = theseus::doctor::diagnose(dumps, &notes);
  if (json) {
    printf("%s\n", theseus::doctor::toJson(findings, notes).dump(1).c_str());
    return 0;
  }
  for (const std::string& n : notes) printf("note: %s\n", n.c_str());
  if (findings.empty()) printf("verdict: nothing wrong in these dumps (every rank at the same operation)\n");
  for (const auto& f : findings) {
    printf("%s: %s\n", f.kind.c_str(), f.words.c_str());
    for (const std::string& e : f.evidence) printf("    %s\n", e.c_str());
  }
  return 0;
}
