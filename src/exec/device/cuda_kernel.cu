// The CUDA side of the device executor: the interpreter (interpreter.h) run by
// one or more thread blocks per lane (lane_runner.h). The leader (thread 0) decides,
// every thread moves its share of the elements, __syncthreads() separates the
// phases, and the decisions reach the other threads through shared memory.
// Idle blocks poll the abort word and a stall clock (%globaltimer) between
// passes. A launch captured into a CUDA graph restarts its plans on every
// replay.
#include "exec/device/cuda_launch.h"
#include "exec/device/lane_runner.h"

namespace theseus::exec::dev {
namespace {

struct BlockTeam {
  __device__ bool leader() const { return threadIdx.x == 0; }
  __device__ Span span() const { return Span{threadIdx.x, blockDim.x}; }
  __device__ void sync() { __syncthreads(); }
  template <class T>
  __device__ T share(const T& v) {
    static_assert(sizeof(T) <= 256, "shared decisions are small");
    __shared__ __align__(16) unsigned char board[256];
    if (leader()) memcpy(board, &v, sizeof(T));
    __syncthreads();
    T out;
    memcpy(&out, board, sizeof(T));
    __syncthreads();
    return out;
  }
};

struct GpuWait {
  __device__ uint64_t now() const {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
  }
  __device__ void pause() const { spinPause(); }
};

// Block b of the grid runs block b - firstBlock of the lane whose blocks include it.
// Each block keeps the plan it runs in dynamic shared memory (kLocalPlanBytes).
__global__ void runLanesKernel(LaneLaunch* lanes) {
  extern __shared__ __align__(16) unsigned char localPlan[];
  BlockTeam team;
  GpuWait wait;
  uint32_t l = 0;
  while (blockIdx.x >= lanes[l].firstBlock + lanes[l].blocks) ++l;
  runLane(lanes[l], blockIdx.x - lanes[l].firstBlock, team, wait, LocalMemory{localPlan, kLocalPlanBytes});
}

}  // namespace

uint32_t residentBlocks(uint32_t threads) {
  int device = -1, sms = 0, perSm = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, runLanesKernel, static_cast<int>(threads),
                                                    kLocalPlanBytes) != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: clear it for the launch's check
    return 0;
  }
  return sms > 0 && perSm > 0 ? static_cast<uint32_t>(sms) * static_cast<uint32_t>(perSm) : 0;
}

int launchLanes(LaneLaunch* lanes, uint32_t, uint32_t nblocks, uint32_t threads, cudaStream_t stream) {
  runLanesKernel<<<nblocks, threads, kLocalPlanBytes, stream>>>(lanes);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace theseus::exec::dev
