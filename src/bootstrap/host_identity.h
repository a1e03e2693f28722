// Host identity: ranks with equal hashes share a host (and may use shared
// memory). The hash covers the hostname, the kernel's boot id and the network
// namespace, so containers or namespaces on one machine count as different
// hosts; NCCL_HOSTID replaces all three when set.
#pragma once

#include <cstdint>
#include <string>

namespace theseus::bootstrap {

struct HostIdentity {
  uint64_t hash = 0;
  std::string hostname;
  std::string description;  // what went into the hash, for logs
};

// Computed once per process.
const HostIdentity& hostIdentity();
// The hash of an identity string (exposed for tests).
uint64_t hostHashOf(const std::string& identity);

}  // namespace theseus::bootstrap
