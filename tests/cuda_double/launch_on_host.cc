// The CUDA executor's kernel launch for the build against the CUDA test
// double: where the real build launches runLanesKernel (cuda_kernel.cu), this
// runs the same lane loop (exec/device/lane_runner.h) with one host thread per
// block, as the double's stream work. A host thread is a team of one; an idle
// pass yields the core (the peers are other processes on few cores).
#include <sched.h>

#include <chrono>
#include <cstdlib>

#include "exec/device/cuda_launch.h"
#include "exec/device/lane_runner.h"
#include "fake_cuda_core.h"

namespace theseus::exec::dev {
namespace {

struct HostWait {
  uint64_t now() const {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count());
  }
  void pause() const { sched_yield(); }
};

void runBlock(void* args, uint32_t block) {
  SoloTeam team;
  HostWait wait;
  auto* lanes = static_cast<LaneLaunch*>(args);
  uint32_t l = 0;
  while (block >= lanes[l].firstBlock + lanes[l].blocks) ++l;
  alignas(16) static thread_local char local[kLocalPlanBytes];  // the kernel's shared memory
  runLane(lanes[l], block - lanes[l].firstBlock, team, wait, LocalMemory{local, sizeof(local)});
}

}  // namespace

// The double has no SMs: every block runs on a thread of its own, so all are resident. A test sets
// THESEUS_FAKE_CUDA_RESIDENT_BLOCKS to make the device hold only so many (the executor's cap).
uint32_t residentBlocks(uint32_t) {
  const char* v = getenv("THESEUS_FAKE_CUDA_RESIDENT_BLOCKS");
  return v != nullptr ? static_cast<uint32_t>(strtoul(v, nullptr, 10)) : 0;
}

int launchLanes(LaneLaunch* lanes, uint32_t, uint32_t nblocks, uint32_t, cudaStream_t stream) {
  return static_cast<int>(fakeCudaLaunchBlocks(stream, &runBlock, lanes, nblocks));
}

}  // namespace theseus::exec::dev
