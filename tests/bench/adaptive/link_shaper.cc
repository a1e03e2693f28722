#include "link_shaper.h"

#include <cstdlib>
#include <sstream>

#include "../../../tools/common/run_command.h"

namespace theseus::bench {

std::vector<std::string> splitCsv(const char* text) {
  std::vector<std::string> out;
  if (text == nullptr) return out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::string LinkShaper::init() {
  ns_ = splitCsv(getenv("THESEUS_RUN_NETNS"));
  addrs_ = splitCsv(getenv("THESEUS_RUN_NETNS_ADDRS"));
  const char* br = getenv("THESEUS_RUN_NETNS_BRIDGE");
  bridge_ = br != nullptr ? br : "";
  if (ns_.empty() || ns_.size() != addrs_.size() || bridge_.empty())
    return "no network-namespace hosts: run under theseus-run --netns (root), which sets THESEUS_RUN_NETNS";
  return run({"tc", "-V"}).empty() ? "" : "the 'tc' command (iproute2) is missing";
}

std::string LinkShaper::run(const std::vector<std::string>& argv) { return tools::runCommand(argv); }

std::string LinkShaper::slowLink(int from, int to, const std::string& rate) {
  if (from < 0 || to < 0 || from >= hosts() || to >= hosts()) return "slowLink: no such host";
  const std::string& ns = ns_[from];
  for (auto argv : std::vector<std::vector<std::string>>{
           {"tc", "-n", ns, "qdisc", "replace", "dev", "eth0", "root", "handle", "1:", "htb", "r2q", "1000"},
           {"tc", "-n", ns, "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:10", "htb", "rate", rate,
            "ceil", rate},
           {"tc", "-n", ns, "filter", "add", "dev", "eth0", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
            "match", "ip", "dst", addrs_[to] + "/32", "flowid", "1:10"}}) {
    if (std::string err = run(argv); !err.empty()) return err;
  }
  shaped_.emplace_back(ns, "eth0");
  return "";
}

std::string LinkShaper::tbf(const std::string& ns, const std::string& dev, const std::string& rate) {
  if (std::string err = run({"tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, "burst",
                             "64kb", "latency", "100ms"});
      !err.empty())
    return err;
  shaped_.emplace_back(ns, dev);
  return "";
}

std::string LinkShaper::slowHost(int host, const std::string& rate) {
  if (host < 0 || host >= hosts()) return "slowHost: no such host";
  if (std::string err = tbf(ns_[host], "eth0", rate); !err.empty()) return err;
  return tbf(bridge_, "v" + std::to_string(host), rate);
}

std::string LinkShaper::slowEgress(int host, const std::string& rate) {
  if (host < 0 || host >= hosts()) return "slowEgress: no such host";
  return tbf(ns_[host], "eth0", rate);
}

std::string LinkShaper::healAll() {
  std::string firstError;
  for (const auto& [ns, dev] : shaped_) {
    std::string err = run({"tc", "-n", ns, "qdisc", "del", "dev", dev, "root"});
    if (firstError.empty()) firstError = err;
  }
  shaped_.clear();
  return firstError;
}

}  // namespace theseus::bench
