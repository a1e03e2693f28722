#include "comm/communicator.h"

#include "comm/collective_engine.h"
#include "comm/metrics_source.h"
#include "comm/timeouts.h"

namespace theseus::comm {

Communicator::Communicator() : timeoutMs_(configuredTimeoutMs()) {}

Communicator::~Communicator() {
  releaseResources();
  invalidateHandle();
}

void Communicator::setAsyncError(ncclResult_t code, const std::string& why, int deadPeer) {
  code = visibleTo(code, config_);
  std::lock_guard<std::mutex> lock(errorMutex_);
  ncclResult_t current = asyncError_.load();
  // A real error sticks; success only replaces "in progress".
  if (current != ncclSuccess && current != ncclInProgress) return;
  if (code == ncclSuccess && current != ncclInProgress) return;
  if (code != ncclSuccess && code != ncclInProgress) {
    asyncErrorMessage_ = why;
    asyncErrorPeer_.store(deadPeer, std::memory_order_release);
  }
  asyncError_.store(code, std::memory_order_release);
}

std::string Communicator::asyncErrorMessage() const {
  std::lock_guard<std::mutex> lock(errorMutex_);
  return asyncErrorMessage_;
}

void Communicator::setIdentity(int rank, int nranks, int cudaDev, uint64_t commHash) {
  rank_ = rank;
  nranks_ = nranks;
  cudaDev_ = cudaDev;
  commHash_ = commHash;
}

void Communicator::setBootstrap(std::unique_ptr<bootstrap::Bootstrap> b) { bootstrap_ = std::move(b); }
void Communicator::setTransports(std::unique_ptr<transport::TransportManager> t) { transports_ = std::move(t); }
void Communicator::setEngine(std::unique_ptr<CollectiveEngine> e) { engine_ = std::move(e); }
void Communicator::setProfiler(std::unique_ptr<telemetry::ProfilerSession> p) { profiler_ = std::move(p); }

void Communicator::releaseResources() {
  removeMetricsSource(this);  // before the engine stops: a scrape may be reading it
  if (engine_) engine_->shutdown();
  engine_.reset();
  profiler_.reset();  // finalize() after the last event
  transports_.reset();
  if (bootstrap_) bootstrap_->close();
  bootstrap_.reset();
}

Result<Communicator*> fromHandle(ncclComm_t comm) {
  if (comm == nullptr) return invalidArgument("communicator is NULL");
  Communicator* c = comm;
  if (!c->handleIsValid())
    return invalidArgument("communicator %p is not a valid communicator (destroyed, or never initialised)",
                           static_cast<void*>(comm));
  return c;
}

}  // namespace theseus::comm
