#include "run_netns.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "../common/run_command.h"

namespace theseus::run {

using tools::runCommand;

int enterNamespace(const std::string& name) {
  std::string path = "/var/run/netns/" + name;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  int rc = setns(fd, CLONE_NEWNET);
  int e = errno;
  close(fd);
  return rc == 0 ? 0 : e;
}

std::string NetnsTopology::unavailableReason() {
  if (geteuid() != 0)
    return "--netns needs root (it creates network namespaces, veth pairs and a bridge); run as root or drop --netns";
  std::string err = runCommand({"ip", "-V"});
  if (!err.empty()) return "--netns needs the 'ip' command (iproute2): " + err;
  return "";
}

std::string NetnsTopology::create(int nhosts) {
  if (std::string why = unavailableReason(); !why.empty()) return why;
  const std::string prefix = "th" + std::to_string(getpid()) + "-";
  bridgeNs_ = prefix + "br";
  std::string lastError;
  auto step = [&](const std::vector<std::string>& argv) {
    lastError = runCommand(argv);
    return lastError.empty();
  };
  auto fail = [&](const std::string& what) {
    destroy();
    return "--netns: " + what + ": " + lastError;
  };
  if (!step({"ip", "netns", "add", bridgeNs_})) return fail("creating the bridge namespace");
  created_.push_back(bridgeNs_);
  if (!step({"ip", "-n", bridgeNs_, "link", "add", "br0", "type", "bridge"}) ||
      !step({"ip", "-n", bridgeNs_, "link", "set", "br0", "up"}) ||
      !step({"ip", "-n", bridgeNs_, "link", "set", "lo", "up"}))
    return fail("creating the bridge");
  std::vector<std::string> addrs;
  for (int h = 0; h < nhosts; ++h) {
    const std::string ns = prefix + "h" + std::to_string(h);
    const std::string veth = "v" + std::to_string(h);
    const int id = h + 1;
    const std::string addr = "10.99." + std::to_string(id / 256) + "." + std::to_string(id % 256);
    if (!step({"ip", "netns", "add", ns})) return fail("creating namespace " + ns);
    created_.push_back(ns);
    if (!step({"ip", "-n", bridgeNs_, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns}) ||
        !step({"ip", "-n", bridgeNs_, "link", "set", veth, "master", "br0"}) ||
        !step({"ip", "-n", bridgeNs_, "link", "set", veth, "up"}) ||
        !step({"ip", "-n", ns, "addr", "add", addr + "/16", "dev", "eth0"}) ||
        !step({"ip", "-n", ns, "link", "set", "eth0", "up"}) ||
        !step({"ip", "-n", ns, "link", "set", "lo", "up"}))
      return fail("wiring namespace " + ns);
    hostNs_.push_back(ns);
    addrs.push_back(addr);
  }
  addresses_ = addrs;
  return "";
}

void NetnsTopology::destroy() {
  // Hosts first, the bridge namespace last.
  for (auto it = created_.rbegin(); it != created_.rend(); ++it) {
    std::string err = runCommand({"ip", "netns", "del", *it});
    if (!err.empty()) fprintf(stderr, "theseus-run: warning: %s\n", err.c_str());
  }
  created_.clear();
  hostNs_.clear();
}

int NetnsTopology::cleanupStale(std::string* log) {
  DIR* d = opendir("/var/run/netns");
  if (d == nullptr) return 0;
  std::vector<std::string> stale;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.size() < 4 || name.compare(0, 2, "th") != 0) continue;
    size_t dash = name.find('-');
    if (dash == std::string::npos || dash == 2) continue;
    std::string pidText = name.substr(2, dash - 2);
    if (pidText.find_first_not_of("0123456789") != std::string::npos) continue;
    pid_t pid = static_cast<pid_t>(atol(pidText.c_str()));
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;  // its theseus-run still lives
    stale.push_back(name);
  }
  closedir(d);
  int removed = 0;
  for (const std::string& ns : stale) {
    std::string err = runCommand({"ip", "netns", "del", ns});
    if (err.empty()) {
      ++removed;
      *log += "removed " + ns + "\n";
    } else {
      *log += err + "\n";
    }
  }
  return removed;
}

}  // namespace theseus::run
