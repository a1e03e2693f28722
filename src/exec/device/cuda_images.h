// What the CUDA executor (cuda_executor.cu) queues besides kernels: the
// images a group's kernels read (device plans and lane descriptors in pinned,
// mapped host memory), the slot that holds one eager group's images until its
// events completed, a captured group's images that its CUDA graph owns and
// hands back when destroyed, and the capture mode the executor runs under.
// Included by cuda_executor.cu alone (compiled by nvcc, or by the host
// compiler against the CUDA test double).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "exec/device/cuda_launch.h"
#include "exec/plan.h"

namespace theseus::exec::cuda_images {

inline Status cudaCheck(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::ok();
  return Status(ncclUnhandledCudaError, std::string(what) + " failed: " + cudaGetErrorName(e) + " (" +
                                            cudaGetErrorString(e) + ")");
}

// A bump allocator over one pinned, mapped chunk (reset per use).
class PinnedChunk {
 public:
  ~PinnedChunk() {
    if (base_ != nullptr) (void)cudaFreeHost(base_);
    for (void* p : outgrown_) (void)cudaFreeHost(p);
  }
  // A chunk that grows keeps its old memory until it is destroyed: cudaFreeHost may wait for the device, and
  // kernels of other ranks of this process (threads) can be running then, waiting for this thread's next launch.
  Status reserve(size_t bytes) {
    if (bytes <= capacity_) return Status::ok();
    if (base_ != nullptr) outgrown_.push_back(base_);
    base_ = nullptr;
    capacity_ = std::max(bytes, capacity_ * 2);
    void* p = nullptr;
    TH_CHECK(cudaCheck(cudaHostAlloc(&p, capacity_, cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostAlloc"));
    base_ = static_cast<char*>(p);
    return Status::ok();
  }
  void reset() { used_ = 0; }
  static void* allocate(void* ctx, size_t bytes, size_t align) {
    auto* c = static_cast<PinnedChunk*>(ctx);
    size_t at = (c->used_ + align - 1) / align * align;
    if (at + bytes > c->capacity_) return nullptr;
    c->used_ = at + bytes;
    return c->base_ + at;
  }

 private:
  char* base_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
  std::vector<void*> outgrown_;
};

// One run()'s images, reusable once its events completed.
struct Slot {
  PinnedChunk memory;
  // Created as needed and kept (a warm slot creates none); an event belongs to the device it was
  // created on, so one recorded on another device's stream is made anew there.
  std::vector<std::pair<cudaEvent_t, int>> events;
  size_t eventsUsed = 0;            // one per stream of the run
  // Per lane, what collect() needs of its communicator, copied from its first plan at launch: the engine
  // reuses (rewrites) the plan objects for its next group while another rank's thread of this process may
  // collect this slot, so the slot never reads them after the launch.
  struct LaneResults {
    bool hasPlans = false;  // a lane without plans runs nothing
    int rank = -1;
    const AbortFlag* abort = nullptr;
    transport::TransportManager* transports = nullptr;
    dev::LaneResult* results = nullptr;  // one per block
    uint32_t blocks = 1;
    static LaneResults of(const Plan* first, dev::LaneResult* results, uint32_t blocks) {
      if (first == nullptr) return LaneResults{false, -1, nullptr, nullptr, results, blocks};
      return LaneResults{true, first->rank, first->abort, first->transports, results, blocks};
    }
  };
  std::vector<LaneResults> results;
  // Per lane, its plans' names (for the same reason).
  std::vector<std::vector<Plan::Name>> laneNames;
  size_t lanes = 0;
  bool busy = false;
  std::thread::id owner;  // the thread whose group it holds
  uint64_t launched = 0;  // launch order (the oldest of a thread's slots is waited for first)
  bool claimed = false;   // a thread waits for it without the executor's lock
};

// One captured group: the images its CUDA graph replays, owned by the graph
// (a user object the graph retains) and freed once the graph and every
// executable made from it are destroyed. Its lanes' results are checked at
// every later run(): a replay that failed fails the communicator.
struct Captured {
  PinnedChunk memory;
  struct LaneEntry {
    const AbortFlag* comm = nullptr;
    dev::LaneResult* results = nullptr;  // one per block
    uint32_t blocks = 1;
    std::vector<std::string> plans;  // describe() of each plan, for errors (the Plan objects are reused)
    int rank = -1;
    bool reported = false;
  };
  std::vector<LaneEntry> lanes;
};

// Graphs are destroyed on threads of their own; CUDA calls the user object's
// destructor there, where no CUDA call is allowed, so it only hands the images
// back, and the next run() frees them. Never destroyed: a graph may be
// destroyed during exit (by CUDA's teardown, or a static of the caller's) when
// this library's statics are already gone.
inline std::mutex& retiredMutex() {
  static auto* mu = new std::mutex;
  return *mu;
}
inline std::vector<Captured*>& retired() {
  static auto* list = new std::vector<Captured*>;
  return *list;
}
inline void retireCaptured(void* captured) {
  std::lock_guard<std::mutex> lock(retiredMutex());
  retired().push_back(static_cast<Captured*>(captured));
}

// While the executor runs, this thread's capture mode is relaxed: it queries
// events, allocates and registers memory, which a capture in global or
// thread-local mode forbids (the call would fail and invalidate the capture).
// None of these calls is stream work, so none of them becomes part of a graph.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCaptureMode() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

}  // namespace theseus::exec::cuda_images
