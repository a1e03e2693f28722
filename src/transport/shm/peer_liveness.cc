#include "transport/shm/peer_liveness.h"

#include "common/deadline.h"
#include "common/proc_stat.h"

namespace theseus::transport {

PeerLiveness::PeerLiveness(int rank, int pid) : rank_(rank), pid_(pid) {
  char state;
  if (!readProcStat(pid, &state, &startTime_)) startTime_ = 0;
}

Status PeerLiveness::check() {
  if (!exited_) {
    if ((++calls_ & 63) != 0) return Status::ok();  // the clock itself only every 64th call (idle spins call this)
    uint64_t now = nowNs();
    if (now < nextCheckNs_) return Status::ok();
    nextCheckNs_ = now + 100 * 1000 * 1000;
    char state = 0;
    uint64_t start = 0;
    exited_ = !readProcStat(pid_, &state, &start) || state == 'Z' || state == 'X' ||
              (startTime_ != 0 && start != startTime_);
    if (!exited_) return Status::ok();
  }
  return remoteError("rank %d (pid %d on this host) exited while connected through shared memory", rank_, pid_);
}

}  // namespace theseus::transport
