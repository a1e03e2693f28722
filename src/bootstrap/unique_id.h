// ncclUniqueId contents. The id is self-contained (no lookup service):
//
//   bytes 0..7    magic: random per id; kEnvMagic when made from NCCL_COMM_ID
//   bytes 8..35   the root's address: sockaddr_in or sockaddr_in6 (as NCCL lays it out)
//   bytes 36..39  format tag "THID"
//   bytes 40..47  check: hash of bytes 0..39, so a garbage id is rejected up front
//   bytes 48..127 zero
#pragma once

#include <cstdint>

#include "bootstrap/socket.h"
#include "common/status.h"
#include "nccl.h"

namespace theseus::bootstrap {

// NCCL's fixed magic for ids made from NCCL_COMM_ID (no listener behind them until rank 0's init).
constexpr uint64_t kEnvMagic = 0x0280028002800280ull;

struct RootId {
  uint64_t magic = 0;
  SockAddr addr;
  // Made from NCCL_COMM_ID: the first rank of this root's share starts the root listener.
  bool fromEnv() const { return magic == kEnvMagic; }
};

void encodeRootId(const RootId& id, ncclUniqueId* out);
Result<RootId> decodeRootId(const ncclUniqueId& id);
// A hash identifying a set of ids (identical on every rank given the same ids).
uint64_t hashIds(const ncclUniqueId* ids, int nIds);
// A random 64-bit value from the kernel's generator (never 0).
uint64_t randomU64();

// ncclCommInitRankScalable's division of ranks among roots (NCCL's rule: the
// first nranks % nRoots roots take one rank more).
int rootOfRank(int rank, int nranks, int nRoots);
int firstRankOfRoot(int root, int nranks, int nRoots);
int ranksOfRoot(int root, int nranks, int nRoots);

}  // namespace theseus::bootstrap
