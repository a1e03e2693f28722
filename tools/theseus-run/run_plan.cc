#include "run_plan.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

extern char** environ;

namespace theseus::run {

bool isLocalHostName(const std::string& name) {
  if (name == "localhost" || name == "::1" || name.rfind("127.", 0) == 0) return true;
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) == 0 && name == host) return true;
  return false;
}

std::string planRanks(const Options& o, Plan* plan) {
  Plan p;
  const int n = o.nranks;
  std::vector<HostSpec> hosts = o.hosts;
  if (hosts.empty()) {
    if (o.netns) {
      for (int r = 0; r < n; ++r) hosts.push_back({"node" + std::to_string(r), 1});
    } else {
      hosts.push_back({"localhost", 0});
    }
  }
  if (!o.netns) {
    for (const HostSpec& h : hosts)
      if (!isLocalHostName(h.name))
        return "remote hosts not supported: use mpirun (host '" + h.name +
               "' is not this machine; with --netns every --hosts entry is simulated locally in its own "
               "network namespace)";
  }
  std::vector<int> hostOf(n);
  bool bySlots = true;
  for (const HostSpec& h : hosts) bySlots = bySlots && h.slots > 0;
  if (bySlots) {
    int r = 0;
    for (size_t h = 0; h < hosts.size() && r < n; ++h)
      for (int s = 0; s < hosts[h].slots && r < n; ++s) hostOf[r++] = static_cast<int>(h);
    if (r < n) return "not enough slots in --hosts for " + std::to_string(n) + " ranks";
  } else {
    const int nh = static_cast<int>(hosts.size());
    for (int h = 0; h < nh; ++h)
      for (int r = h * n / nh; r < (h + 1) * n / nh; ++r) hostOf[r] = h;
  }
  for (const HostSpec& h : hosts) p.hosts.push_back(h.name);
  std::map<int, int> perHost;
  for (int r = 0; r < n; ++r) perHost[hostOf[r]]++;
  std::map<int, int> seen;
  for (int r = 0; r < n; ++r) {
    RankPlan rp;
    rp.rank = r;
    rp.host = hostOf[r];
    rp.localRank = seen[rp.host]++;
    rp.localSize = perHost[rp.host];
    p.ranks.push_back(rp);
  }
  *plan = p;
  return "";
}

std::string pickFreePorts(int* a, int* b) {
  int fds[2] = {-1, -1};
  int ports[2] = {0, 0};
  std::string err;
  for (int i = 0; i < 2 && err.empty(); ++i) {
    fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fds[i] < 0 || bind(fds[i], reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        getsockname(fds[i], reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      err = std::string("cannot find a free TCP port on 127.0.0.1: ") + strerror(errno);
    } else {
      ports[i] = ntohs(addr.sin_port);
    }
  }
  // Both stay bound until now, so the two ports differ.
  for (int fd : fds)
    if (fd >= 0) close(fd);
  *a = ports[0];
  *b = ports[1];
  return err;
}

std::vector<std::string> rankEnvironment(const Options& o, const Plan& plan, int rank) {
  const RankPlan& rp = plan.ranks.at(rank);
  std::map<std::string, std::string> vars;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq != std::string::npos) vars[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  const std::string n = std::to_string(o.nranks);
  std::map<std::string, std::string> ours = {
      {"RANK", std::to_string(rank)},
      {"WORLD_SIZE", n},
      {"LOCAL_RANK", std::to_string(rp.localRank)},
      {"LOCAL_WORLD_SIZE", std::to_string(rp.localSize)},
      {"GROUP_RANK", std::to_string(rp.host)},
      {"MASTER_ADDR", plan.masterAddr},
      {"MASTER_PORT", std::to_string(plan.masterPort)},
      {"THESEUS_RANK", std::to_string(rank)},
      {"THESEUS_NRANKS", n},
      {"THESEUS_LOCAL_RANK", std::to_string(rp.localRank)},
      {"THESEUS_LOCAL_SIZE", std::to_string(rp.localSize)},
      {"THESEUS_HOST", plan.hosts.at(rp.host)},
      {"NCCL_COMM_ID", plan.masterAddr + ":" + std::to_string(plan.ncclPort)},
  };
  if (!plan.netns.empty()) {
    auto join = [](const std::vector<std::string>& v) {
      std::string out;
      for (const std::string& x : v) out += (out.empty() ? "" : ",") + x;
      return out;
    };
    ours["THESEUS_RUN_NETNS"] = join(plan.netns);
    ours["THESEUS_RUN_NETNS_ADDRS"] = join(plan.netnsAddrs);
    ours["THESEUS_RUN_NETNS_BRIDGE"] = plan.netnsBridge;
  }
  if (o.ompiEnv) {
    ours["OMPI_COMM_WORLD_RANK"] = std::to_string(rank);
    ours["OMPI_COMM_WORLD_SIZE"] = n;
    ours["OMPI_COMM_WORLD_LOCAL_RANK"] = std::to_string(rp.localRank);
    ours["OMPI_COMM_WORLD_LOCAL_SIZE"] = std::to_string(rp.localSize);
  }
  for (const auto& [k, v] : ours) vars[k] = v;
  // One identity per launch, so a rank of another job cannot join this one's rendezvous
  // (bootstrap/job_identity.h); a THESEUS_JOB_ID the user set is kept.
  if (!vars.count("THESEUS_JOB_ID"))
    vars["THESEUS_JOB_ID"] = "theseus-run-" + std::to_string(getpid()) + "-" + std::to_string(plan.ncclPort);
  for (const auto& [k, v] : o.env) vars[k] = v;  // -x wins (e.g. -x NCCL_COMM_ID=...)
  std::vector<std::string> env;
  for (const auto& [k, v] : vars) env.push_back(k + "=" + v);
  return env;
}

}  // namespace theseus::run
