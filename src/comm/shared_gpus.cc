#include "comm/shared_gpus.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>

#include "common/log.h"

namespace theseus::comm {

uint64_t gpuHashOf(const std::string& busId) {
  if (busId.empty()) return 0;
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char c : busId) h = (h ^ c) * 0x100000001b3ull;
  return h == 0 ? 1 : h;
}

bool mpsControlFound() {
  const char* dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
  const std::string control = std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp/nvidia-mps") + "/control";
  return access(control.c_str(), F_OK) == 0;
}

int ranksOnGpu(const bootstrap::Bootstrap& bs) {
  const auto& peers = bs.peers();
  const uint64_t mine = peers[bs.rank()].gpuHash;
  if (mine == 0) return 1;
  int n = 0;
  for (int r : bs.localRanks()) n += peers[r].gpuHash == mine ? 1 : 0;
  return n > 0 ? n : 1;
}

void noteSharedGpus(const bootstrap::Bootstrap& bs, const std::string& busId) {
  const auto& peers = bs.peers();
  const bootstrap::PeerInfo& me = peers[bs.rank()];
  if (me.gpuHash == 0) return;
  for (int r : bs.localRanks()) {
    const bootstrap::PeerInfo& p = peers[r];
    if (r == bs.rank() || p.gpuHash != me.gpuHash || p.pid == me.pid) continue;
    static std::atomic<bool> said{false};
    if (mpsControlFound()) {
      TH_INFO(log::kInit, "rank %d shares GPU %s with rank %d of another process; MPS is running, so their kernels "
              "run side by side", bs.rank(), busId.c_str(), r);
    } else if (!said.exchange(true)) {
      TH_WARN("rank %d shares GPU %s with rank %d of another process, and no MPS control daemon was found: their "
              "CUDA executor kernels time-slice the GPU, and each message round between them may wait a time "
              "slice (milliseconds). Start MPS (nvidia-cuda-mps-control -d) or set THESEUS_DEVICE_EXECUTOR=off",
              bs.rank(), busId.c_str(), r);
    }
    return;
  }
}

}  // namespace theseus::comm
