// Host identity: ranks with equal hashes share a host (and may use shared
// memory). The hash covers the hostname, the kernel's boot id and the network
// namespace, so containers or namespaces on one machine count as different
// hosts; NCCL_HOSTID replaces all three when set.
//
// Machine identity: ranks with equal machine hashes run on one kernel (its
// boot id), so they share its cores whatever hosts they count as - network
// namespaces or containers on one machine. Waiting strategies use it: a rank
// that spins while its peer waits for the same core slows both down.
#pragma once

#include <cstdint>
#include <string>

namespace theseus::bootstrap {

struct HostIdentity {
  uint64_t hash = 0;
  uint64_t machineHash = 0;  // the kernel's boot id (the host hash where it cannot be read)
  std::string hostname;
  std::string description;  // what went into the hash, for logs
};

// Computed once per process.
const HostIdentity& hostIdentity();
// The hash of an identity string (exposed for tests).
uint64_t hostHashOf(const std::string& identity);

}  // namespace theseus::bootstrap
