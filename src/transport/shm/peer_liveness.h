// PeerLiveness: whether a local peer process still exists, for the shm
// transport (a peer that dies leaves its FIFOs silent, not closed).
// /proc/<pid>/stat must be there, not a zombie, and carry the start time seen
// at set-up (so a recycled pid is not mistaken for the peer). No descriptor is
// held; checks are rate-limited.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace theseus::transport {

class PeerLiveness {
 public:
  PeerLiveness(int rank, int pid);
  // Cheap: looks at the process at most every 100 ms; OK while it lives.
  Status check();

 private:
  int rank_;
  int pid_;
  uint64_t startTime_ = 0;  // 0: unknown (then only existence is checked)
  uint64_t nextCheckNs_ = 0;
  uint32_t calls_ = 63;  // the first call looks
  bool exited_ = false;
};

}  // namespace theseus::transport
