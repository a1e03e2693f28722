#include "run_launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

namespace theseus::run {
namespace {

int64_t nowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

const int kForwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

std::string describeStatus(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int s = WTERMSIG(status);
    return "was killed by signal " + std::to_string(s) + " (" + strsignal(s) + ")" +
           (WCOREDUMP(status) ? ", core dumped" : "");
  }
  return "ended with wait status " + std::to_string(status);
}

int statusCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string mkdirs(const std::string& dir) {
  std::string path;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    path = dir.substr(0, pos);
    if (path.empty()) continue;
    if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST)
      return "cannot create '" + path + "': " + strerror(errno);
  }
  return "";
}

}  // namespace

void Launcher::note(const std::string& msg) const { writeAll(STDERR_FILENO, "theseus-run: " + msg + "\n"); }

std::string Launcher::prepare() {
  if (std::string err = planRanks(o_, &plan_); !err.empty()) return err;
  if (o_.netns) {
    if (std::string err = netns_.create(static_cast<int>(plan_.hosts.size())); !err.empty()) return err;
    plan_.masterAddr = netns_.address(plan_.ranks[0].host);
    for (size_t h = 0; h < plan_.hosts.size(); ++h) {
      plan_.netns.push_back(netns_.nsName(static_cast<int>(h)));
      plan_.netnsAddrs.push_back(netns_.address(static_cast<int>(h)));
    }
    plan_.netnsBridge = netns_.bridgeNs();
    plan_.ncclPort = 29500;  // fresh namespaces: every port is free
    plan_.masterPort = 29501;
  } else if (std::string err = pickFreePorts(&plan_.ncclPort, &plan_.masterPort); !err.empty()) {
    return err;
  }
  if (!o_.outputDir.empty()) {
    if (std::string err = mkdirs(o_.outputDir); !err.empty()) return "--output-dir: " + err;
  }
  return "";
}

// fork + exec of one rank. The child: own process group, our original signal
// mask and default dispositions, its host's namespace, its output, its env.
std::string Launcher::spawn(int rank) {
  Rank& r = ranks_[rank];
  int outPipe[2] = {-1, -1}, errPipe[2] = {-1, -1};
  int outFile = -1, errFile = -1;
  if (o_.tagOutput) {
    if (pipe2(outPipe, O_CLOEXEC) != 0 || pipe2(errPipe, O_CLOEXEC) != 0)
      return std::string("pipe: ") + strerror(errno);
  } else if (!o_.outputDir.empty()) {
    std::string base = o_.outputDir + "/rank." + std::to_string(rank);
    outFile = open((base + ".out").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    errFile = open((base + ".err").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (outFile < 0 || errFile < 0) return "cannot create " + base + ".out/.err: " + strerror(errno);
  }
  std::vector<std::string> env = rankEnvironment(o_, plan_, rank);
  std::vector<char*> envp, argv;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  for (const std::string& a : o_.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const std::string ns = o_.netns ? netns_.nsName(plan_.ranks[rank].host) : "";
  sigset_t none;
  sigemptyset(&none);

  pid_t pid = fork();
  if (pid < 0) return std::string("fork: ") + strerror(errno);
  if (pid == 0) {
    setpgid(0, 0);
    for (int s : kForwarded) signal(s, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    signal(SIGCHLD, SIG_DFL);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    // Ranks lead background process groups: reading the terminal would stop them.
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    if (outPipe[1] >= 0) {
      dup2(outPipe[1], STDOUT_FILENO);
      dup2(errPipe[1], STDERR_FILENO);
    } else if (outFile >= 0) {
      dup2(outFile, STDOUT_FILENO);
      dup2(errFile, STDERR_FILENO);
    }
    if (!ns.empty()) {
      if (int e = enterNamespace(ns); e != 0) {
        dprintf(STDERR_FILENO, "theseus-run: rank %d: cannot enter network namespace %s: %s\n", rank, ns.c_str(),
                strerror(e));
        _exit(126);
      }
    }
    execvpe(argv[0], argv.data(), envp.data());
    dprintf(STDERR_FILENO, "theseus-run: rank %d: cannot execute '%s': %s\n", rank, argv[0], strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);  // also here: no race with an early signal
  r.pid = pid;
  r.running = true;
  if (outPipe[0] >= 0) {
    close(outPipe[1]);
    close(errPipe[1]);
    fcntl(outPipe[0], F_SETFL, O_NONBLOCK);
    fcntl(errPipe[0], F_SETFL, O_NONBLOCK);
    r.out = std::make_unique<LineForwarder>(outPipe[0], rank, STDOUT_FILENO);
    r.err = std::make_unique<LineForwarder>(errPipe[0], rank, STDERR_FILENO);
  }
  if (outFile >= 0) {
    close(outFile);
    close(errFile);
  }
  return "";
}

// Signals the process group of every rank, including ranks that already
// exited: their children may still be in the group. (A group with members
// keeps its id reserved, so this never reaches an unrelated process.)
void Launcher::signalRunning(int sig) {
  for (const Rank& r : ranks_) {
    if (r.pid <= 0) continue;
    if (kill(-r.pid, sig) != 0 && r.running) kill(r.pid, sig);  // no group: the leader itself
  }
}

std::string Launcher::runningList() const {
  std::string s;
  for (size_t i = 0; i < ranks_.size(); ++i)
    if (ranks_[i].running) s += (s.empty() ? "" : ",") + std::to_string(i);
  return s;
}

void Launcher::stopAll(int sig, const std::string& why) {
  std::string running = runningList();
  if (!why.empty()) note(why + (running.empty() ? "" : "; stopping ranks " + running));
  stopping_ = true;
  signalRunning(sig);
  escalateAtNs_ = nowNs() + static_cast<int64_t>(o_.killGraceSec * 1e9);
}

void Launcher::reap() {
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    for (size_t i = 0; i < ranks_.size(); ++i) {
      Rank& r = ranks_[i];
      if (r.pid != pid || !r.running) continue;
      r.running = false;
      r.status = status;
      bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      if (!failed || stopping_) continue;
      if (firstFailed_ < 0) firstFailed_ = static_cast<int>(i);
      const std::string who = "rank " + std::to_string(i) + " (pid " + std::to_string(pid) + ", host " +
                              plan_.hosts[plan_.ranks[i].host] + ") " + describeStatus(status);
      if (o_.keepGoing) note(who + "; the others go on (--keep-going)");
      else stopAll(SIGTERM, who);
    }
  }
}

void Launcher::onSignal(int sig) {
  if (sig == SIGCHLD) {
    reap();
    return;
  }
  if (userSignal_ != 0) {  // second interrupt: no more patience
    note(std::string("received ") + strsignal(sig) + " again: killing every rank");
    signalRunning(SIGKILL);
    return;
  }
  userSignal_ = sig;
  note(std::string("received ") + strsignal(sig) + ": forwarding it to ranks " + runningList());
  stopping_ = true;
  signalRunning(sig);
  escalateAtNs_ = nowNs() + static_cast<int64_t>(o_.killGraceSec * 1e9);
}

void Launcher::eventLoop() {
  const int64_t deadline = o_.timeoutSec > 0 ? startNs_ + static_cast<int64_t>(o_.timeoutSec * 1e9) : 0;
  int64_t drainUntil = 0;
  for (;;) {
    bool anyRunning = std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; });
    std::vector<pollfd> fds{{sigFd_, POLLIN, 0}};
    std::vector<LineForwarder*> fwd;
    for (Rank& r : ranks_)
      for (LineForwarder* f : {r.out.get(), r.err.get()})
        if (f != nullptr && f->open()) {
          fds.push_back({f->fd(), POLLIN, 0});
          fwd.push_back(f);
        }
    const int64_t now = nowNs();
    if (!anyRunning) {
      if (fwd.empty()) return;
      if (drainUntil == 0) drainUntil = now + 1000000000;  // grandchildren may hold the pipes
      if (now >= drainUntil) {
        for (LineForwarder* f : fwd) f->closeNow();
        return;
      }
    }
    int64_t wake = now + 1000000000;
    if (deadline > 0 && !stopping_) wake = std::min(wake, deadline);
    if (escalateAtNs_ > 0) wake = std::min(wake, escalateAtNs_);
    if (drainUntil > 0) wake = std::min(wake, drainUntil);
    int timeoutMs = static_cast<int>(std::max<int64_t>(0, (wake - now + 999999) / 1000000));
    int n = poll(fds.data(), fds.size(), timeoutMs);
    if (n < 0 && errno != EINTR) {
      note(std::string("poll: ") + strerror(errno));
      stopAll(SIGKILL, "");
    }
    if (n > 0 && (fds[0].revents & POLLIN)) {
      signalfd_siginfo si;
      while (read(sigFd_, &si, sizeof(si)) == static_cast<ssize_t>(sizeof(si))) onSignal(static_cast<int>(si.ssi_signo));
    }
    for (size_t i = 1; n > 0 && i < fds.size(); ++i)
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) fwd[i - 1]->pump();
    reap();  // SIGCHLD may coalesce; reaping is idempotent
    const int64_t t = nowNs();
    if (deadline > 0 && !stopping_ && t >= deadline && !runningList().empty()) {
      timedOut_ = true;
      stopAll(SIGTERM, "timeout after " + std::to_string(static_cast<int>(o_.timeoutSec)) + " s (--timeout)");
    }
    if (escalateAtNs_ > 0 && t >= escalateAtNs_ && !runningList().empty()) {
      note("ranks " + runningList() + " still running after " + std::to_string(o_.killGraceSec) +
           " s: sending SIGKILL");
      signalRunning(SIGKILL);
      escalateAtNs_ = 0;
    }
  }
}

int Launcher::exitCode() const {
  if (timedOut_) return 124;
  if (userSignal_ != 0) return 128 + userSignal_;
  if (firstFailed_ >= 0) return statusCode(ranks_[firstFailed_].status);
  return 0;
}

int Launcher::run() {
  sigset_t mask, old;
  sigemptyset(&mask);
  for (int s : kForwarded) sigaddset(&mask, s);
  sigaddset(&mask, SIGCHLD);
  sigprocmask(SIG_BLOCK, &mask, &old);
  signal(SIGPIPE, SIG_IGN);
  sigFd_ = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  if (sigFd_ < 0) {
    note(std::string("signalfd: ") + strerror(errno));
    return 1;
  }
  if (std::string err = prepare(); !err.empty()) {
    note(err);
    close(sigFd_);
    return 1;
  }
  startNs_ = nowNs();
  ranks_.resize(plan_.ranks.size());
  for (size_t i = 0; i < ranks_.size(); ++i) {
    if (std::string err = spawn(static_cast<int>(i)); !err.empty()) {
      note("rank " + std::to_string(i) + ": " + err);
      firstFailed_ = -1;
      stopAll(SIGKILL, "");
      break;
    }
  }
  eventLoop();
  if (firstFailed_ >= 0 || timedOut_ || userSignal_ != 0) {
    std::string summary;
    for (size_t i = 0; i < ranks_.size(); ++i)
      summary += "\n  rank " + std::to_string(i) + ": " + (ranks_[i].pid < 0 ? "not started" : describeStatus(ranks_[i].status));
    note("rank status:" + summary);
  }
  if (!o_.outputDir.empty() && !ranks_.empty()) note("output of every rank is in " + o_.outputDir + "/rank.<r>.{out,err}");
  netns_.destroy();
  close(sigFd_);
  bool spawnFailed = std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.pid < 0; });
  int code = exitCode();
  return (code == 0 && spawnFailed) ? 1 : code;
}

}  // namespace theseus::run
