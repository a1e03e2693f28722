// Running a command without a shell, for tools and benchmarks that set up
// namespaces and traffic control (theseus-run --netns, the real-link bench).
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

extern char** environ;

namespace theseus::tools {

// Runs argv[0] (found on PATH) with stdout discarded. Returns "" on exit status
// 0, else "'<command>' failed: <its stderr>" or why it could not start.
inline std::string runCommand(const std::vector<std::string>& argv) {
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) return std::string("pipe: ") + strerror(errno);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, pipefd[1], STDERR_FILENO);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(pipefd[1]);
  std::string err;
  char buf[512];
  ssize_t n;
  while ((n = read(pipefd[0], buf, sizeof(buf))) > 0) err.append(buf, static_cast<size_t>(n));
  close(pipefd[0]);
  std::string cmd;
  for (const std::string& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
  if (rc != 0) return "cannot run '" + cmd + "': " + strerror(rc);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
  return "'" + cmd + "' failed" + (err.empty() ? "" : ": " + err);
}

}  // namespace theseus::tools
