// The engine's side of the control plane (epoch/epoch_service.h): starting it,
// the clock's slow path on the application thread, and preparing new tables
// on the epoch thread.
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/engine.h"
#include "common/deadline.h"
#include "common/log.h"
#include "schedule/user/user_schedules.h"

namespace theseus::comm {

Status Engine::startEpochs() {
  epoch::ServiceOptions o;
  o.bootstrap = comm_.bootstrap();
  o.transports = comm_.transports();
  o.attributes = &comm_.attributes();
  o.abort = &comm_.abortFlag();
  o.cudaDev = comm_.cudaDev();
  o.maxChannels = maxChannels();
  o.hostOf = hostOf_;
  o.participant = this;
  o.timeoutMs = &comm_.timeoutMsRef();
  o.trace = trace_.get();
  o.health = [this]() -> Status {
    TH_CHECK(health());
    for (int r : comm_.bootstrap()->departedRanks())
      if (r == 0) return remoteError("the leader (rank 0) left the communicator");
    return Status::ok();
  };
  if (o.bootstrap == nullptr) return internalError("the collective engine needs a bootstrap");
  failureReports_.start();
  // A peer that dies is the communicator's asynchronous error at once, even while this rank
  // is idle, as ncclCommGetAsyncError users (PyTorch's watchdog) expect; the first failure
  // this rank learns of is the one the leader saw first.
  o.bootstrap->setPeerFailureCallback(
      [this](int rank, const Status& why) {
        ncclResult_t now = comm_.asyncError();
        if (now != ncclSuccess && now != ncclInProgress) return;  // an error is already recorded
        std::string detail = why.message();  // "rank N[ (parent rank P)] failed: ..."
        if (size_t at = detail.find(" failed: "); at != std::string::npos) detail.erase(0, at + 9);
        const std::string text = "rank " + std::to_string(rank) + " (" + whoIs(rank) + ") failed first: " + detail;
        TH_WARN("comm %p rank %d: %s", static_cast<void*>(&comm_), comm_.rank(), text.c_str());
        comm_.setAsyncError(ncclRemoteError, text, rank);
        comm_.abortFlag().notePeerFailure();  // kernels waiting on the GPU learn it too
      },
      bootstrap::Bootstrap::FailureListener::kCommunicator);
  // A connection that failed with nothing waiting on the host (a proxied device FIFO's network):
  // kernels waiting for it stop once idle, and their operation fails with that failure
  // (TransportManager::asyncFailure). The host engine's waits find it in health().
  if (comm_.transports() != nullptr)
    comm_.transports()->setAsyncFailureListener([this](const Status&) { comm_.abortFlag().notePeerFailure(); });
  // A peer that left cleanly (destroyed its communicator or exited) sends nothing more either.
  o.bootstrap->setPeerDepartureCallback([this](int) { comm_.abortFlag().notePeerFailure(); });
  // THESEUS_SCHEDULES is loaded now, so its errors are reported even when no policy names a user schedule.
  (void)schedule::user::processRegistry();
  TH_ASSIGN(epochs_, epoch::EpochService::create(o));
  clock_ = &epochs_->clock();
  adoptEpoch();
  if (trace_) TH_CHECK(estimateClockOffset().withContext("THESEUS_TRACE: aligning the ranks' clocks"));
  return Status::ok();
}

// Each round every rank stamps its steady clock, allGathers the stamp and stamps again; rank 0's
// stamp lies in that interval, so offset = stamp0 - midpoint within half the interval. The round
// with the smallest interval wins (the first is often skewed by ranks arriving at different times).
Status Engine::estimateClockOffset() {
  constexpr int kRounds = 8;
  int64_t bestOffset = 0, bestError = INT64_MAX;
  for (int i = 0; i < kRounds; ++i) {
    const uint64_t before = nowNs();
    std::vector<std::string> all;
    TH_CHECK(comm_.bootstrap()->allGather(std::to_string(before), &all));
    const uint64_t after = nowNs();
    if (all.empty()) return internalError("the clock round returned nothing");
    const int64_t stamp0 = std::stoll(all[0]);
    const int64_t error = static_cast<int64_t>(after - before) / 2;
    if (error < bestError) {
      bestError = error;
      bestOffset = comm_.rank() == 0 ? 0 : stamp0 - static_cast<int64_t>(before + (after - before) / 2);
    }
  }
  trace_->setClock(bestOffset, comm_.rank() == 0 ? 0 : bestError);
  return Status::ok();
}

// The clock's slow path. When a new table took effect, its templates (built by
// prepareEpoch on the epoch thread) join the memo; those of older tables are
// dropped at the next lower(), when no plan of this group can use them any more.
Status Engine::advanceEpoch() {
  TH_CHECK(clock_->advance(seq_));
  if (clock_->current().version != tableVersion_) adoptEpoch();
  return Status::ok();
}

void Engine::adoptEpoch() {
  epoch::Epoch& e = clock_->current();
  if (trace_ && tableVersion_ != 0 && e.version != tableVersion_)
    trace_->swap(nowNs(), e.fromSeq, tableVersion_, e.version, e.reason);
  tableVersion_ = e.version;
  table_ = &e.table;
  memo_.adopt(e.version, std::move(e.prepared));
  // The table's NIC choice for this rank takes effect at the same collective as its schedules.
  if (transport::TransportManager* t = comm_.transports(); t != nullptr) t->setNicMove(e.table.nicMove(comm_.rank()));
  TH_INFO(log::kEpoch | log::kTuning, "comm %p rank %d: decision table v%llu in effect from collective %llu",
          static_cast<void*>(&comm_), comm_.rank(), static_cast<unsigned long long>(e.version),
          static_cast<unsigned long long>(e.fromSeq));
}

// Epoch thread: the templates of every request shape seen so far under the new
// table, and the connections they use, so the first collectives on the new
// table find everything ready.
Status Engine::prepareEpoch(epoch::Epoch& e) {
  TH_ASSIGN(e.prepared, memo_.prepare(e.table, e.version, comm_.transports()));
  return Status::ok();
}

}  // namespace theseus::comm
