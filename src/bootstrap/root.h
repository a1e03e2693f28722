// The root: a rendezvous service for exactly one communicator creation.
//
// Protocol. Each rank connects to its root, sends a Hello (magic = the unique
// id's random magic, kind kRootJoin) and a kJoin frame {rank, nranks, number of
// roots, its root index, hash of all ids, ids[0], PeerInfo}. The root accepts
// only consistent joins (same nranks/roots/ids as the first, a rank of its own
// share, not seen before); a bad join gets a kError reply and is dropped, and
// anything that is not our protocol is dropped without disturbing the others.
// With one root, once every rank has joined the root replies kTable {nonce,
// all PeerInfos} to all and exits. With several roots (InitRankScalable),
// root i > 0 forwards its share to root 0 (kRootForward), root 0 answers the
// full table (or the error) to its ranks and to every forwarding root, and
// those relay it to theirs.
//
// Failure. The root's clock starts at the first join; at
// THESEUS_BOOTSTRAP_TIMEOUT_MS it replies kError naming the ranks that never
// joined. A joined rank whose connection closes early (the process died) fails
// the creation at once. An id nobody uses expires after
// THESEUS_BOOTSTRAP_ROOT_TTL_MS, so no thread lives forever.
#pragma once

#include <cstdint>

#include "bootstrap/socket.h"
#include "common/status.h"

namespace theseus::bootstrap {

// Starts the root service on `listenFd` (ownership passes to the service thread). With
// `lingerOnFailure` a failed rendezvous keeps answering late ranks with the reason for a while;
// only for ids that are unique per attempt (ncclGetUniqueId): an NCCL_COMM_ID address is the
// same for a job's next attempt, whose ranks must not get the previous attempt's failure, and
// must be free for it at once.
Status startRoot(int listenFd, uint64_t magic, const SockAddr& addr, bool lingerOnFailure);

// "rank 3" / "ranks 2, 5 and 7" / "ranks 2, 3, 4, ... (12 in all)" for messages.
std::string describeRanks(const std::vector<int>& ranks);

}  // namespace theseus::bootstrap
