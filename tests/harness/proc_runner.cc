#include "proc_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <sstream>

extern char** environ;

#ifndef MPIRUN_PROGRAM  // the build names the mpirun MPI was found with
#define MPIRUN_PROGRAM "mpirun"
#endif

namespace theseus::test {
namespace {

double nowSec() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

Proc::Proc(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
  start_ = nowSec();
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) return;
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    std::string k = kv.substr(0, kv.find('='));
    if (env.count(k) == 0) envs.push_back(kv);
  }
  for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (std::string& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_ = fork();
  if (pid_ == 0) {
    setpgid(0, 0);
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    execvpe(args[0], args.data(), envp.data());
    dprintf(STDERR_FILENO, "cannot execute %s: %s\n", args[0], strerror(errno));
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  outFd_ = out[0];
  errFd_ = err[0];
}

Proc::~Proc() {
  if (pid_ > 0 && result_.exitCode == -1 && !result_.timedOut) {
    kill(-pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (outFd_ >= 0) close(outFd_);
  if (errFd_ >= 0) close(errFd_);
}

void Proc::pump(int timeoutMs) {
  pollfd fds[2] = {{outFd_, POLLIN, 0}, {errFd_, POLLIN, 0}};
  if (poll(fds, 2, timeoutMs) <= 0) return;
  int* fdp[2] = {&outFd_, &errFd_};
  std::string* dst[2] = {&result_.out, &result_.err};
  for (int i = 0; i < 2; ++i) {
    if (*fdp[i] < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    char buf[65536];
    ssize_t n = read(*fdp[i], buf, sizeof(buf));
    if (n > 0) {
      dst[i]->append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      close(*fdp[i]);
      *fdp[i] = -1;
    }
  }
}

bool Proc::waitForOutput(const std::string& text, double timeoutSec) {
  const double end = nowSec() + timeoutSec;
  while (nowSec() < end) {
    if (result_.out.find(text) != std::string::npos || result_.err.find(text) != std::string::npos) return true;
    if (outFd_ < 0 && errFd_ < 0) return false;
    pump(50);
  }
  return false;
}

void Proc::signal(int sig) {
  if (pid_ > 0) kill(pid_, sig);
}

ProcResult Proc::wait(double timeoutSec) {
  const double end = nowSec() + timeoutSec;
  int status = 0;
  bool reaped = false;
  while (!reaped) {
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      reaped = true;
      break;
    }
    if (nowSec() > end) {
      result_.timedOut = true;
      kill(-pid_, SIGKILL);
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      break;
    }
    if (outFd_ >= 0 || errFd_ >= 0)
      pump(20);
    else
      usleep(10000);
  }
  // Drain what is left (bounded: a grandchild may keep the pipes open).
  const double drainEnd = nowSec() + 2;
  while ((outFd_ >= 0 || errFd_ >= 0) && nowSec() < drainEnd) pump(50);
  if (reaped) result_.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result_.seconds = nowSec() - start_;
  return result_;
}

ProcResult runProcess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                      double timeoutSec) {
  Proc p(argv, env);
  return p.wait(timeoutSec);
}

ProcResult runMpirun(const std::vector<std::string>& args, std::map<std::string, std::string> env,
                     double timeoutSec) {
  std::string dir = "/tmp/theseus-mpirun-XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) {
    ProcResult r;
    r.err = std::string("cannot make a private TMPDIR for mpirun: ") + std::strerror(errno);
    return r;
  }
  env["TMPDIR"] = dir;
  std::vector<std::string> argv = {MPIRUN_PROGRAM};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcResult r = runProcess(argv, env, timeoutSec);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return r;
}

int countLines(const std::string& text, const std::string& needle) {
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line))
    if (line.find(needle) != std::string::npos) ++n;
  return n;
}

}  // namespace theseus::test
