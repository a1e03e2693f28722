// theseus-run: starts the ranks of a job on this machine (see run_launcher.h).
#include <cstdio>

#include "run_launcher.h"
#include "run_netns.h"
#include "run_options.h"

int main(int argc, char** argv) {
  theseus::run::Options o;
  std::string err = theseus::run::parseOptions(argc, argv, &o);
  if (!err.empty()) {
    fprintf(stderr, "theseus-run: %s\n%s", err.c_str(), theseus::run::usageText().c_str());
    return 2;
  }
  if (o.help) {
    fputs(theseus::run::usageText().c_str(), stdout);
    return 0;
  }
  if (o.cleanupNetns) {
    std::string log;
    int n = theseus::run::NetnsTopology::cleanupStale(&log);
    fputs(log.c_str(), stdout);
    printf("theseus-run: removed %d stale namespace(s)\n", n);
    return 0;
  }
  theseus::run::Launcher launcher(o);
  return launcher.run();
}
