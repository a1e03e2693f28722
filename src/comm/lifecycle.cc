// Communicator lifecycle: unique ids, init (rank, scalable, all), finalize,
// destroy, abort and revoke. Split and shrink are in lifecycle_split.cc.
//
// Every creation writes *newcomm at once (NCCL does too: a non-blocking caller
// polls it, and another thread may ncclCommAbort a blocking init stuck waiting
// for a missing rank), then queues an init job in the current group. The job
// builds the bootstrap, then the transports and the collective engine, and
// marks the communicator ready (async error ncclSuccess) or failed (async
// error = the reason). A failed communicator stays a valid handle until the
// user destroys or aborts it.
#include <algorithm>
#include <atomic>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "bootstrap/bootstrap_settings.h"
#include "bootstrap/unique_id.h"
#include "comm/collective_engine.h"
#include "comm/group_internal.h"
#include "comm/lifecycle.h"

#include "comm/metrics_source.h"
#include "comm/lifecycle_internal.h"
#include "comm/root_cause.h"
#include "comm/shared_gpus.h"
#include "comm/timeouts.h"
#include "common/log.h"
#include "common/nccl_variables.h"
#include "device/cuda_driver.h"
#include "exec/device/device_executor.h"
#include "telemetry/flight_recorder.h"
#include "transport/transport_manager.h"

namespace theseus::comm {
namespace {

constexpr const char* kTheseusVersion = "0.1.0";
constexpr size_t kGraveyardSize = 4096;  // destroyed handles kept recognisable

std::mutex& registryMutex() {
  static auto* m = new std::mutex;
  return *m;
}
std::unordered_map<Communicator*, std::shared_ptr<LifecycleState>>& registry() {
  static auto* r = new std::unordered_map<Communicator*, std::shared_ptr<LifecycleState>>;
  return *r;
}
std::deque<Communicator*>& graveyard() {
  static auto* g = new std::deque<Communicator*>;
  return *g;
}

// Keeps a released handle recognisable as dead; frees the oldest beyond the bound.
void bury(Communicator* comm) {
  Communicator* evicted = nullptr;
  {
    std::lock_guard<std::mutex> lock(registryMutex());
    graveyard().push_back(comm);
    if (graveyard().size() > kGraveyardSize) {
      evicted = graveyard().front();
      graveyard().pop_front();
      registry().erase(evicted);
    }
  }
  delete evicted;
}

void printVersionOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    TH_LOG_(log::Level::kVersion, log::kInit, "NCCL version %d.%d.%d%s+theseus (Theseus %s implementing NCCL %d.%d.%d)",
            NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, NCCL_SUFFIX, kTheseusVersion, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
  });
}

Status failInit(Communicator* comm, const Status& failure) {
  // A peer that died during init makes the others fail in many ways (the leader gave up and
  // left, a link reset): name the rank that failed first.
  const Status why = comm->bootstrap() != nullptr && !comm->abortFlag().isSet()
                         ? withRootCause(*comm->bootstrap(), failure)
                         : failure;
  comm->releaseResources();
  comm->setLifecycle(Lifecycle::kFailed);
  comm->setAsyncError(why.code() == ncclSuccess ? ncclInternalError : why.code(), why.message());
  return visibleTo(why, comm->config());
}

Status runInit(const std::shared_ptr<LifecycleState>& st, const std::vector<ncclUniqueId>& ids, int rank, int nranks,
               int cudaDev) {
  JobScope job(st);
  TH_CHECK(job.status());
  return initFromUniqueIds(st, ids.data(), static_cast<int>(ids.size()), rank, nranks, cudaDev);
}

Status checkInitArgs(ncclComm_t* newcomm, int nranks, const ncclUniqueId* ids, int nIds, int rank) {
  if (newcomm == nullptr) return invalidArgument("newcomm is NULL");
  __atomic_store_n(newcomm, nullptr, __ATOMIC_RELEASE);  // another thread may be watching it (see above)
  if (ids == nullptr) return invalidArgument("unique id is NULL");
  if (nranks < 1) return invalidArgument("nranks %d is invalid (must be at least 1)", nranks);
  if (rank < 0 || rank >= nranks) return invalidArgument("rank %d is out of range [0, %d)", rank, nranks);
  if (nIds < 1 || nIds > nranks) return invalidArgument("nId %d is out of range [1, %d]", nIds, nranks);
  for (int i = 0; i < nIds; ++i) {
    auto id = bootstrap::decodeRootId(ids[i]);
    if (!id.isOk()) return id.status().withContext(nIds > 1 ? "unique id " + std::to_string(i) : "commId");
    if (nIds > 1 && id.value().fromEnv())
      return invalidUsage("unique id %d comes from NCCL_COMM_ID, which allows a single root (nId is %d)", i, nIds);
  }
  return Status::ok();
}

}  // namespace

// ---------------------------------------------------------------- registry and jobs

std::shared_ptr<LifecycleState> newCommunicator(const CommConfig& config) {
  auto* comm = new ncclComm();
  comm->setConfig(config);
  auto st = std::make_shared<LifecycleState>();
  st->comm = comm;
  comm->setLifecycleState(st.get());
  std::lock_guard<std::mutex> lock(registryMutex());
  registry()[comm] = st;
  return st;
}

std::shared_ptr<LifecycleState> stateOf(Communicator* comm) {
  std::lock_guard<std::mutex> lock(registryMutex());
  auto it = registry().find(comm);
  return it == registry().end() ? nullptr : it->second;
}

JobScope::JobScope(const std::shared_ptr<LifecycleState>& state) : state_(state) {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->dead || state_->closing.load()) {
    status_ = invalidUsage("the communicator was destroyed or aborted before this operation ran");
    return;
  }
  ++state_->activeJobs;
}

JobScope::~JobScope() {
  if (!status_.isOk()) return;
  std::lock_guard<std::mutex> lock(state_->mu);
  --state_->activeJobs;
  state_->cv.notify_all();
}

Status waitForOpsIdle(LifecycleState& state, int64_t timeoutMs, const char* why) {
  Deadline deadline = Deadline::afterMs(timeoutMs);
  while (state.opsInFlight.load() > 0) {
    if (deadline.expired())
      return internalError("%s: operations on communicator %p still running after %lld ms", why,
                           static_cast<void*>(state.comm), static_cast<long long>(timeoutMs));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return Status::ok();
}

Status reclaim(const std::shared_ptr<LifecycleState>& st, bool abort) {
  Communicator* comm = st->comm;
  {
    std::lock_guard<std::mutex> lock(st->mu);
    if (st->dead) return invalidArgument("communicator %p was already destroyed", static_cast<void*>(comm));
    if (st->closing.load())  // another destroy/abort is releasing it
      return abort ? Status::ok()
                   : invalidUsage("communicator %p is being destroyed or aborted by another call", static_cast<void*>(comm));
    st->closing.store(true);
  }
  if (abort) {
    comm->abortFlag().set();
    st->bootstrapAbort.set();
  }
  // Jobs and operations honour the abort flags and the bootstrap timeout, so this wait is bounded.
  const int64_t limitMs = bootstrap::bootstrapTimeoutMs() + 10000;
  {
    std::unique_lock<std::mutex> lock(st->mu);
    if (!st->cv.wait_for(lock, std::chrono::milliseconds(limitMs), [&] { return st->activeJobs == 0; }))
      return internalError("communicator %p is still busy after %lld ms; it was not released",
                           static_cast<void*>(comm), static_cast<long long>(limitMs));
  }
  TH_CHECK(waitForOpsIdle(*st, limitMs, abort ? "ncclCommAbort" : "ncclCommDestroy"));
  const int rank = comm->rank();
  if (abort && comm->bootstrap() != nullptr) {
    // The engine's threads (epoch service) use the bootstrap: stop them before its sockets go
    // (and a metrics scrape that reads the engine first).
    removeMetricsSource(comm);
    if (comm->engine() != nullptr) {
      comm->engine()->flightRecorder().dumpToFile("ncclCommAbort");  // THESEUS_FLIGHT_RECORDER_DUMP
      comm->engine()->shutdown();
    }
    comm->bootstrap()->abandon();  // peers see a failure, not a goodbye
  }
  comm->releaseResources();
  comm->invalidateHandle();
  {
    std::lock_guard<std::mutex> lock(st->mu);
    st->dead = true;
  }
  TH_INFO(log::kInit, "comm %p rank %d - %s COMPLETE", static_cast<void*>(comm), rank, abort ? "Abort" : "Destroy");
  bury(comm);
  return Status::ok();
}

// An NCCL profiler plugin (NCCL_PROFILER_PLUGIN): one session per communicator.
// A plugin that is named but unusable is a WARN once, and the communicator runs
// without it (what NCCL does).
static void openProfiler(Communicator* comm) {
  bootstrap::Bootstrap& bs = *comm->bootstrap();
  telemetry::ProfilerSession::Identity who{bs.commHash(), comm->config().commName, bs.nodeCount(), bs.nranks(),
                                           bs.rank()};
  auto session = telemetry::ProfilerSession::open(who);
  if (session.isOk()) {
    comm->setProfiler(session.take());
    return;
  }
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true))
    TH_WARN("%s; running without the NCCL profiler plugin", session.status().message().c_str());
}

Status initFromUniqueIds(const std::shared_ptr<LifecycleState>& st, const ncclUniqueId* ids, int nIds, int rank,
                         int nranks, int cudaDev) {
  log::setThreadDevice(cudaDev);
  bootstrap::InitOptions options;
  options.cudaDev = cudaDev;
  reportCuda(&options, cudaDev);
  options.abort = &st->bootstrapAbort;
  options.timeoutMs = boundedWaitMs(st->comm->timeoutMs(), bootstrap::bootstrapTimeoutMs());
  return finishInit(st->comm, bootstrap::createFromUniqueIds(ids, nIds, rank, nranks, options), cudaDev);
}

void reportCuda(bootstrap::InitOptions* options, int cudaDev) {
  options->deviceSetting = static_cast<uint8_t>(exec::deviceExecutorSetting());
  options->usesCuda = device::CudaDriver::visibleDevices() > 0;
  if (options->usesCuda) options->gpuHash = gpuHashOf(device::CudaDriver::get()->pciBusId(cudaDev));
}

Status finishInit(Communicator* comm, Result<std::unique_ptr<bootstrap::Bootstrap>> boot, int cudaDev) {
  if (!boot.isOk()) return failInit(comm, boot.status());
  std::unique_ptr<bootstrap::Bootstrap> b = boot.take();
  comm->setIdentity(b->rank(), b->nranks(), cudaDev, b->commHash());
  comm->setBootstrap(std::move(b));
  bootstrap::Bootstrap& bs = *comm->bootstrap();

  // Every rank must read THESEUS_DEVICE_EXECUTOR alike: the setting decides whether device FIFOs are set up
  // (exchanges of their own) and how operations are lowered, so a difference is an error here, on every
  // rank at once, before anything could go out of step.
  std::vector<bool> usesCuda;
  const bootstrap::PeerInfo& me = bs.peers()[bs.rank()];
  for (const bootstrap::PeerInfo& p : bs.peers()) {
    usesCuda.push_back(p.usesCuda);
    if (p.deviceSetting == me.deviceSetting) continue;
    auto name = [](uint8_t s) { return exec::deviceExecutorSettingName(static_cast<exec::DeviceExecutorSetting>(s)); };
    return failInit(comm, invalidUsage("THESEUS_DEVICE_EXECUTOR differs between ranks (rank %d: %s, rank %d: %s); it "
                                       "must be equal on all ranks",
                                       bs.rank(), name(me.deviceSetting), p.rank, name(p.deviceSetting)));
  }
  comm->setDeviceExecutor(exec::chooseDeviceExecutor(exec::deviceExecutorSetting(),
                                                     exec::cudaDeviceExecutor() != nullptr, usesCuda));
  const exec::DeviceExecutorMode deviceMode = comm->deviceExecutor();
  comm->setRanksOnGpu(ranksOnGpu(bs));

  transport::TransportOptions topts;
  topts.connectTimeoutMs = bootstrap::connectTimeoutMs();
  topts.maxChannels = maxChannels();
  topts.abort = &comm->abortFlag();
  topts.deviceFifos = deviceMode != exec::DeviceExecutorMode::kOff;
  topts.deviceFifoSlotsOnGpu = deviceMode == exec::DeviceExecutorMode::kCuda;
  topts.cudaDev = topts.deviceFifoSlotsOnGpu ? cudaDev : -1;
  topts.net = comm->config().netName;
  // Grouped initialisation runs this on a thread of its own: the device FIFOs
  // allocate on the communicator's device, so make it current here, as NCCL's
  // init jobs do.
  if (topts.deviceFifoSlotsOnGpu)
    if (const device::CudaDriver* cuda = device::CudaDriver::get()) {
      Status s = cuda->useDevice(cudaDev);
      if (!s.isOk()) return failInit(comm, s.withContext("making CUDA device " + std::to_string(cudaDev) + " current"));
    }
  auto transports = transport::createTransportManager(bs, topts);
  if (!transports.isOk()) return failInit(comm, transports.status().withContext("creating the transports"));
  comm->setTransports(transports.take());
  auto engine = createCollectiveEngine(*comm);
  if (!engine.isOk()) return failInit(comm, engine.status().withContext("creating the collective engine"));
  comm->setEngine(engine.take());
  openProfiler(comm);
  addMetricsSource(comm, bs.localRank());

  comm->setLifecycle(Lifecycle::kReady);
  comm->setAsyncError(ncclSuccess);
  printVersionOnce();
  reportEnvironment();  // once: NCCL variables without effect, misspelt names
  const std::string& name = comm->config().commName;
  TH_INFO(log::kInit, "comm %p rank %d nRanks %d nNodes %d localRanks %zu localRank %d cudaDev %d commHash %#llx%s%s - Init COMPLETE",
          static_cast<void*>(comm), bs.rank(), bs.nranks(), bs.nodeCount(), bs.localRanks().size(), bs.localRank(),
          cudaDev, static_cast<unsigned long long>(bs.commHash()), name.empty() ? "" : " commName ", name.c_str());
  if (deviceMode == exec::DeviceExecutorMode::kCuda) {
    TH_INFO(log::kInit, "comm %p rank %d device buffers: the CUDA executor (asynchronous on the operations' streams)",
            static_cast<void*>(comm), bs.rank());
    if (const device::CudaDriver* cuda = device::CudaDriver::get()) noteSharedGpus(bs, cuda->pciBusId(cudaDev));
  } else
    TH_INFO(log::kInit, "comm %p rank %d device buffers: the %s executor (%s)", static_cast<void*>(comm), bs.rank(),
            exec::deviceExecutorModeName(deviceMode), comm->deviceExecutorWhyNot().c_str());
  return Status::ok();
}

// ---------------------------------------------------------------- API

Status getUniqueId(ncclUniqueId* id) { return bootstrap::createUniqueId(id); }

Status commInitRank(ncclComm_t* newcomm, int nranks, const ncclUniqueId* ids, int nIds, int rank,
                    const ncclConfig_t* config) {
  TH_CHECK(checkInitArgs(newcomm, nranks, ids, nIds, rank));
  CommConfig cfg;
  TH_CHECK(parseConfig(config, nullptr, &cfg));
  int dev = device::CudaDriver::callerDevice();
  if (dev < 0) dev = 0;
  auto st = newCommunicator(cfg);
  // Published before a blocking init waits: another thread may pick the handle up
  // there (to abort the init), so the store releases the communicator's state.
  __atomic_store_n(newcomm, static_cast<ncclComm*>(st->comm), __ATOMIC_RELEASE);
  std::vector<ncclUniqueId> idCopy(ids, ids + nIds);
  return enqueueJob(st->comm, cfg.blocking,
                    [st, idCopy, rank, nranks, dev] { return runInit(st, idCopy, rank, nranks, dev); });
}

Status commInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (comms == nullptr) return invalidArgument("comms is NULL");
  if (ndev < 1) return invalidArgument("ndev %d is invalid (must be at least 1)", ndev);
  if (devlist != nullptr) {
    const int count = device::CudaDriver::visibleDevices();
    for (int i = 0; i < ndev; ++i) {
      if (devlist[i] < 0 || (count >= 0 && devlist[i] >= count))
        return invalidArgument("devlist[%d] = %d is not a valid CUDA device", i, devlist[i]);
      for (int j = 0; j < i; ++j)
        if (devlist[j] == devlist[i])
          return invalidUsage("devlist lists device %d twice (entries %d and %d)", devlist[i], j, i);
    }
  }
  std::fill(comms, comms + ndev, nullptr);
  ncclUniqueId id;
  TH_CHECK(getUniqueId(&id));
  CommConfig cfg;
  TH_CHECK(parseConfig(nullptr, nullptr, &cfg));
  const bool implicit = groupDepth() == 0;
  if (implicit) TH_CHECK(groupStart());
  Status first;
  for (int i = 0; i < ndev; ++i) {
    const int dev = devlist ? devlist[i] : i;
    auto st = newCommunicator(cfg);
    comms[i] = static_cast<ncclComm*>(st->comm);
    std::vector<ncclUniqueId> ids{id};
    Status s = enqueueJob(st->comm, cfg.blocking, [st, ids, i, ndev, dev] { return runInit(st, ids, i, ndev, dev); });
    if (first.isOk() && !s.isOk()) first = s;
  }
  if (implicit) {
    Status s = groupEnd();
    if (first.isOk()) first = s;
  }
  return first;
}

Status commFinalize(Communicator* comm) {
  auto st = stateOf(comm);
  if (st == nullptr) return invalidArgument("communicator %p is not known", static_cast<void*>(comm));
  {
    std::lock_guard<std::mutex> lock(st->mu);
    if (st->finalizeRequested)
      return invalidArgument("ncclCommFinalize was already called on communicator %p", static_cast<void*>(comm));
    if (comm->lifecycle() == Lifecycle::kInitializing)
      return invalidUsage("communicator %p is still initialising; wait for it before ncclCommFinalize",
                          static_cast<void*>(comm));
    st->finalizeRequested = true;
  }
  const bool blocking = comm->config().blocking;
  if (!blocking) comm->setAsyncError(ncclInProgress);
  return enqueueJob(comm, blocking, [st] {
    JobScope job(st);
    TH_CHECK(job.status());
    Communicator* c = st->comm;
    const bool failed = c->lifecycle() == Lifecycle::kFailed;
    if (!failed) c->setLifecycle(Lifecycle::kFinalizing);
    // Operations run to completion in the group that issued them; flushing means waiting for those still running.
    Status s = waitForOpsIdle(*st, bootstrap::bootstrapTimeoutMs(), "ncclCommFinalize");
    if (!failed) c->setLifecycle(Lifecycle::kFinalized);
    c->setAsyncError(s.isOk() ? ncclSuccess : s.code(), s.message());
    TH_INFO(log::kInit, "comm %p rank %d - Finalize COMPLETE", static_cast<void*>(c), c->rank());
    return s;
  });
}

Status commDestroy(Communicator* comm) {
  auto st = stateOf(comm);
  if (st == nullptr) return invalidArgument("communicator %p is not known", static_cast<void*>(comm));
  return enqueueRelease(comm, [st] { return reclaim(st, /*abort=*/false); });
}

Status commAbort(Communicator* comm) {
  auto st = stateOf(comm);
  if (st == nullptr) return invalidArgument("communicator %p is not known", static_cast<void*>(comm));
  // Stop whatever runs now, even when the release itself is deferred to the group's end.
  comm->abortFlag().set();
  st->bootstrapAbort.set();
  return enqueueRelease(comm, [st] { return reclaim(st, /*abort=*/true); });
}

Status commRevoke(Communicator* comm, int flags) {
  if (flags != NCCL_REVOKE_DEFAULT)
    return invalidArgument("revokeFlags %d is invalid (must be NCCL_REVOKE_DEFAULT)", flags);
  auto st = stateOf(comm);
  if (st == nullptr) return invalidArgument("communicator %p is not known", static_cast<void*>(comm));
  switch (comm->lifecycle()) {
    case Lifecycle::kInitializing:
      return invalidUsage("communicator %p is still initialising", static_cast<void*>(comm));
    case Lifecycle::kFinalizing:
    case Lifecycle::kFinalized:
      return invalidUsage("communicator %p was finalized", static_cast<void*>(comm));
    default:
      break;
  }
  {
    std::lock_guard<std::mutex> lock(st->mu);
    st->revoked = true;
  }
  // Pending operations stop; new ones are refused (ncclInvalidUsage). The bootstrap stays
  // usable, so the communicator can still be split, shrunk or destroyed.
  comm->abortFlag().set();
  comm->setLifecycle(Lifecycle::kFailed);
  TH_CHECK(waitForOpsIdle(*st, bootstrap::bootstrapTimeoutMs(), "ncclCommRevoke"));
  TH_INFO(log::kInit, "comm %p rank %d - Revoke COMPLETE", static_cast<void*>(comm), comm->rank());
  return Status::ok();
}

}  // namespace theseus::comm
