// The CUDA executor: device plans queued on the caller's stream, run by the
// interpreter kernel (cuda_kernel.cu), one thread block per independent part
// of a lane's plans (dev_split.h), up to THESEUS_DEVICE_BLOCKS. run()
// returns once the work is queued; completion is stream-ordered, as NCCL's.
//
// What it needs from memory:
//  * buffers: device or pinned host memory (plans with pageable host buffers
//    or host scratch go to the staging executor instead, see executorFor);
//  * FIFOs: the communicator's device FIFOs. Those in the receiver's GPU
//    memory need nothing; those with host slots (shared host memory: no CUDA
//    IPC with the peer, NCCL_P2P_DISABLE, the proxy's rings for other hosts)
//    are registered (mapped, portable; device/host_registry.h) the first time
//    a kernel uses them, so kernels on any GPU of the node reach them —
//    "copies through pinned host memory", which works across GPUs without
//    peer access — and unregistered by their owner before it unmaps them;
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
// CUDA graphs. A group on streams being captured is lowered and launched as
// usual, but into images of its own that the graph owns (a user object,
// freed once the graph and its executables are destroyed), with the plans'
// pristine headers beside them: every replay restarts the plans from those
// (restartPlan) and so runs exactly what was captured — the schedule the
// decision table gave that seq on every rank — while the FIFO counters carry
// on in the FIFOs, so replays and eager groups mix on one communicator. A
// replay's failure is kept in its lane result and reported at a later group.
// The executor relaxes this thread's capture mode while it runs (it queries
// events and allocates, which stricter modes forbid during a capture).
//
// Runs the device buffers of communicators whose ranks all use CUDA
// (THESEUS_DEVICE_EXECUTOR=auto, the default, or cuda; device_executor.h);
// scripts/gpu-check.sh exercises it on a GPU. Only this file and cuda_kernel.cu touch
// the CUDA runtime (with cuda_images.h, its images and captured graphs).
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "common/log.h"
#include "device/host_registry.h"
#include "exec/device/cuda_images.h"
#include "exec/device/cuda_launch.h"
#include "exec/device/dev_lower.h"
#include "exec/device/dev_split.h"
#include "exec/device/device_executor.h"
#include "exec/progress.h"
#include "transport/transport_manager.h"

namespace theseus::exec {
namespace {

using cuda_images::Captured;
using cuda_images::cudaCheck;
using cuda_images::PinnedChunk;
using cuda_images::RelaxedCaptureMode;
using cuda_images::retireCaptured;
using cuda_images::retired;
using cuda_images::retiredMutex;
using cuda_images::Slot;

// Per communicator (identified by its abort flag): its pinned abort word and a failure seen later.
struct CommState {
  uint32_t* abortWord = nullptr;
  Status failure;
  bool saidZeroCopy = false;  // the first eager group whose messages peers read in place was logged
};

// The most slots (groups in flight) the executor keeps; past that a thread waits for its own oldest.
constexpr size_t kMaxSlots = 64;

// A plan that makes no progress for this long after a peer of its communicator failed stops (the
// host engine's rule for a failed peer it cannot tell the plan waits on).
constexpr uint64_t kPeerFailedIdleNs = 1000000000;

// The error of a lane that stopped with `state` (LaneResult) in `what`.
Status laneFailure(uint32_t state, const std::string& what, int rank) {
  switch (state) {
    case 5:
      return remoteError("%s: rank %d: a peer of the communicator failed or left, and the plan made no progress for "
                         "a second after (ncclCommGetAsyncError names a failed peer)",
                         what.c_str(), rank);
    case 3:
      return remoteError("%s: rank %d: the communicator was aborted", what.c_str(), rank);
    case 4:
      return remoteError("%s: rank %d made no progress on the GPU for the stall timeout (if a peer passed pageable "
                         "host memory for this operation, it runs over the host FIFOs, not the device FIFOs this "
                         "rank waits on: pass buffers of the same kind on every rank)", what.c_str(), rank);
    case dev::kSiblingStopped:
      return remoteError("%s: rank %d: a thread block of the operation stopped another (its error was lost)",
                         what.c_str(), rank);
    default:
      return remoteError("%s: rank %d: the device interpreter stopped (state %u); see the peers' errors", what.c_str(),
                         rank, state);
  }
}

// Whether a group is being captured into a CUDA graph, and into which.
struct CaptureOf {
  bool capturing = false;
  unsigned long long id = 0;
  cudaGraph_t graph = nullptr;
};

class CudaExecutor final : public Executor {
 public:
  const char* name() const override { return "cuda"; }
  bool serves(device::MemoryKindMask kinds) const override {
    return (kinds & ~(device::maskOf(device::MemoryKind::kDevice) | device::maskOf(device::MemoryKind::kHostPinned))) ==
           0;
  }
  Status run(std::vector<Lane>& lanes, const ExecOptions& options) override;
  bool capturable() const override { return true; }

 private:
  Status collect(Slot& slot, bool wait);
  void collectFinished();
  Result<CommState*> commOf(const Plan& p);
  Result<Slot*> freeSlot(std::unique_lock<std::mutex>& lock);
  Result<CaptureOf> captureOf(std::vector<Lane>& lanes, const std::vector<device::StreamCapture>* known);
  void checkReplays();
  Status lower(std::vector<Lane>& lanes, size_t* imageBytes);
  uint32_t laneBlockCap(const std::vector<Lane>& lanes, size_t l);
  Status layOutLane(size_t l, const Lane& lane, PinnedChunk& memory, bool replayable, uint64_t stallNs,
                    dev::LaneLaunch* ll);
  Status launch(std::vector<Lane>& lanes, PinnedChunk& memory, bool replayable, uint64_t stallNs, Slot* slot,
                Captured* captured);
  Status adoptCapture(Captured* captured, const CaptureOf& capture);

  std::mutex mu_;  // groups may be run from several threads
  std::vector<std::unique_ptr<Slot>> slots_;
  uint64_t launches_ = 0;
  size_t next_ = 0;  // where freeSlot's search starts: slots are used in turn, so warming up warms them all
  std::vector<Slot*> busy_;  // collectFinished(): the slots in flight, oldest first (storage reused)
  std::map<const AbortFlag*, CommState> comms_;
  std::vector<Captured*> captured_;                // live graphs' images
  std::vector<std::vector<dev::SplitPlan>> lowered_;  // per lane and plan, reused by every run()
  std::vector<uint32_t> laneBlocks_;                  // per lane: the most parts of any of its plans
  std::map<int, uint32_t> resident_;                  // per device: dev::residentBlocks (0: unknown)
  std::set<int> saidCapped_;                          // devices whose cap was logged
  struct StreamLanes {
    cudaStream_t stream = nullptr;
    int device = -1;  // the communicators' device: launches go there
    std::vector<size_t> lanes;
  };
  std::vector<StreamLanes> streamLanes_;  // launch(): lanes per (stream, device)
  // lower(): host ranges registered for a device since the registry last released anything
  // (device/host_registry.h), so a warm group registers nothing and takes no registry lock.
  std::set<std::tuple<int, void*, size_t>> registered_;
  uint64_t registeredReleases_ = ~uint64_t{0};
};

// Launches and events go to the communicator's device, whichever device the
// calling thread has current (one thread may drive communicators on several
// devices in one group, as NCCL allows); the caller's device is restored after.
class DeviceSwitch {
 public:
  DeviceSwitch() {
    if (cudaGetDevice(&original_) != cudaSuccess) original_ = -1;
    current_ = original_;
  }
  ~DeviceSwitch() {
    if (current_ != original_) (void)cudaSetDevice(original_);
  }
  DeviceSwitch(const DeviceSwitch&) = delete;
  DeviceSwitch& operator=(const DeviceSwitch&) = delete;
  Status to(int dev) {
    if (dev < 0 || original_ < 0 || dev == current_) return Status::ok();
    TH_CHECK(cudaCheck(cudaSetDevice(dev), "cudaSetDevice to the communicator's device"));
    current_ = dev;
    return Status::ok();
  }
  int device() const { return current_; }

 private:
  int original_ = -1;  // -1: no device could be read; nothing is switched
  int current_ = -1;
};

// Reads a finished slot's results; a failure is recorded for its communicator.
Status CudaExecutor::collect(Slot& slot, bool wait) {
  if (!slot.busy) return Status::ok();
  for (size_t i = 0; i < slot.eventsUsed; ++i) {
    cudaError_t q = wait ? cudaEventSynchronize(slot.events[i].first) : cudaEventQuery(slot.events[i].first);
    if (q == cudaErrorNotReady) return Status(ncclInProgress, "");
    TH_CHECK(cudaCheck(q, "waiting for an earlier group's kernels"));
  }
  for (size_t l = 0; l < slot.lanes; ++l) {
    const dev::LaneOutcome r = dev::laneOutcome(slot.results[l].results, slot.results[l].blocks);
    const Slot::LaneResults& lr = slot.results[l];
    if (!lr.hasPlans) continue;  // a lane without plans runs nothing
    if (r.directMessages > 0) {
      CommState& cs = comms_[lr.abort];
      if (!cs.saidZeroCopy)
        TH_INFO(log::kReg, "rank %d: local peers read %u messages of a group in place from its registered device "
                "buffers (zero-copy)", lr.rank, r.directMessages);
      cs.saidZeroCopy = true;
    }
    if (r.state == 1) continue;
    const std::vector<Plan::Name>& names = slot.laneNames[l];
    const std::string what = names[std::min<size_t>(r.failedPlan, names.size() - 1)].describe();
    // Stopped for a failure of a connection it needed (a proxied FIFO's network): that failure.
    const Status network = r.state == 5 && lr.transports != nullptr ? lr.transports->asyncFailure() : Status::ok();
    const Status s = network.isOk() ? laneFailure(r.state, what, lr.rank) : network.withContext(what);
    if (lr.abort != nullptr) {
      auto it = comms_.find(lr.abort);
      if (it != comms_.end() && it->second.failure.isOk()) it->second.failure = s;
    }
  }
  slot.busy = false;
  return Status::ok();
}

// Whether every block of a slot's lanes wrote its final state (the last thing
// a block does; pinned memory, no driver call): until then its kernels surely
// still run. Once they all have, only the slot's events say the kernels ended.
bool blocksReported(const Slot& slot) {
  for (size_t l = 0; l < slot.lanes; ++l)
    for (uint32_t b = 0; b < slot.results[l].blocks; ++b)
      if (dev::loadAcquire(&slot.results[l].results[b].state) == 0) return false;
  return true;
}

// Collects the earlier groups that finished, oldest first. A stream runs its
// kernels in order, so with one stream per communicator (the common case) the
// first group still running ends the search: one event query per group rather
// than one per slot in flight (eight or more, each a driver call on the enqueue
// path). A group whose blocks have not all reported is still running without
// asking its events, so a group in flight costs no query; one that reported is
// asked. While no slot is free every busy one is asked, reported or not (a
// kernel that faulted reports nothing, and its event then tells why), since
// groups on other streams may have finished before older ones.
void CudaExecutor::collectFinished() {
  size_t free = 0;
  if (busy_.capacity() < kMaxSlots) busy_.reserve(kMaxSlots);  // once: a warm enqueue allocates nothing
  busy_.clear();
  for (auto& s : slots_) {
    if (s->claimed) continue;
    if (s->busy) busy_.push_back(s.get());
    else ++free;
  }
  std::sort(busy_.begin(), busy_.end(), [](const Slot* a, const Slot* b) { return a->launched < b->launched; });
  for (Slot* s : busy_) {
    if (free > 0 && !blocksReported(*s)) break;
    const Status st = collect(*s, /*wait=*/false);
    if (st.code() == ncclInProgress) {
      if (free > 0) break;
      continue;
    }
    if (st.isOk()) ++free;
  }
}

// Frees the images of graphs destroyed since the last run() and records the
// failures of replays (read without synchronising: a replay still running
// shows state 0).
void CudaExecutor::checkReplays() {
  std::vector<Captured*> gone;
  {
    std::lock_guard<std::mutex> lock(retiredMutex());
    gone.swap(retired());
  }
  for (Captured* c : gone) {
    captured_.erase(std::remove(captured_.begin(), captured_.end(), c), captured_.end());
    delete c;
  }
  for (Captured* c : captured_)
    for (Captured::LaneEntry& e : c->lanes) {
      if (e.reported) continue;
      const dev::LaneOutcome r = dev::laneOutcome(e.results, e.blocks);
      if (r.state < 2) continue;
      e.reported = true;
      const std::string& what = e.plans[std::min<size_t>(r.failedPlan, e.plans.size() - 1)];
      Status failure = laneFailure(r.state, what + " (replayed from a CUDA graph)", e.rank);
      CommState& cs = comms_[e.comm];
      if (cs.failure.isOk()) cs.failure = failure;
    }
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

// A slot for a new group. Ranks that are threads of one process share the executor, and a rank's kernels
// wait for its peers' kernels, so a thread must never wait for a slot on a kernel that only another rank's
// next launch (or its own) releases, nor hold the executor's lock while it waits. With 8 shared slots, two
// ranks as threads (nccl-tests -t 2) deadlocked once one ran 8 groups ahead and then waited, lock held, on
// its oldest kernel, which waited for the other thread's launch. So: a free slot if there is one; else a
// new one, up to kSlots; past that the calling thread waits for the oldest of its own slots (whose peers'
// kernels were queued before its own later ones could be) with the lock released; a thread that holds none
// of them gets a new slot rather than wait on another thread's kernels. The first groups make eight slots
// and free ones are taken in turn, so a warm-up of 16 groups sizes every slot's images and a warm enqueue with
// up to eight groups in flight allocates nothing (more in flight grow the set once).
Result<Slot*> CudaExecutor::freeSlot(std::unique_lock<std::mutex>& lock) {
  constexpr size_t kBaseSlots = 8, kSlots = kMaxSlots;
  const std::thread::id me = std::this_thread::get_id();
  auto take = [&](Slot* s) {
    s->owner = me;
    s->launched = ++launches_;
    return s;
  };
  if (slots_.size() < kBaseSlots) {  // the first groups make eight slots, whatever finished meanwhile
    slots_.push_back(std::make_unique<Slot>());
    return take(slots_.back().get());
  }
  for (size_t i = 0; i < slots_.size(); ++i) {
    const size_t k = (next_ + i) % slots_.size();
    if (slots_[k]->busy || slots_[k]->claimed) continue;
    next_ = (k + 1) % slots_.size();
    return take(slots_[k].get());
  }
  Slot* oldest = nullptr;
  for (auto& s : slots_)
    if (s->owner == me && !s->claimed && (oldest == nullptr || s->launched < oldest->launched)) oldest = s.get();
  if (slots_.size() < kSlots || oldest == nullptr) {
    slots_.push_back(std::make_unique<Slot>());
    next_ = 0;
    return take(slots_.back().get());
  }
  oldest->claimed = true;
  std::vector<cudaEvent_t> events;
  for (size_t i = 0; i < oldest->eventsUsed; ++i) events.push_back(oldest->events[i].first);
  lock.unlock();
  cudaError_t waited = cudaSuccess;
  for (cudaEvent_t e : events)
    if (cudaError_t q = cudaEventSynchronize(e); q != cudaSuccess && waited == cudaSuccess) waited = q;
  lock.lock();
  oldest->claimed = false;
  TH_CHECK(cudaCheck(waited, "waiting for an earlier group's kernels"));
  TH_CHECK(collect(*oldest, /*wait=*/true));  // its events are complete: reads its results
  return take(oldest);
}

// Every plan's stream, one per communicator and group; all of them captured
// into one CUDA graph, or none. A capture fixes what the graph replays: the
// plans lowered now, with the schedule the decision table gives this seq on
// every rank. A stream's state comes from `known` (the enqueue path read it
// before lowering) when it is there, else from the runtime.
Result<CaptureOf> CudaExecutor::captureOf(std::vector<Lane>& lanes, const std::vector<device::StreamCapture>* known) {
  CaptureOf out;
  bool first = true;
  for (Lane& lane : lanes) {
    if (lane.plans.empty()) continue;
    for (Plan* p : lane.plans) {
      TH_ASSIGN(CommState * c, commOf(*p));
      if (!c->failure.isOk()) return c->failure;
      if (p->stream != lane.plans.front()->stream)
        return invalidUsage("%s: one communicator's operations in a group use different streams; the CUDA executor "
                            "needs one stream per communicator and group", p->describe().c_str());
    }
    const Plan& p = *lane.plans.front();
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    cudaGraph_t graph = nullptr;
    const device::StreamCapture* k = device::findCapture(known, p.stream);
    if (k != nullptr && (k->status != device::StreamCapture::Status::kActive || k->graph != nullptr)) {
      status = k->status == device::StreamCapture::Status::kActive        ? cudaStreamCaptureStatusActive
               : k->status == device::StreamCapture::Status::kInvalidated ? cudaStreamCaptureStatusInvalidated
                                                                          : cudaStreamCaptureStatusNone;
      id = k->id;
      graph = static_cast<cudaGraph_t>(k->graph);
    } else {
      TH_CHECK(cudaCheck(cudaStreamGetCaptureInfo(p.stream, &status, &id, &graph), "cudaStreamGetCaptureInfo"));
    }
    if (status == cudaStreamCaptureStatusInvalidated)
      return invalidUsage("%s: the stream's capture into a CUDA graph was invalidated before this call (an earlier "
                          "call in the capture failed); end the capture and start again",
                          p.describe().c_str());
    const bool capturing = status == cudaStreamCaptureStatusActive;
    if (first) {
      out = CaptureOf{capturing, id, graph};
      first = false;
    } else if (capturing != out.capturing || (capturing && id != out.id)) {
      return invalidUsage("%s: a group mixes operations being captured into a CUDA graph with operations that are "
                          "not, or captures into two graphs; capture all of a group's streams into one graph, or "
                          "none", p.describe().c_str());
    }
  }
  if (out.capturing)
    for (Lane& lane : lanes)
      for (Plan* p : lane.plans)
        if (p->reduction.scalarSource != nullptr && p->reduction.scalarMemory == device::MemoryKind::kHost)
          return invalidUsage("%s: the PreMulSum scalar (ncclScalarDevice) is in pageable host memory, which a "
                              "CUDA graph's replays cannot read; put it in device or pinned host memory",
                              p->describe().c_str());
  return out;
}

// Threads per block of the interpreter kernel.
constexpr uint32_t kThreads = 512;

// The most blocks lane `l` may split its plans into. A lane's blocks meet at
// barriers and a rank's kernel waits for its peers', so every block that waits
// for another must be resident at once: THESEUS_DEVICE_BLOCKS, capped at the
// GPU's resident blocks of the kernel shared out among what runs on it side by
// side — this group's lanes on that device, or the communicator's ranks on that
// GPU (other processes', under MPS), whichever is more. How a plan is split
// changes no message (dev_split.h), so ranks may split differently. The device
// query runs once per device; a cap is said once per device at INFO, and a GPU
// too small for one block each at WARN (its kernels may then wait for each
// other until the stall timeout).
uint32_t CudaExecutor::laneBlockCap(const std::vector<Lane>& lanes, size_t l) {
  const uint32_t most = dev::maxBlocksPerLane();
  if (lanes[l].plans.empty()) return most;
  const Plan& p = *lanes[l].plans.front();
  auto it = resident_.find(p.cudaDev);
  if (it == resident_.end()) {
    DeviceSwitch device;
    uint32_t n = 0;
    if (device.to(p.cudaDev).isOk()) n = dev::residentBlocks(kThreads);
    it = resident_.emplace(p.cudaDev, n).first;
  }
  const uint32_t resident = it->second;
  if (resident == 0) return most;
  uint32_t share = static_cast<uint32_t>(std::max(1, p.ranksOnGpu)), onDevice = 0;
  for (const Lane& other : lanes)
    if (!other.plans.empty() && other.plans.front()->cudaDev == p.cudaDev) {
      ++onDevice;
      share = std::max(share, static_cast<uint32_t>(std::max(1, other.plans.front()->ranksOnGpu)));
    }
  share = std::max(share, onDevice);
  const uint32_t cap = std::max(1u, resident / share);
  if (cap < most && saidCapped_.insert(p.cudaDev).second) {
    if (share > resident)
      TH_WARN("rank %d: GPU %d holds %u blocks of the Theseus kernel at once, fewer than the %u operations or ranks "
              "that run on it side by side need (one each): their kernels may wait for each other until the stall "
              "timeout; put fewer ranks on the GPU", p.rank, p.cudaDev, resident, share);
    else
      TH_INFO(log::kInit, "rank %d: THESEUS_DEVICE_BLOCKS=%u capped at %u blocks per operation on GPU %d: it holds %u "
              "blocks of the kernel at once, shared by %u operations or ranks", p.rank, most, cap, p.cudaDev,
              resident, share);
  }
  return std::min(most, cap);
}

// Lowers every lane's plans (reusing the previous run's storage) and sizes their images.
Status CudaExecutor::lower(std::vector<Lane>& lanes, size_t* imageBytes) {
  size_t bytes = 4096;
  if (lowered_.size() < lanes.size()) lowered_.resize(lanes.size());
  if (laneBlocks_.size() < lanes.size()) laneBlocks_.resize(lanes.size());
  if (const uint64_t releases = device::hostRegistryReleases(); releases != registeredReleases_) {
    registered_.clear();  // a range seen before may be gone (and its address reused)
    registeredReleases_ = releases;
  }
  for (size_t l = 0; l < lanes.size(); ++l) {
    if (lowered_[l].size() < lanes[l].plans.size()) lowered_[l].resize(lanes[l].plans.size());
    uint32_t blocks = 1;
    const uint32_t maxBlocks = laneBlockCap(lanes, l);
    for (size_t i = 0; i < lanes[l].plans.size(); ++i) {
      const Plan& p = *lanes[l].plans[i];
      dev::SplitPlan& sp = lowered_[l][i];
      TH_CHECK(dev::lowerForDevice(p, &sp.whole));
      dev::splitPlan(sp, maxBlocks, p.shapeId, p.bytes);
      blocks = std::max(blocks, sp.count);
      // Per part: copyImage's header and the image's five arrays, with up to
      // 16 bytes of alignment for each of those allocations.
      for (uint32_t b = 0; b < sp.count; ++b) {
        const dev::LoweredPlan& lp = sp.part(b);
        bytes += sizeof(dev::Plan) + 16 * 6 + lp.steps.size() * sizeof(dev::Step) +
                 lp.preds.size() * sizeof(uint32_t) + lp.conns.size() * sizeof(dev::Conn) +
                 lp.state.size() * sizeof(dev::StepState) + lp.cursors.size() * sizeof(dev::Cursor);
      }
      for (const auto& [base, size] : sp.whole.hostRanges) {
        if (base == nullptr || size == 0 || registered_.count({p.cudaDev, base, size}) != 0) continue;
        TH_CHECK(device::registerHostRange(p.cudaDev, base, size));
        registered_.insert({p.cudaDev, base, size});
      }
    }
    laneBlocks_[l] = blocks;
    // The lane's headers (one per plan and block, twice for a replayable launch), its results and
    // barrier counts per block, its divisions per plan, with alignment.
    const size_t nplans = lanes[l].plans.size();
    bytes += sizeof(dev::LaneLaunch) + 2 * nplans * blocks * sizeof(dev::Plan) +
             blocks * (sizeof(dev::LaneResult) + sizeof(dev::Arrival)) + nplans * sizeof(dev::LaneDivide) + 5 * 64;
  }
  *imageBytes = bytes;
  return Status::ok();
}

// One lane's part of a launch image: each plan's parts, one per block, plan
// by plan (contiguous: block b of plan i at i * blocks + b; a block without a
// part of a plan gets an empty one), their pristine headers for a replayable
// launch, a result and a barrier count per block, and the divisions of split
// averages. Fills `ll` but for firstBlock.
Status CudaExecutor::layOutLane(size_t l, const Lane& lane, PinnedChunk& memory, bool replayable, uint64_t stallNs,
                                dev::LaneLaunch* ll) {
  auto take = [&memory](size_t bytes, size_t align) { return PinnedChunk::allocate(&memory, bytes, align); };
  const size_t nplans = lane.plans.size();
  const uint32_t B = laneBlocks_[l];
  auto* plans = static_cast<dev::Plan*>(take(nplans * B * sizeof(dev::Plan), alignof(dev::Plan)));
  auto* pristine =
      replayable ? static_cast<dev::Plan*>(take(nplans * B * sizeof(dev::Plan), alignof(dev::Plan))) : nullptr;
  auto* results = static_cast<dev::LaneResult*>(take(B * sizeof(dev::LaneResult), alignof(dev::LaneResult)));
  auto* arrivals = B > 1 ? static_cast<dev::Arrival*>(take(B * sizeof(dev::Arrival), alignof(dev::Arrival))) : nullptr;
  auto* divides =
      B > 1 ? static_cast<dev::LaneDivide*>(take(nplans * sizeof(dev::LaneDivide), alignof(dev::LaneDivide)))
            : nullptr;
  if ((nplans > 0 && (plans == nullptr || (replayable && pristine == nullptr))) || results == nullptr ||
      (B > 1 && (arrivals == nullptr || (nplans > 0 && divides == nullptr))))
    return internalError("CUDA executor: image memory exhausted");
  for (size_t i = 0; i < nplans; ++i) {
    const dev::SplitPlan& sp = lowered_[l][i];
    for (uint32_t b = 0; b < B; ++b) {
      dev::Plan& at = plans[i * B + b];
      if (b < sp.count) {
        dev::Plan* image = dev::copyImage(sp.part(b), &PinnedChunk::allocate, &memory);
        if (image == nullptr) return internalError("CUDA executor: image memory exhausted");
        at = *image;
      } else {
        at = dev::emptyPart(sp.whole.plan);
      }
      if (replayable) pristine[i * B + b] = at;
    }
    if (divides != nullptr) {
      const dev::Plan& w = sp.whole.plan;
      divides[i] = sp.count > 1 && w.divideDst != nullptr ? dev::LaneDivide{w.divideDst, w.divideElems, w.red}
                                                            : dev::LaneDivide{};
    }
  }
  for (uint32_t b = 0; b < B; ++b) results[b] = dev::LaneResult{};
  for (uint32_t b = 0; b < B && arrivals != nullptr; ++b) arrivals[b] = dev::Arrival{};
  const Plan* first = nplans == 0 ? nullptr : lane.plans.front();
  *ll = dev::LaneLaunch{};
  ll->plans = plans;
  ll->pristine = pristine;
  ll->nplans = static_cast<uint32_t>(nplans);
  ll->blocks = B;
  ll->abortWord = first != nullptr && first->abort != nullptr ? first->abort->mirror() : nullptr;
  ll->peerFailedIdleNs = kPeerFailedIdleNs;
  ll->stallNs = stallNs;
  ll->results = results;
  ll->arrivals = arrivals;
  ll->divides = divides;
  return Status::ok();
}

// Copies the lowered plans into `memory` and launches one kernel per stream
// (lanes that share a stream share a launch, their blocks side by side). A
// replayable launch also gets the plans' pristine headers. Eager launches
// record the slot's events after their kernels; captured ones record nothing.
Status CudaExecutor::launch(std::vector<Lane>& lanes, PinnedChunk& memory, bool replayable, uint64_t stallNs,
                            Slot* slot, Captured* captured) {
  // The lanes of each (stream, device) (storage reused by every run: a warm enqueue allocates nothing).
  size_t ngroups = 0;
  for (size_t l = 0; l < lanes.size(); ++l) {
    cudaStream_t s = lanes[l].plans.empty() ? nullptr : lanes[l].plans.front()->stream;
    int dev = lanes[l].plans.empty() ? -1 : lanes[l].plans.front()->cudaDev;
    size_t g = 0;
    while (g < ngroups && (streamLanes_[g].stream != s || streamLanes_[g].device != dev)) ++g;
    if (g == ngroups) {
      if (ngroups == streamLanes_.size()) streamLanes_.emplace_back();
      streamLanes_[ngroups].stream = s;
      streamLanes_[ngroups].device = dev;
      streamLanes_[ngroups++].lanes.clear();
    }
    streamLanes_[g].lanes.push_back(l);
  }
  DeviceSwitch device;
  if (slot != nullptr) {
    slot->lanes = 0;
    slot->eventsUsed = 0;
    if (slot->results.size() < lanes.size()) slot->results.resize(lanes.size());
    if (slot->laneNames.size() < lanes.size()) slot->laneNames.resize(lanes.size());
  }
  for (size_t g = 0; g < ngroups; ++g) {
    const cudaStream_t stream = streamLanes_[g].stream;
    const std::vector<size_t>& members = streamLanes_[g].lanes;
    TH_CHECK(device.to(streamLanes_[g].device));
    auto* launches = static_cast<dev::LaneLaunch*>(
        PinnedChunk::allocate(&memory, members.size() * sizeof(dev::LaneLaunch), alignof(dev::LaneLaunch)));
    if (launches == nullptr) return internalError("CUDA executor: image memory exhausted");
    uint32_t nblocks = 0;
    for (size_t k = 0; k < members.size(); ++k) {
      const size_t l = members[k];
      dev::LaneLaunch& ll = launches[k];
      TH_CHECK(layOutLane(l, lanes[l], memory, replayable, stallNs, &ll));
      ll.firstBlock = nblocks;
      nblocks += ll.blocks;
      const Plan* first = lanes[l].plans.empty() ? nullptr : lanes[l].plans.front();
      if (slot != nullptr) {
        slot->results[slot->lanes] = Slot::LaneResults::of(first, ll.results, ll.blocks);
        std::vector<Plan::Name>& names = slot->laneNames[slot->lanes++];
        names.clear();
        for (const Plan* p : lanes[l].plans) names.push_back(p->name());
      }
      if (captured != nullptr && first != nullptr) {
        Captured::LaneEntry e;
        e.comm = first->abort;
        e.results = ll.results;
        e.blocks = ll.blocks;
        e.rank = first->rank;
        for (const Plan* p : lanes[l].plans) e.plans.push_back(p->describe());
        captured->lanes.push_back(std::move(e));
      }
    }
    int rc = dev::launchLanes(launches, static_cast<uint32_t>(members.size()), nblocks, kThreads, stream);
    TH_CHECK(cudaCheck(static_cast<cudaError_t>(rc), "launching the Theseus kernel"));
    if (slot == nullptr) continue;
    if (slot->eventsUsed == slot->events.size()) slot->events.emplace_back(nullptr, -1);
    auto& [event, eventDevice] = slot->events[slot->eventsUsed];
    if (event != nullptr && eventDevice != device.device()) {
      (void)cudaEventDestroy(event);  // completed: the slot was collected before reuse
      event = nullptr;
    }
    if (event == nullptr) {
      TH_CHECK(cudaCheck(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate"));
      eventDevice = device.device();
    }
    TH_CHECK(cudaCheck(cudaEventRecord(event, stream), "cudaEventRecord"));
    ++slot->eventsUsed;
  }
  return Status::ok();
}

// Hands a captured group's images to its graph: a user object the graph
// retains, whose destructor (retireCaptured) runs when the graph and its
// executables are gone.
Status CudaExecutor::adoptCapture(Captured* captured, const CaptureOf& capture) {
  cudaUserObject_t object;
  TH_CHECK(cudaCheck(cudaUserObjectCreate(&object, captured, retireCaptured, 1, cudaUserObjectNoDestructorSync),
                     "cudaUserObjectCreate"));
  TH_CHECK(cudaCheck(cudaGraphRetainUserObject(capture.graph, object, 1, cudaGraphUserObjectMove),
                     "cudaGraphRetainUserObject"));
  captured_.push_back(captured);
  return Status::ok();
}

Status CudaExecutor::run(std::vector<Lane>& lanes, const ExecOptions& options) {
  std::unique_lock<std::mutex> lock(mu_);
  RelaxedCaptureMode relaxed;
  collectFinished();
  checkReplays();
  TH_ASSIGN(CaptureOf capture, captureOf(lanes, options.captures));  // before prepareLanes reads any scalar
  // Registered device buffers local peers exported since the last group: mapped and acked now,
  // so their next messages to this rank may be read in place.
  for (Lane& lane : lanes)
    if (!lane.plans.empty() && lane.plans.front()->transports != nullptr)
      lane.plans.front()->transports->refreshDeviceImports();
  TH_CHECK(prepareLanes(lanes, device::kHostAccessibleKinds | device::maskOf(device::MemoryKind::kDevice), name(),
                        /*executorReadsScalars=*/true));
  size_t bytes = 0;
  TH_CHECK(lower(lanes, &bytes));
  const uint64_t stallNs =
      static_cast<uint64_t>(std::max<int64_t>(0, options.stallTimeoutMs != 0 ? options.stallTimeoutMs
                                                                             : configuredStallTimeoutMs())) *
      1000000;
  if (capture.capturing) {
    // Images of their own, kept as long as the graph (which owns them before the first kernel
    // is captured): every replay restarts them.
    auto captured = std::make_unique<Captured>();
    TH_CHECK(captured->memory.reserve(bytes));
    TH_CHECK(adoptCapture(captured.get(), capture));
    Captured* c = captured.release();
    TH_CHECK(launch(lanes, c->memory, /*replayable=*/true, stallNs, nullptr, c));
  } else {
    TH_ASSIGN(Slot * slot, freeSlot(lock));
    TH_CHECK(slot->memory.reserve(bytes));
    slot->memory.reset();
    Status launched = launch(lanes, slot->memory, /*replayable=*/false, stallNs, slot, nullptr);
    slot->busy = slot->eventsUsed > 0;  // kernels already queued keep their images
    TH_CHECK(launched);
  }
  // Telemetry sees the plans as queued or captured (their duration is the GPU's, not known here).
  const uint64_t now = nowNs();
  for (Lane& lane : lanes)
    if (lane.observer)
      for (Plan* p : lane.plans) {
        if (capture.capturing) lane.observer->planCaptured(*p);
        lane.observer->planDone(*p, 0, now);
      }
  return Status::ok();
}

}  // namespace

Executor* cudaDeviceExecutor() {
  // Never destroyed: at exit the CUDA runtime may already be unloading, and pinned memory and
  // events die with the process anyway.
  static CudaExecutor* executor = new CudaExecutor();
  return executor;
}

}  // namespace theseus::exec
