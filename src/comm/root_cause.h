// Which rank failed first: the explanation every survivor gives of a failure.
//
// Peers that died are known to every survivor in the order the leader learnt of them
// (bootstrap failedRanks), so the first of them is everybody's root cause. A transport error,
// a reset link or "the leader left" names only the peer this rank talked to, which may have
// failed (or given up) because of the first one. The notice may lag the broken connection by
// a few milliseconds, so the explanation waits up to 300 ms for it.
#pragma once

#include <string>

#include "bootstrap/bootstrap.h"
#include "common/status.h"

namespace theseus::comm {

// "host pid N" for rank `r` of the bootstrap's communicator ("parent rank P, host pid N" in a
// child of a split or shrink; "?" out of range).
std::string whoIs(const bootstrap::Bootstrap& boot, int r);

// `s` led by "rank F (host pid N) failed first (then ...); here: " when a peer failed; `s`
// itself when none did, when it is not a peer-related error, or when it already says so.
// A stall (ncclTimeout) with no failed peer is no death at all: it says so and names the
// ranks of this host that are stopped (SIGSTOP, a debugger) or gone, since NCCL's text for
// the code old callers see ("remote process exited or there was a network error") would
// mislead.
Status withRootCause(const bootstrap::Bootstrap& boot, const Status& s);

}  // namespace theseus::comm
