#include "bootstrap/host_identity.h"

#include <unistd.h>

#include <cstdio>
#include <mutex>

#include "bootstrap/wire.h"
#include "common/knobs.h"

namespace theseus::bootstrap {
namespace {

const StringKnob kHostId("NCCL_HOSTID", nullptr,
                         "Host identity string; ranks with equal values count as one host (default: hostname, "
                         "boot id and network namespace)");

std::string readFirstLine(const char* path) {
  FILE* f = fopen(path, "r");
  if (f == nullptr) return "";
  char buf[256] = "";
  if (fgets(buf, sizeof(buf), f) == nullptr) buf[0] = '\0';
  fclose(f);
  std::string s(buf);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

}  // namespace

uint64_t hostHashOf(const std::string& identity) {
  return wire::hashBytes(identity.data(), identity.size(), 0x484f5354ull);
}

const HostIdentity& hostIdentity() {
  static HostIdentity id;
  static std::once_flag once;
  std::call_once(once, [] {
    char host[256] = "";
    gethostname(host, sizeof(host) - 1);
    id.hostname = host;
    const std::string bootId = readFirstLine("/proc/sys/kernel/random/boot_id");
    if (kHostId.isSet()) {
      id.description = "NCCL_HOSTID=" + kHostId.get();
    } else {
      char ns[128] = "";
      ssize_t n = readlink("/proc/self/ns/net", ns, sizeof(ns) - 1);
      if (n > 0) ns[n] = '\0';
      id.description = id.hostname + "|" + bootId + "|" + ns;
    }
    id.hash = hostHashOf(id.description);
    id.machineHash = bootId.empty() ? id.hash : hostHashOf("boot|" + bootId);
  });
  return id;
}

}  // namespace theseus::bootstrap
