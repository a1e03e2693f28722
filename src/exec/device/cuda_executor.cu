// The CUDA executor: device plans queued on the caller's stream, run by the
// interpreter kernel (cuda_kernel.cu), one thread block per lane. run()
// returns once the work is queued; completion is stream-ordered, as NCCL's.
//
// What it needs from memory:
//  * buffers: device or pinned host memory (plans with pageable host buffers
//    or host scratch go to the staging executor instead, see executorFor);
//  * FIFOs: the communicator's device FIFOs (shared host memory), registered
//    with cudaHostRegister (mapped, portable) the first time a kernel uses
//    them, so kernels on any GPU of the node reach them — "copies through
//    pinned host memory", which works across GPUs without peer access;
//  * images: each run()'s device plans and lane descriptors are copied into a
//    slot of pinned mapped memory; a slot is reused once the event recorded
//    after its kernels completed (a ring, so a warm communicator neither
//    allocates nor waits);
//  * abort: the communicator's AbortFlag mirrors into a pinned word the
//    kernel polls (AbortFlag::setMirror).
// A kernel's failure (mismatched message, stall, abort) is found the next time
// this thread runs a group on that communicator (the results live in pinned
// memory and are read without synchronising) and fails that call, naming the
// plan; stream synchronisation is the application's, as with NCCL.
//
// Enabled with THESEUS_DEVICE_EXECUTOR=cuda (it has not run on hardware yet;
// scripts/gpu-check.sh exercises it). Only this file and cuda_kernel.cu touch
// the CUDA runtime.
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "common/log.h"
#include "exec/device/cuda_launch.h"
#include "exec/device/dev_lower.h"
#include "exec/device/device_executor.h"
#include "exec/progress.h"
#include "transport/transport_manager.h"

namespace theseus::exec {
namespace {

Status cudaCheck(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::ok();
  return Status(ncclUnhandledCudaError, std::string(what) + " failed: " + cudaGetErrorName(e) + " (" +
                                            cudaGetErrorString(e) + ")");
}

// Host ranges registered for device access, process-wide (a segment is registered once).
Status registerForDevice(void* base, size_t bytes) {
  static std::mutex mu;
  static std::set<void*> registered;
  std::lock_guard<std::mutex> lock(mu);
  if (base == nullptr || registered.count(base)) return Status::ok();
  cudaError_t e = cudaHostRegister(base, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
  if (e == cudaErrorHostMemoryAlreadyRegistered) {
    (void)cudaGetLastError();
    e = cudaSuccess;
  }
  TH_CHECK(cudaCheck(e, "cudaHostRegister of a device FIFO segment"));
  registered.insert(base);
  return Status::ok();
}

// A bump allocator over one pinned, mapped chunk (reset per use).
class PinnedChunk {
 public:
  ~PinnedChunk() {
    if (base_ != nullptr) (void)cudaFreeHost(base_);
  }
  Status reserve(size_t bytes) {
    if (bytes <= capacity_) return Status::ok();
    if (base_ != nullptr) (void)cudaFreeHost(base_);
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
};

// One run()'s images, reusable once `done` completed.
struct Slot {
  PinnedChunk memory;
  std::vector<cudaEvent_t> events;  // one per stream used
  std::vector<std::pair<const Plan*, dev::LaneResult*>> results;  // (first plan of the lane, its result)
  std::vector<std::vector<const Plan*>> lanePlans;
  bool busy = false;
};

// Per communicator (identified by its abort flag): its pinned abort word and a failure seen later.
struct CommState {
  uint32_t* abortWord = nullptr;
  Status failure;
};

class CudaExecutor final : public Executor {
 public:
  const char* name() const override { return "cuda"; }
  bool serves(device::MemoryKindMask kinds) const override {
    return (kinds & ~(device::maskOf(device::MemoryKind::kDevice) | device::maskOf(device::MemoryKind::kHostPinned))) ==
           0;
  }
  Status run(std::vector<Lane>& lanes, const ExecOptions& options) override;

 private:
  Status collect(Slot& slot, bool wait);
  Result<CommState*> commOf(const Plan& p);
  Result<Slot*> freeSlot();

  std::mutex mu_;  // groups may be run from several threads
  std::vector<std::unique_ptr<Slot>> slots_;
  size_t next_ = 0;
  std::map<const AbortFlag*, CommState> comms_;
};

// Reads a finished slot's results; a failure is recorded for its communicator.
Status CudaExecutor::collect(Slot& slot, bool wait) {
  if (!slot.busy) return Status::ok();
  for (cudaEvent_t e : slot.events) {
    cudaError_t q = wait ? cudaEventSynchronize(e) : cudaEventQuery(e);
    if (q == cudaErrorNotReady) return Status(ncclInProgress, "");
    TH_CHECK(cudaCheck(q, "waiting for an earlier group's kernels"));
  }
  for (size_t l = 0; l < slot.results.size(); ++l) {
    const dev::LaneResult& r = *slot.results[l].second;
    if (r.state == 1) continue;
    const Plan& p = *slot.lanePlans[l][std::min<size_t>(r.failedPlan, slot.lanePlans[l].size() - 1)];
    Status s = r.state == 3   ? remoteError("%s: rank %d: the communicator was aborted", p.describe().c_str(), p.rank)
               : r.state == 4 ? remoteError("%s: rank %d made no progress on the GPU for the stall timeout",
                                            p.describe().c_str(), p.rank)
                              : remoteError("%s: rank %d: the device interpreter stopped (state %u); see the peers' "
                                            "errors", p.describe().c_str(), p.rank, r.state);
    if (p.abort != nullptr) {
      auto it = comms_.find(p.abort);
      if (it != comms_.end() && it->second.failure.isOk()) it->second.failure = s;
    }
  }
  slot.busy = false;
  return Status::ok();
}

Result<CommState*> CudaExecutor::commOf(const Plan& p) {
  CommState& c = comms_[p.abort];
  if (c.abortWord == nullptr && p.abort != nullptr) {
    void* w = nullptr;
    TH_CHECK(cudaCheck(cudaHostAlloc(&w, sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable),
                       "cudaHostAlloc of an abort word"));
    c.abortWord = static_cast<uint32_t*>(w);
    p.abort->setMirror(c.abortWord);  // lives as long as the process: the flag may be set any time
  }
  return &c;
}

Result<Slot*> CudaExecutor::freeSlot() {
  constexpr size_t kSlots = 8;
  if (slots_.size() < kSlots) {
    slots_.push_back(std::make_unique<Slot>());
    return slots_.back().get();
  }
  Slot& s = *slots_[next_];
  next_ = (next_ + 1) % kSlots;
  Status st = collect(s, /*wait=*/true);  // only when 8 groups are still in flight
  if (!st.isOk()) return st;
  return &s;
}

Status CudaExecutor::run(std::vector<Lane>& lanes, const ExecOptions& options) {
  std::lock_guard<std::mutex> lock(mu_);
  TH_CHECK(prepareLanes(lanes, device::kHostAccessibleKinds | device::maskOf(device::MemoryKind::kDevice), name()));
  for (auto& s : slots_) (void)collect(*s, /*wait=*/false);  // earlier groups that finished meanwhile
  for (Lane& lane : lanes)
    for (Plan* p : lane.plans) {
      TH_ASSIGN(CommState * c, commOf(*p));
      if (!c->failure.isOk()) return c->failure;
      cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
      TH_CHECK(cudaCheck(cudaStreamIsCapturing(p->stream, &capture), "cudaStreamIsCapturing"));
      if (capture != cudaStreamCaptureStatusNone)
        return invalidUsage("%s: capturing Theseus operations into a CUDA graph is not supported yet (a replay would "
                            "reuse one launch's plan images and run state)", p->describe().c_str());
      if (p->stream != lane.plans.front()->stream)
        return invalidUsage("%s: one communicator's operations in a group use different streams; the CUDA executor "
                            "needs one stream per communicator and group", p->describe().c_str());
    }

  TH_ASSIGN(Slot * slot, freeSlot());
  // Images: lowered plans copied into the slot's pinned memory.
  size_t bytes = 4096;
  std::vector<std::vector<dev::LoweredPlan>> byLane(lanes.size());
  for (size_t l = 0; l < lanes.size(); ++l) {
    for (Plan* p : lanes[l].plans) {
      byLane[l].emplace_back();
      TH_CHECK(dev::lowerForDevice(*p, &byLane[l].back()));
      const dev::LoweredPlan& lp = byLane[l].back();
      bytes += sizeof(dev::Plan) + 16 * 6 + lp.steps.size() * sizeof(dev::Step) +
               lp.preds.size() * sizeof(uint32_t) + lp.conns.size() * sizeof(dev::Conn) +
               lp.state.size() * sizeof(dev::StepState) + lp.cursors.size() * sizeof(dev::Cursor);
    }
    bytes += sizeof(dev::LaneLaunch) + sizeof(dev::LaneResult) + 64;
  }
  for (size_t l = 0; l < lanes.size(); ++l)
    for (Plan* p : lanes[l].plans)
      for (const PlanConn& c : p->conns) {
        TH_ASSIGN(transport::DeviceFifo f, p->transports->deviceFifo(c.peer, c.channel, c.isSend));
        TH_CHECK(registerForDevice(f.segmentBase, f.segmentBytes));
      }
  TH_CHECK(slot->memory.reserve(bytes));
  slot->memory.reset();
  slot->results.clear();
  slot->lanePlans.clear();
  for (cudaEvent_t e : slot->events) (void)cudaEventDestroy(e);
  slot->events.clear();

  // Lanes that share a stream go into one launch (their blocks run side by side).
  const uint64_t stallNs =
      static_cast<uint64_t>(std::max<int64_t>(0, options.stallTimeoutMs != 0 ? options.stallTimeoutMs
                                                                             : configuredStallTimeoutMs())) *
      1000000;
  std::vector<std::pair<cudaStream_t, std::vector<size_t>>> groups;
  for (size_t l = 0; l < lanes.size(); ++l) {
    cudaStream_t s = lanes[l].plans.empty() ? nullptr : lanes[l].plans.front()->stream;
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == s; });
    if (it == groups.end()) groups.push_back({s, {l}});
    else it->second.push_back(l);
  }
  for (const auto& [stream, members] : groups) {
    auto* launches = static_cast<dev::LaneLaunch*>(
        PinnedChunk::allocate(&slot->memory, members.size() * sizeof(dev::LaneLaunch), alignof(dev::LaneLaunch)));
    if (launches == nullptr) return internalError("CUDA executor: image memory exhausted");
    for (size_t k = 0; k < members.size(); ++k) {
      size_t l = members[k];
      auto* plans = static_cast<dev::Plan*>(
          PinnedChunk::allocate(&slot->memory, byLane[l].size() * sizeof(dev::Plan), alignof(dev::Plan)));
      auto* result = static_cast<dev::LaneResult*>(
          PinnedChunk::allocate(&slot->memory, sizeof(dev::LaneResult), alignof(dev::LaneResult)));
      if ((plans == nullptr && !byLane[l].empty()) || result == nullptr)
        return internalError("CUDA executor: image memory exhausted");
      for (size_t i = 0; i < byLane[l].size(); ++i) {
        dev::Plan* image = dev::copyImage(byLane[l][i], &PinnedChunk::allocate, &slot->memory);
        if (image == nullptr) return internalError("CUDA executor: image memory exhausted");
        plans[i] = *image;  // the lane's plans are contiguous
      }
      *result = dev::LaneResult{};
      const Plan* first = lanes[l].plans.empty() ? nullptr : lanes[l].plans.front();
      launches[k] = dev::LaneLaunch{plans, static_cast<uint32_t>(byLane[l].size()),
                                    first != nullptr && first->abort != nullptr ? first->abort->mirror() : nullptr,
                                    stallNs, result};
      slot->results.push_back({first, result});
      slot->lanePlans.emplace_back(lanes[l].plans.begin(), lanes[l].plans.end());
    }
    static const uint32_t threads = 512;
    int rc = dev::launchLanes(launches, static_cast<uint32_t>(members.size()), threads, stream);
    TH_CHECK(cudaCheck(static_cast<cudaError_t>(rc), "launching the Theseus kernel"));
    cudaEvent_t done;
    TH_CHECK(cudaCheck(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate"));
    TH_CHECK(cudaCheck(cudaEventRecord(done, stream), "cudaEventRecord"));
    slot->events.push_back(done);
  }
  slot->busy = true;
  // Telemetry sees the plans as queued (their duration is the GPU's, not known here).
  for (Lane& lane : lanes)
    if (lane.observer)
      for (Plan* p : lane.plans) lane.observer->planDone(*p, 0, nowNs());
  return Status::ok();
}

}  // namespace

Executor* cudaDeviceExecutor() {
  static CudaExecutor executor;
  return &executor;
}

}  // namespace theseus::exec
