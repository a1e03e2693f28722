// Command line of theseus-run.
//
//   theseus-run -np N [--hosts a,b|a:2,b:2] [--netns] [--timeout S]
//               [--tag-output | --output-dir D] [--kill-grace S] [--ompi-env]
//               [-x VAR=VALUE]... -- program [args...]
//   theseus-run --cleanup-netns
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace theseus::run {

struct HostSpec {
  std::string name;
  int slots = 0;  // 0: not given
};

struct Options {
  int nranks = 0;
  std::vector<HostSpec> hosts;
  bool netns = false;
  double timeoutSec = 0;       // 0: none
  double killGraceSec = 3;     // SIGTERM -> SIGKILL
  bool tagOutput = false;
  bool keepGoing = false;      // a failing rank does not stop the others (fault-tolerant jobs)
  std::string outputDir;
  bool ompiEnv = false;
  bool cleanupNetns = false;
  bool help = false;
  std::vector<std::pair<std::string, std::string>> env;  // -x
  std::vector<std::string> command;
};

// Returns "" on success, else a one-line error.
std::string parseOptions(int argc, const char* const* argv, Options* out);
std::string usageText();

}  // namespace theseus::run
