#include "run_options.h"

#include <cerrno>
#include <cstdlib>
#include <sstream>

namespace theseus::run {
namespace {

std::string parseSeconds(const std::string& flag, const std::string& v, double* out) {
  char* end = nullptr;
  errno = 0;
  double d = strtod(v.c_str(), &end);
  if (v.empty() || errno != 0 || *end != '\0' || !(d > 0) || d > 1e7)
    return flag + ": '" + v + "' is not a positive number of seconds";
  *out = d;
  return "";
}

std::string parseHosts(const std::string& v, std::vector<HostSpec>* out) {
  std::stringstream ss(v);
  std::string item;
  std::vector<HostSpec> hosts;
  while (std::getline(ss, item, ',')) {
    HostSpec h;
    size_t colon = item.find(':');
    h.name = item.substr(0, colon);
    if (h.name.empty()) return "--hosts: empty host name in '" + v + "'";
    if (colon != std::string::npos) {
      std::string slots = item.substr(colon + 1);
      char* end = nullptr;
      long s = strtol(slots.c_str(), &end, 10);
      if (slots.empty() || *end != '\0' || s < 1 || s > 4096)
        return "--hosts: '" + item + "': slots must be a positive integer";
      h.slots = static_cast<int>(s);
    }
    hosts.push_back(h);
  }
  if (hosts.empty()) return "--hosts: no host given";
  *out = hosts;
  return "";
}

}  // namespace

std::string parseOptions(int argc, const char* const* argv, Options* out) {
  Options o;
  int i = 1;
  auto value = [&](const std::string& flag, std::string* v) -> std::string {
    if (i + 1 >= argc) return flag + " needs a value";
    *v = argv[++i];
    return "";
  };
  for (; i < argc; ++i) {
    std::string a = argv[i];
    std::string v, err;
    if (a == "--") {
      ++i;
      break;
    } else if (a == "-np" || a == "-n" || a == "--np") {
      if (!(err = value(a, &v)).empty()) return err;
      char* end = nullptr;
      long n = strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 1 || n > 4096) return a + ": '" + v + "' is not a rank count in [1, 4096]";
      o.nranks = static_cast<int>(n);
    } else if (a == "--hosts" || a == "-H") {
      if (!(err = value(a, &v)).empty() || !(err = parseHosts(v, &o.hosts)).empty()) return err;
    } else if (a == "--netns") {
      o.netns = true;
    } else if (a == "--timeout") {
      if (!(err = value(a, &v)).empty() || !(err = parseSeconds(a, v, &o.timeoutSec)).empty()) return err;
    } else if (a == "--kill-grace") {
      if (!(err = value(a, &v)).empty() || !(err = parseSeconds(a, v, &o.killGraceSec)).empty()) return err;
    } else if (a == "--tag-output") {
      o.tagOutput = true;
    } else if (a == "--keep-going") {
      o.keepGoing = true;
    } else if (a == "--output-dir") {
      if (!(err = value(a, &v)).empty()) return err;
      if (v.empty()) return "--output-dir: empty directory name";
      o.outputDir = v;
    } else if (a == "--ompi-env") {
      o.ompiEnv = true;
    } else if (a == "-x" || a == "--env") {
      if (!(err = value(a, &v)).empty()) return err;
      size_t eq = v.find('=');
      if (eq == std::string::npos || eq == 0) {
        const char* cur = getenv(v.c_str());
        if (v.empty() || cur == nullptr) return a + ": '" + v + "' is not VAR=VALUE nor a set variable";
        o.env.emplace_back(v, cur);
      } else {
        o.env.emplace_back(v.substr(0, eq), v.substr(eq + 1));
      }
    } else if (a == "--cleanup-netns") {
      o.cleanupNetns = true;
    } else if (a == "-h" || a == "--help") {
      o.help = true;
    } else if (!a.empty() && a[0] == '-') {
      return "unknown option '" + a + "' (see --help)";
    } else {
      break;  // the program (a "--" before it is recommended)
    }
  }
  for (; i < argc; ++i) o.command.push_back(argv[i]);
  if (!o.help && !o.cleanupNetns) {
    if (o.nranks == 0) return "missing -np N";
    if (o.command.empty()) return "missing the program to run (theseus-run -np N -- program args)";
    if (o.tagOutput && !o.outputDir.empty()) return "--tag-output and --output-dir are exclusive";
    int slots = 0;
    bool allSlots = !o.hosts.empty();
    for (const HostSpec& h : o.hosts) {
      slots += h.slots;
      allSlots = allSlots && h.slots > 0;
    }
    if (allSlots && slots < o.nranks)
      return "--hosts gives " + std::to_string(slots) + " slots for " + std::to_string(o.nranks) + " ranks";
  }
  *out = o;
  return "";
}

std::string usageText() {
  return "usage: theseus-run -np N [options] -- program [args...]\n"
         "       theseus-run --cleanup-netns\n"
         "Starts N local rank processes with the environment torchrun and mpirun users expect:\n"
         "  RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK MASTER_ADDR MASTER_PORT\n"
         "  THESEUS_RANK THESEUS_NRANKS THESEUS_LOCAL_RANK THESEUS_LOCAL_SIZE THESEUS_HOST\n"
         "  NCCL_COMM_ID=<addr>:<free port> (every rank's ncclGetUniqueId returns the same id)\n"
         "options:\n"
         "  -np, -n N            number of ranks\n"
         "  --hosts a,b|a:2,b:2  virtual hosts (with --netns) or local names; ranks fill hosts in\n"
         "                       order (by slots when given, else in equal blocks). Remote hosts are\n"
         "                       not supported: use mpirun\n"
         "  --netns              each host (each rank without --hosts) in its own network namespace,\n"
         "                       joined by veth pairs to a bridge, so ranks talk over real TCP (root)\n"
         "  --timeout S          kill every rank and exit 124 after S seconds\n"
         "  --tag-output         prefix every output line with [rank]\n"
         "  --keep-going         a rank that fails does not stop the others (jobs that recover from\n"
         "                       a lost rank, e.g. with ncclCommShrink); the exit status is still the\n"
         "                       first failing rank's\n"
         "  --output-dir D       write D/rank.<r>.out and D/rank.<r>.err instead\n"
         "  --kill-grace S       seconds between SIGTERM and SIGKILL when stopping ranks (3)\n"
         "  --ompi-env           also set OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}\n"
         "  -x VAR=VALUE | VAR   set (or pass through) a variable for every rank\n"
         "  --cleanup-netns      remove namespaces left by theseus-run processes that no longer exist\n"
         "Exit status: 0 when every rank exits 0; else the first failing rank's status (128+signal when\n"
         "it was killed), 124 on --timeout, 128+signal when theseus-run itself was interrupted.\n";
}

}  // namespace theseus::run
