// Real degraded links for the adaptivity benchmark: the kernel's traffic
// control (tc) on the network-namespace hosts theseus-run --netns creates.
//
//   slow link a -> b   an htb qdisc on host a's eth0 with one class at `rate`
//                      and a u32 filter on b's address; everything else is
//                      unclassified and leaves unshaped (htb's direct queue),
//                      so only that one directed link is slow;
//   slow host h        a tbf at `rate` on h's eth0 (all it sends) and on its
//                      switch port v<h> in the bridge namespace (all it
//                      receives): every link of the host is slow;
//   slow NIC of h      the tbf on h's eth0 only: everything h sends is slow,
//                      what it receives is not;
//   heal               the root qdiscs go again.
//
// The namespaces come from theseus-run (THESEUS_RUN_NETNS, _ADDRS, _BRIDGE).
// Commands run with `tc -n <namespace>` from any namespace (root needed, as
// for --netns itself).
#pragma once

#include <string>
#include <vector>

namespace theseus::bench {

// "a,b,,c" -> {"a", "b", "c"}; null or "" -> {}.
std::vector<std::string> splitCsv(const char* text);

class LinkShaper {
 public:
  // Reads the namespaces from the environment; "" or why it cannot shape.
  std::string init();
  int hosts() const { return static_cast<int>(ns_.size()); }

  // Each returns "" or the failed command with its error output.
  std::string slowLink(int from, int to, const std::string& rate);
  std::string slowHost(int host, const std::string& rate);
  std::string slowEgress(int host, const std::string& rate);
  std::string healAll();

 private:
  std::string run(const std::vector<std::string>& argv);
  std::string tbf(const std::string& ns, const std::string& dev, const std::string& rate);
  std::vector<std::string> ns_, addrs_;
  std::string bridge_;
  std::vector<std::pair<std::string, std::string>> shaped_;  // (namespace, device) with a root qdisc
};

}  // namespace theseus::bench
