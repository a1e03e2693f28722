// --netns: one network namespace per (virtual) host, joined to a private
// bridge, so ranks on different "hosts" talk over real TCP through veth pairs.
//
// Topology (all names carry theseus-run's pid, so concurrent runs never meet):
//   namespace th<pid>-br    holds bridge br0 (nothing touches the root namespace)
//   namespace th<pid>-h<i>  holds eth0 = 10.99.x.y/16 (host i + 1) and lo, with
//                           the veth peer v<i> enslaved to br0
// Ranks get THESEUS_RUN_NETNS (the hosts' namespaces, by host index),
// THESEUS_RUN_NETNS_ADDRS (their addresses) and THESEUS_RUN_NETNS_BRIDGE, so a
// program can shape its links with tc (scripts/bench-adaptive.sh does).
// A rank enters its host's namespace with setns() between fork and exec.
// destroy() deletes every namespace (veths and the bridge go with them);
// cleanupStale() removes namespaces of theseus-run processes that died
// without cleaning up (e.g. SIGKILL).
#pragma once

#include <string>
#include <vector>

namespace theseus::run {

class NetnsTopology {
 public:
  NetnsTopology() = default;
  ~NetnsTopology() { destroy(); }
  NetnsTopology(const NetnsTopology&) = delete;
  NetnsTopology& operator=(const NetnsTopology&) = delete;

  // Creates the namespaces for `nhosts` hosts. Returns "" or an error (after
  // removing whatever it had created).
  std::string create(int nhosts);
  void destroy();

  const std::string& nsName(int host) const { return hostNs_.at(host); }
  const std::string& address(int host) const { return addresses_.at(host); }
  const std::string& bridgeNs() const { return bridgeNs_; }
  const std::vector<std::string>& allNamespaces() const { return created_; }

  // Why --netns cannot work here ("" when it can).
  static std::string unavailableReason();
  // Removes namespaces named th<pid>-* whose pid is gone; returns how many.
  static int cleanupStale(std::string* log);

 private:
  std::vector<std::string> created_;  // in creation order
  std::vector<std::string> hostNs_;
  std::vector<std::string> addresses_;
  std::string bridgeNs_;
};

// In a forked child: enter the namespace `name` (setns). Returns errno or 0.
int enterNamespace(const std::string& name);

}  // namespace theseus::run
