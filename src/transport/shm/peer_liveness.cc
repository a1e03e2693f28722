#include "transport/shm/peer_liveness.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/deadline.h"

namespace theseus::transport {
namespace {

// State letter and start time (clock ticks since boot) of a process; false when it is gone.
bool readProcStat(int pid, char* state, uint64_t* startTime) {
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE* f = fopen(path, "re");
  if (f == nullptr) return false;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  // "pid (comm) S ppid ...": comm may hold spaces or ')', so parse after the last ')'.
  const char* p = strrchr(buf, ')');
  if (p == nullptr || p[1] != ' ') return false;
  *state = p[2];
  // Field 22 (starttime) is the 20th field after the state.
  const char* q = p + 2;
  for (int field = 3; field < 22 && q != nullptr; ++field) {
    q = strchr(q, ' ');
    if (q != nullptr) ++q;
  }
  *startTime = q != nullptr ? strtoull(q, nullptr, 10) : 0;
  return true;
}

}  // namespace

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
