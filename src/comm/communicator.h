// Communicator: what an ncclComm_t points to. It ties together the bootstrap
// (identity, control channel), the transports (data connections) and the
// collective engine (sequence numbers, schedules, executor state), and holds
// the asynchronous state that other threads poll.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "attrs/attribute_store.h"
#include "bootstrap/bootstrap.h"
#include "comm/config.h"
#include "common/deadline.h"
#include "common/status.h"
#include "exec/device/device_executor.h"
#include "nccl.h"
#include "telemetry/nccl_profiler.h"
#include "transport/transport_manager.h"

namespace theseus::comm {

class CollectiveEngine;  // src/comm/collective_engine.h

enum class Lifecycle : int { kInitializing, kReady, kFinalizing, kFinalized, kFailed };

class Communicator {
 public:
  static constexpr uint64_t kLiveMagic = 0x5448455345555321ull;  // "THESEUS!"
  static constexpr uint64_t kDeadMagic = 0xdeadc011deadc011ull;

  Communicator();
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  bool handleIsValid() const { return magic_ == kLiveMagic; }

  // Identity (valid once initialised).
  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  int cudaDev() const { return cudaDev_; }
  uint64_t commHash() const { return commHash_; }
  const CommConfig& config() const { return config_; }
  // What runs its device buffers (exec/device/device_executor.h), decided at creation alike on every
  // rank, and why that is not the CUDA executor (empty when it is).
  exec::DeviceExecutorMode deviceExecutor() const { return deviceExecutor_; }
  const std::string& deviceExecutorWhyNot() const { return deviceExecutorWhyNot_; }
  // Ranks of this communicator on this rank's GPU, this one included (bootstrap PeerInfo::gpuHash; 1 without one).
  int ranksOnGpu() const { return ranksOnGpu_; }

  bootstrap::Bootstrap* bootstrap() const { return bootstrap_.get(); }
  transport::TransportManager* transports() const { return transports_.get(); }
  CollectiveEngine* engine() const { return engine_.get(); }
  // This rank's runtime attributes (src/attrs): probes, THESEUS_ATTRS_FILE and
  // theseusSetAttribute write them; the epoch module ships snapshots to the leader.
  attrs::AttributeStore& attributes() { return attributes_; }

  // ncclCommGetAsyncError: an atomic load, callable from any thread at any time.
  ncclResult_t asyncError() const { return asyncError_.load(std::memory_order_acquire); }
  // Records the first real error (kept, with its message, until destroy) or moves
  // ncclInProgress -> ncclSuccess when initialisation completes.
  // `deadPeer`: the error is that peer's death (operations that no longer need it may finish).
  void setAsyncError(ncclResult_t code, const std::string& why = "", int deadPeer = -1);
  // The peer whose death is the asynchronous error, or -1 (another error, or none).
  int asyncErrorPeer() const { return asyncErrorPeer_.load(std::memory_order_acquire); }
  std::string asyncErrorMessage() const;

  // The communicator's timeout (comm/timeouts.h; 0: none): THESEUS_TIMEOUT_MS at creation,
  // theseusCommSetTimeout later. Read by the waits themselves, so a change applies at once.
  int64_t timeoutMs() const { return timeoutMs_.load(std::memory_order_relaxed); }
  const std::atomic<int64_t>& timeoutMsRef() const { return timeoutMs_; }
  void setTimeoutMs(int64_t ms) { timeoutMs_.store(ms > 0 ? ms : 0, std::memory_order_relaxed); }

  AbortFlag& abortFlag() { return abort_; }
  const AbortFlag& abortFlag() const { return abort_; }

  Lifecycle lifecycle() const { return lifecycle_.load(std::memory_order_acquire); }
  void setLifecycle(Lifecycle s) { lifecycle_.store(s, std::memory_order_release); }

  // Set once by the init path (lifecycle.cc).
  void setIdentity(int rank, int nranks, int cudaDev, uint64_t commHash);
  void setConfig(const CommConfig& c) { config_ = c; }
  void setRanksOnGpu(int n) { ranksOnGpu_ = n; }
  void setDeviceExecutor(const exec::DeviceExecutorChoice& c) {
    deviceExecutor_ = c.mode;
    deviceExecutorWhyNot_ = c.whyNotCuda;
  }
  void setBootstrap(std::unique_ptr<bootstrap::Bootstrap> b);
  void setTransports(std::unique_ptr<transport::TransportManager> t);
  void setEngine(std::unique_ptr<CollectiveEngine> e);
  // The NCCL profiler plugin's session (null: none, the common case).
  telemetry::ProfilerSession* profiler() const { return profiler_.get(); }
  void setProfiler(std::unique_ptr<telemetry::ProfilerSession> p);

  // Tears down engine, transports and bootstrap in that order (idempotent).
  void releaseResources();

  // The communicator's source at the metrics endpoint (comm/metrics_source.h; -1: none).
  int metricsId() const { return metricsId_; }
  void setMetricsId(int id) { metricsId_ = id; }

  // Lifecycle bookkeeping (jobs and operations in flight, finalize/revoke
  // state), defined and owned by comm/lifecycle*.cc; outlives the handle.
  struct LifecycleState;
  LifecycleState* lifecycleState() const { return lifecycleState_; }
  void setLifecycleState(LifecycleState* s) { lifecycleState_ = s; }

 private:
  uint64_t magic_ = kLiveMagic;  // first, so a stale or garbage handle is caught cheaply
  int rank_ = -1;
  int nranks_ = 0;
  int cudaDev_ = -1;
  uint64_t commHash_ = 0;
  CommConfig config_;
  exec::DeviceExecutorMode deviceExecutor_ = exec::DeviceExecutorMode::kOff;
  int ranksOnGpu_ = 1;
  std::string deviceExecutorWhyNot_ = "the communicator is not initialised";
  std::atomic<ncclResult_t> asyncError_{ncclInProgress};
  std::atomic<int> asyncErrorPeer_{-1};
  std::atomic<int64_t> timeoutMs_;
  std::atomic<Lifecycle> lifecycle_{Lifecycle::kInitializing};
  mutable std::mutex errorMutex_;
  std::string asyncErrorMessage_;
  AbortFlag abort_;
  std::unique_ptr<bootstrap::Bootstrap> bootstrap_;
  std::unique_ptr<transport::TransportManager> transports_;
  std::unique_ptr<CollectiveEngine> engine_;
  std::unique_ptr<telemetry::ProfilerSession> profiler_;
  attrs::AttributeStore attributes_;
  LifecycleState* lifecycleState_ = nullptr;
  int metricsId_ = -1;

  friend struct Reaper;
 public:
  // Marks the handle dead before the memory is freed (destroy/abort).
  void invalidateHandle() { magic_ = kDeadMagic; }
};

// Checks a handle passed by the user: non-null, not garbage, not destroyed.
Result<Communicator*> fromHandle(ncclComm_t comm);

}  // namespace theseus::comm

// The opaque type of nccl.h.
struct ncclComm final : public theseus::comm::Communicator {};
