// The CUDA side of the device executor: the interpreter (interpreter.h) run by
// one thread block per lane. The leader (thread 0) decides, every thread
// moves its share of the elements, __syncthreads() separates the phases, and
// the decisions reach the other threads through shared memory. Idle blocks
// poll the abort word and a stall clock (%globaltimer) between passes. A
// launch captured into a CUDA graph restarts its plans on every replay.
#include "exec/device/cuda_launch.h"
#include "exec/device/interpreter.h"

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

__device__ inline uint64_t globalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void runLanesKernel(LaneLaunch* lanes) {
  LaneLaunch& lane = lanes[blockIdx.x];
  BlockTeam team;
  if (lane.pristine != nullptr) {  // a replay: a failure of an earlier one stays, and stops this one
    uint32_t before = 0;
    if (team.leader()) before = loadAcquire(&lane.result->state);
    before = team.share(before);
    if (before >= 2) return;
    if (team.leader()) storeRelease(&lane.result->state, 0u);
  }
  for (uint32_t i = 0; i < lane.nplans; ++i) {
    Plan& p = lane.plans[i];
    if (lane.pristine != nullptr) restartPlan(p, lane.pristine[i], team);
    uint64_t idleSince = 0;
    for (;;) {
      Poll r = pollPlan(p, team);
      if (r == Poll::kDone) break;
      if (r == Poll::kFailed) {
        if (team.leader()) {
          lane.result->failedPlan = i;
          storeRelease(&lane.result->state, 2u);
        }
        return;
      }
      if (r == Poll::kProgress) {
        idleSince = 0;
        continue;
      }
      uint32_t stop = 0;
      if (team.leader()) {
        uint64_t now = globalTimerNs();
        if (idleSince == 0) idleSince = now;
        if (lane.abortWord != nullptr && loadAcquire(lane.abortWord) != 0) stop = 3;
        else if (lane.stallNs != 0 && now - idleSince > lane.stallNs) stop = 4;
      }
      stop = team.share(stop);
      if (stop != 0) {
        if (team.leader()) {
          lane.result->failedPlan = i;
          storeRelease(&lane.result->state, stop);
        }
        return;
      }
      spinPause();
    }
  }
  if (team.leader()) storeRelease(&lane.result->state, 1u);
}

}  // namespace

int launchLanes(LaneLaunch* lanes, uint32_t nlanes, uint32_t threads, cudaStream_t stream) {
  runLanesKernel<<<nlanes, threads, 0, stream>>>(lanes);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace theseus::exec::dev
