// The launcher proper: starts the ranks, forwards their output and our
// signals, watches them, and stops everybody when one fails or time runs out.
//
// Protocol (the invariants the tests check):
//  * every rank is the leader of its own process group, so a signal sent to
//    the group reaches the rank and whatever it started; the terminal's
//    Ctrl-C reaches only theseus-run, which forwards it;
//  * the first rank to exit non-zero (or by a signal) is reported with how it
//    ended; the others get SIGTERM, then SIGKILL after --kill-grace seconds
//    (sent to every rank's process group, so children of ranks die too);
//  * --timeout stops everybody the same way and exits 124;
//  * SIGINT/SIGTERM/SIGHUP to theseus-run are forwarded to every rank (a
//    second one kills them outright); theseus-run then exits 128+signal;
//  * nothing waits forever: the event loop polls with a deadline, and output
//    pipes still open after every rank is gone (grandchildren) are given one
//    second before they are closed;
//  * network namespaces (--netns) are removed on every exit path except our
//    own SIGKILL (then `theseus-run --cleanup-netns`).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "run_netns.h"
#include "run_options.h"
#include "run_output.h"
#include "run_plan.h"

namespace theseus::run {

class Launcher {
 public:
  explicit Launcher(const Options& o) : o_(o) {}
  // Returns theseus-run's exit status.
  int run();

 private:
  struct Rank {
    pid_t pid = -1;
    bool running = false;
    int status = 0;           // wait status once reaped
    std::unique_ptr<LineForwarder> out, err;
  };

  std::string prepare();
  std::string spawn(int rank);
  void eventLoop();
  void reap();
  void onSignal(int sig);
  void stopAll(int sig, const std::string& why);
  void signalRunning(int sig);
  std::string runningList() const;
  void note(const std::string& msg) const;
  int exitCode() const;

  Options o_;
  Plan plan_;
  NetnsTopology netns_;
  std::vector<Rank> ranks_;
  int sigFd_ = -1;
  int64_t startNs_ = 0;
  int64_t escalateAtNs_ = 0;   // SIGKILL stragglers at this time (0: not stopping)
  bool stopping_ = false;
  bool timedOut_ = false;
  int userSignal_ = 0;
  int firstFailed_ = -1;       // rank whose failure stopped the run
  std::vector<int> outputFds_; // --output-dir files (parent copies, closed after spawn)
};

}  // namespace theseus::run
