// Test helper: runs a program with extra environment variables, captures its
// stdout and stderr, and kills its whole process group at a timeout. Used by
// the harness and launcher tests.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace theseus::test {

struct ProcResult {
  int exitCode = -1;     // exit status, 128+signal, or -1 when killed at the timeout
  bool timedOut = false;
  std::string out;
  std::string err;
  double seconds = 0;
};

class Proc {
 public:
  // Starts argv[0] (PATH lookup) in its own process group.
  Proc(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {});
  ~Proc();
  Proc(const Proc&) = delete;
  Proc& operator=(const Proc&) = delete;

  pid_t pid() const { return pid_; }
  // Reads output until `text` appears in stdout or stderr (true) or the timeout.
  bool waitForOutput(const std::string& text, double timeoutSec);
  void signal(int sig);  // to the process only (not its group)
  ProcResult wait(double timeoutSec);

 private:
  void pump(int timeoutMs);
  pid_t pid_ = -1;
  int outFd_ = -1;
  int errFd_ = -1;
  double start_ = 0;
  ProcResult result_;
};

ProcResult runProcess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {},
                      double timeoutSec = 120);

// runProcess for `mpirun <args>` (OpenMPI): every run gets a private TMPDIR,
// removed afterwards, so OpenMPI's session directory (/tmp/ompi.<host>.<uid>)
// is never shared. Two mpiruns sharing it race: the first one to finish
// removes the directory while the other is creating its entry in it, and
// orte_init fails ("A call to mkdir was unable to create ..."), which is what
// two harness tests running in parallel under ctest -j did.
ProcResult runMpirun(const std::vector<std::string>& args, std::map<std::string, std::string> env = {},
                     double timeoutSec = 120);

// Number of lines of `text` that contain `needle`.
int countLines(const std::string& text, const std::string& needle);

}  // namespace theseus::test
