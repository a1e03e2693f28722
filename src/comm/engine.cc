#include "comm/engine.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>

#include "comm/communicator.h"
#include "comm/root_cause.h"
#include "common/deadline.h"
#include "common/knobs.h"
#include "common/log.h"
#include "device/cuda_driver.h"
#include "exec/reduce.h"
#include "telemetry/telemetry.h"
#include "transport/emulation.h"
#include "transport/transport_config.h"

namespace theseus::comm {
namespace {

const IntKnob kMaxChannels("THESEUS_MAX_CHANNELS", 8,
                            "Connections per peer and direction a communicator may use (schedules with more "
                            "channels than this are not chosen)");

const IntKnob kDeviceChannels("THESEUS_DEVICE_CHANNELS", 8,
                               "Channels of large operations the device executor runs: collectives whose decision "
                               "leaves a built-in schedule at one, and sends and receives, cut into as many parts "
                               "(each channel runs on a thread block of its own; capped by THESEUS_MAX_CHANNELS and "
                               "THESEUS_DEVICE_BLOCKS). Must be equal on all ranks");

const IntKnob kDeviceChannelBytes("THESEUS_DEVICE_CHANNEL_BYTES", 4 << 20,
                                  "Operations the device executor runs get THESEUS_DEVICE_CHANNELS channels from this "
                                  "size on (bytes of the larger buffer). Must be equal on all ranks");

const IntKnob kSliceBytes("THESEUS_SLICE_BYTES", 128 << 10,
                          "Bytes per pipelined slice of a step (rounded down to a multiple of 64; must not exceed "
                          "the transports' slot size). Must be equal on all ranks");

// Host index of every rank, in order of first appearance (used by hierarchical schedules).
std::vector<int> hostIndices(const Communicator& comm) {
  std::vector<int> out;
  if (comm.bootstrap() == nullptr) return out;
  std::map<uint64_t, int> hostIndex;
  for (const auto& p : comm.bootstrap()->peers()) {
    auto it = hostIndex.emplace(p.hostHash, static_cast<int>(hostIndex.size())).first;
    out.push_back(it->second);
  }
  return out;
}

size_t configuredSliceBytes() {
  const int64_t asked = kSliceBytes.get();
  if (asked < 64) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
      TH_WARN("THESEUS_SLICE_BYTES=%lld is below the smallest slice (64 bytes); using 64, which makes large "
              "operations much slower", static_cast<long long>(asked));
  }
  size_t slice = static_cast<size_t>(std::max<int64_t>(asked, 64));
  return slice / 64 * 64;
}

TemplateMemo::Settings memoSettings(const Communicator& comm, const std::vector<int>& hostOf, size_t sliceBytes) {
  TemplateMemo::Settings s;
  s.rank = comm.rank();
  s.nranks = comm.nranks();
  s.hostOf = hostOf;
  s.sliceBytes = sliceBytes;
  // Slot sizes are knobs equal on all ranks, so every rank clamps decisions' slices alike.
  auto tc = transport::readTransportConfig();
  s.maxSliceBytes = tc.isOk() ? std::min(tc.value().shmSlotBytes, tc.value().socketSlotBytes) / 64 * 64 : sliceBytes;
  s.maxChannels = maxChannels();
  s.deviceChannels = static_cast<int>(std::clamp<int64_t>(kDeviceChannels.get(), 1, schedule::ScheduleParams::kMaxChannels));
  s.deviceChannelBytes = static_cast<size_t>(std::max<int64_t>(kDeviceChannelBytes.get(), 0));
  return s;
}

}  // namespace

Engine::Engine(Communicator& comm)
    : comm_(comm),
      hostOf_(hostIndices(comm)),
      sliceBytes_(configuredSliceBytes()),
      flight_(telemetry::FlightRecorder::Identity{comm.rank(), comm.nranks(), comm.commHash()}),
      trace_(telemetry::TraceWriter::create({comm.rank(), comm.nranks(), comm.commHash()})),
      failureReports_(comm),
      memo_(memoSettings(comm, hostOf_, sliceBytes_)) {
  if (comm.transports() != nullptr) emulation_ = comm.transports()->emulation();
  flight_.attach({hostOf_, &comm.attributes(), comm.transports(), comm.deviceExecutor()});
}

Engine::~Engine() { shutdown(); }

void Engine::shutdown() {
  if (comm_.bootstrap() != nullptr) {
    comm_.bootstrap()->setPeerFailureCallback(nullptr, bootstrap::Bootstrap::FailureListener::kCommunicator);
    comm_.bootstrap()->setPeerDepartureCallback(nullptr);
  }
  failureReports_.stop();
  if (epochs_) epochs_->stop();  // before the transports go: the epoch thread uses them
  if (trace_) trace_->finish();
  memo_.clear();
  scratch_.release();
  deviceScratch_.release();
}

exec::Plan* Engine::nextPlan() {
  if (plansUsed_ == plans_.size()) plans_.push_back(std::make_unique<exec::Plan>());
  exec::Plan* p = plans_[plansUsed_++].get();
  p->clear();
  p->rank = comm_.rank();
  p->cudaDev = comm_.cudaDev();
  p->ranksOnGpu = comm_.ranksOnGpu();
  p->transports = comm_.transports();
  p->abort = &comm_.abortFlag();
  p->sliceBytes = sliceBytes_;
  p->reduction = exec::Reduction{};
  p->elemBytes = 1;
  return p;
}

// Collectives one plan each; a run of consecutive point-to-point operations one plan.
Status Engine::lower(const std::vector<OpDesc>& ops, exec::Lane* lane) {
  if (suspended_.load(std::memory_order_acquire))
    return invalidUsage("communicator %p is suspended (ncclCommSuspend); call ncclCommResume before issuing work",
                        static_cast<void*>(&comm_));
  plansUsed_ = 0;
  lane->plans.clear();
  lane->memory = 0;
  lane->deferredScalars = false;
  memo_.dropStale();  // the previous group finished: templates of replaced tables can go
  scratch_.endGroup();  // and scratch regions replaced during it
  bool stepsSampled = false;
  for (size_t i = 0; i < ops.size();) {
    exec::Plan* p = nextPlan();
    if (ops[i].kind == OpDesc::Kind::kCollective) {
      TH_CHECK(lowerCollective(ops[i], *p));
      p->traceId = flight_.queued(p->seq, p->opName, p->scheduleName, ops[i].count, exec::typeName(ops[i].type),
                                  p->bytes, ops[i].root, p->memory);
      if (trace_ && !stepsSampled) {  // THESEUS_TRACE_STEPS: at most one plan of a group (one buffer)
        p->stepTimes = trace_->sampleSteps(p->steps.size());
        stepsSampled = p->stepTimes != nullptr;
      }
      ++i;
    } else {
      size_t j = i;
      uint64_t count = 0;
      while (j < ops.size() && ops[j].kind != OpDesc::Kind::kCollective) count += ops[j++].count;
      TH_CHECK(lowerP2p(&ops[i], j - i, *p));
      p->traceId = flight_.queued(p->seq, p->opName, p->scheduleName, count, exec::typeName(ops[i].type), p->bytes,
                                  ops[i].peer, p->memory);
      i = j;
    }
    lane->plans.push_back(p);
    lane->memory |= p->memory;
    lane->deferredScalars |= p->reduction.scalarSource != nullptr;
  }
  lane->health = [this](const exec::LaneWait& wait) { return healthFor(&wait); };
  lane->observer = &observer_;
  return Status::ok();
}

void Engine::Observer::planStarted(const exec::Plan& p, uint64_t startNs) { e->flight_.started(p.traceId, startNs); }

void Engine::Observer::planDone(const exec::Plan& p, uint64_t ns, uint64_t endNs) {
  if (telemetry::Recorder* t = e->epochs_ ? e->epochs_->telemetry() : nullptr) t->onPlanDone(p, ns, endNs);
  e->flight_.done(p.traceId, endNs);
  if (e->trace_) {
    e->trace_->operation(p.opName, p.scheduleName, p.seq, p.bytes, endNs - ns, endNs);
    if (p.stepTimes != nullptr) e->trace_->steps(p, endNs - ns);
  }
}

void Engine::Observer::planWaiting(const exec::Plan& p, const std::string& waits) { e->flight_.waiting(p.traceId, waits); }

// A collective captured into a CUDA graph keeps its schedule for every replay: the decision log
// says which, under which table (p2p plans have no schedule choice; every rank logs the same line).
void Engine::Observer::planCaptured(const exec::Plan& p) {
  if (p.tag == exec::kP2pTag || !e->epochs_) return;
  e->epochs_->decisionLog().record(
      p.seq, epoch::DecisionLog::formatCaptured(e->tableVersion_, p.opName, p.scheduleName, p.bytes));
}

Status Engine::registerBuffer(void* buff, size_t size, void** handle) {
  TH_CHECK(registrations_.registerBuffer(buff, size, handle));
  const device::CudaDriver* cuda = device::CudaDriver::get();
  const bool host = buff != nullptr && size > 0 && (cuda == nullptr || !cuda->isDevicePointer(buff));
  if (host && comm_.transports() != nullptr)
    comm_.transports()->registerUserBuffer(reinterpret_cast<uint64_t>(*handle), buff, size);
  if (!host) exportDeviceBuffer(reinterpret_cast<uint64_t>(*handle), buff, size);
  return Status::ok();
}

Status Engine::deregisterBuffer(void* handle) {
  // The transports first: once this returns the user may free the memory.
  if (comm_.transports() != nullptr) {
    comm_.transports()->deregisterUserBuffer(reinterpret_cast<uint64_t>(handle));
    comm_.transports()->deregisterDeviceBuffer(reinterpret_cast<uint64_t>(handle));
  }
  return registrations_.deregisterBuffer(handle);
}

// Device buffers that local peers' device executors may read in place
// (ncclCommRegister and window registrations alike); a buffer that cannot be
// shared keeps going through FIFO slots, with an INFO line saying why.
void Engine::exportDeviceBuffer(uint64_t id, void* buff, size_t size) {
  const device::CudaDriver* cuda = device::CudaDriver::get();
  if (buff == nullptr || size == 0 || cuda == nullptr || !cuda->isDevicePointer(buff) || comm_.transports() == nullptr)
    return;
  Status s = comm_.transports()->registerDeviceBuffer(id, buff, size);
  if (!s.isOk())
    TH_INFO(log::kReg, "rank %d: registered device buffer %p (%zu bytes) is not read in place by local peers: %s",
            comm_.rank(), buff, size, s.message().c_str());
}

Status Engine::registerWindow(void* buff, size_t size, ncclWindow_t* win, int flags) {
  TH_CHECK(registrations_.registerWindow(&comm_, comm_.rank(), comm_.nranks(), buff, size, win, flags));
  exportDeviceBuffer(reinterpret_cast<uint64_t>(*win), buff, size);
  return Status::ok();
}

Status Engine::deregisterWindow(ncclWindow_t win) {
  if (comm_.transports() != nullptr) comm_.transports()->deregisterDeviceBuffer(reinterpret_cast<uint64_t>(win));
  return registrations_.deregisterWindow(win);
}

Result<void*> Engine::windowUserPtr(ncclWindow_t win) const {
  const Window* w;
  TH_ASSIGN(w, registrations_.window(win));
  return w->userPtr;
}

CollectiveEngine::Memory Engine::memory() const {
  Memory m;
  m.releasable = scratch_.bytes();
  m.persistent = comm_.transports() != nullptr ? comm_.transports()->memoryBytes() : 0;
  m.suspended = suspended_.load(std::memory_order_acquire);
  return m;
}

// Suspending frees the executor scratch (the only memory lowering grows on
// demand); resuming allocates the same amount again, so the first collective
// after a resume costs what it did before the suspend.
Status Engine::suspend(bool releaseMemory) {
  if (suspended_.load()) return invalidUsage("communicator %p is already suspended", static_cast<void*>(&comm_));
  scratchBeforeSuspend_ = releaseMemory ? scratch_.bytes() : 0;
  if (releaseMemory) scratch_.release();
  suspended_.store(true, std::memory_order_release);
  return Status::ok();
}

Status Engine::resume() {
  if (!suspended_.load()) return invalidUsage("communicator %p is not suspended", static_cast<void*>(&comm_));
  if (scratchBeforeSuspend_ > 0) {
    auto again = scratch_.get(scratchBeforeSuspend_);
    if (!again.isOk()) return again.status().withContext("ncclCommResume: allocating the executor scratch again");
  }
  scratchBeforeSuspend_ = 0;
  suspended_.store(false, std::memory_order_release);
  return Status::ok();
}

std::string Engine::whoIs(int r) const { return comm::whoIs(*comm_.bootstrap(), r); }

Status Engine::health() const { return healthFor(nullptr); }

Status Engine::healthFor(const exec::LaneWait* wait) const {
  if (comm_.abortFlag().isSet()) return remoteError("the communicator was aborted");
  // A peer the operation no longer needs fails it only once it made no progress for a while
  // (exec::Lane::health): its data may all be here.
  auto fatal = [wait](int peer) {
    return wait == nullptr || wait->peers == nullptr || wait->longIdle ||
           std::find(wait->peers->begin(), wait->peers->end(), peer) != wait->peers->end();
  };
  ncclResult_t e = comm_.asyncError();
  if (e != ncclSuccess && e != ncclInProgress) {
    const int dead = comm_.asyncErrorPeer();
    if (dead < 0 || fatal(dead)) return Status(e, comm_.asyncErrorMessage());
  }
  if (comm_.transports() != nullptr) {  // a send that failed after its operation moved on
    if (Status s = comm_.transports()->asyncFailure(); !s.isOk()) return s;
  }
  if (comm_.bootstrap() != nullptr) {
    std::vector<int> failed = comm_.bootstrap()->failedRanks();
    int named = -1;
    for (int r : failed)
      if (named < 0 && fatal(r)) named = r;
    if (named >= 0) {
      return remoteError("rank %d (%s) exited or lost its connection%s", named, whoIs(named).c_str(),
                         failed.size() > 1 ? " (and others)" : "");
    }
  }
  return Status::ok();
}

Status Engine::withRootCause(const Status& s) const {
  bootstrap::Bootstrap* boot = comm_.bootstrap();
  if (boot == nullptr || comm_.abortFlag().isSet() || comm_.nranks() < 2) return s;
  return comm::withRootCause(*boot, s);
}

Status Engine::noteFailure(const Status& s) {
  if (s.isOk()) return s;
  Status why = withRootCause(s);
  comm_.setAsyncError(why.code(), why.message());
  failureReports_.report(why);
  flight_.failedAll(why.message());
  flight_.dumpToFile(why.message());  // THESEUS_FLIGHT_RECORDER_DUMP
  if (trace_) {
    trace_->error(nowNs(), why.message());
    trace_->finish();  // the communicator cannot go on: write the trace now
  }
  return why;
}

Status Engine::beforeRun() {
  if (emulation_ == nullptr) return Status::ok();
  uint64_t ns = emulation_->straggleNs();
  if (ns == 0) return Status::ok();
  // A straggling rank (THESEUS_EMULATE straggle:...) starts late; an abort still ends the wait.
  uint64_t until = nowNs() + ns;
  for (uint64_t now = nowNs(); now < until; now = nowNs()) {
    if (comm_.abortFlag().isSet()) return remoteError("the communicator was aborted");
    std::this_thread::sleep_for(std::chrono::nanoseconds(std::min<uint64_t>(until - now, 1000000)));
  }
  return Status::ok();
}

int maxChannels() { return static_cast<int>(std::clamp<int64_t>(kMaxChannels.get(), 1, 64)); }

Result<std::unique_ptr<CollectiveEngine>> createCollectiveEngine(Communicator& comm) {
  auto engine = std::make_unique<Engine>(comm);
  TH_CHECK(engine->startEpochs());
  return std::unique_ptr<CollectiveEngine>(std::move(engine));
}

}  // namespace theseus::comm
