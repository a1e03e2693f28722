// Engine: the collective engine of a communicator (collective_engine.h).
//
// It turns the operations of a group into executor plans: each collective
// gets the next sequence number, the decision of the epoch in effect for that
// number (epoch/epoch_clock.h: the same table on every rank), the cached
// program and rank template for that decision (template_memo.h) and addresses
// for its buffers (lower_collective.cc); consecutive point-to-point operations
// become one plan whose steps run concurrently (lower_p2p.cc). The plans are
// the same whatever memory the buffers are in; each buffer carries its kind.
//
// It is made of parts with one job each:
//   red_ops.h          user reduction ops and op -> Reduction
//   registrations.h    registered buffers and windows
//   scratch.h          executor scratch
//   template_memo.h    decisions, programs and rank templates per request shape
//   engine_epochs.cc   the control plane: starting it, advancing the clock,
//                      preparing new tables on the epoch thread
//   engine.cc          health, failures, straggler emulation, the interface
//
// Per collective, with nothing changing: seq++, one comparison against the
// lease, a short scan of the table's size ranges, one hash lookup of the
// template memo keyed by (table version, collective, range, root, in-place).
// No allocation, no lock shared with the epoch thread.
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "comm/collective_engine.h"
#include "comm/failure_reports.h"
#include "comm/red_ops.h"
#include "comm/registrations.h"
#include "comm/scratch.h"
#include "comm/template_memo.h"
#include "epoch/epoch_service.h"
#include "exec/plan.h"
#include "telemetry/flight_recorder.h"
#include "telemetry/trace_writer.h"

namespace theseus::transport {
class LinkEmulation;
}

namespace theseus::comm {

class Engine final : public CollectiveEngine, public epoch::Participant {
 public:
  explicit Engine(Communicator& comm);
  ~Engine() override;
  // Collective (all ranks, at creation): starts the control plane and agrees on the initial table.
  Status startEpochs();

  Status lower(const std::vector<OpDesc>& ops, exec::Lane* lane) override;
  Status beforeRun() override;
  Status noteFailure(const Status& s) override;
  Status health() const override;
  Status healthFor(const exec::LaneWait* wait) const;  // null: any failed peer counts
  Status withRootCause(const Status& s) const;
  std::string whoIs(int rank) const;

  Status createPreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t type,
                         ncclScalarResidence_t residence) override {
    return redOps_.createPreMulSum(op, scalar, type, residence);
  }
  Status destroyRedOp(ncclRedOp_t op) override { return redOps_.destroy(op); }
  bool redOpIsValid(ncclRedOp_t op) const override { return redOps_.isValid(op); }
  // Host buffers also go to the transports, which send from them zero-copy where they can.
  Status registerBuffer(void* buff, size_t size, void** handle) override;
  Status deregisterBuffer(void* handle) override;
  Status registerWindow(void* buff, size_t size, ncclWindow_t* win, int flags) override;
  Status deregisterWindow(ncclWindow_t win) override;
  Result<void*> windowUserPtr(ncclWindow_t win) const override;

  Memory memory() const override;
  Status suspend(bool releaseMemory) override;
  Status resume() override;

  epoch::EpochService* epochs() override { return epochs_.get(); }
  uint64_t nextSeq() const override { return nextSeq_.load(std::memory_order_relaxed); }
  telemetry::FlightRecorder& flightRecorder() override { return flight_; }
  void shutdown() override;

  // epoch::Participant (epoch thread).
  Status prepareEpoch(epoch::Epoch& e) override;
  std::vector<uint64_t> recentSizes() override { return memo_.recentSizes(); }

 private:
  void exportDeviceBuffer(uint64_t id, void* buff, size_t size);

  exec::Plan* nextPlan();
  Status lowerCollective(const OpDesc& op, exec::Plan& plan);
  Status lowerP2p(const OpDesc* ops, size_t n, exec::Plan& plan);
  bool isInPlace(const OpDesc& op) const;
  // THESEUS_TRACE: this rank's clock offset to rank 0's (collective; after the handshake agreed tracing is on).
  Status estimateClockOffset();
  // The clock's slow path: lease, reports, installing the next table.
  Status advanceEpoch();
  void adoptEpoch();

  Communicator& comm_;
  const std::vector<int> hostOf_;  // host index of every rank, in order of first appearance
  const size_t sliceBytes_;        // THESEUS_SLICE_BYTES
  uint64_t seq_ = 0;
  std::atomic<uint64_t> nextSeq_{0};
  std::unique_ptr<epoch::EpochService> epochs_;
  telemetry::FlightRecorder flight_;
  std::unique_ptr<telemetry::TraceWriter> trace_;  // THESEUS_TRACE (null: off)
  // The lanes' observer: the telemetry recorder, the flight recorder, the trace.
  struct Observer final : exec::PlanObserver {
    explicit Observer(Engine* engine) : e(engine) {}
    void planStarted(const exec::Plan& p, uint64_t startNs) override;
    void planDone(const exec::Plan& p, uint64_t ns, uint64_t endNs) override;
    void planWaiting(const exec::Plan& p, const std::string& waits) override;
    void planCaptured(const exec::Plan& p) override;
    Engine* e;
  };
  Observer observer_{this};
  epoch::EpochClock* clock_ = nullptr;
  const policy::DecisionTable* table_ = nullptr;  // of the epoch in effect (app thread)
  uint64_t tableVersion_ = 0;
  transport::LinkEmulation* emulation_ = nullptr;
  std::vector<std::unique_ptr<exec::Plan>> plans_;
  size_t plansUsed_ = 0;

  std::atomic<bool> suspended_{false};
  size_t scratchBeforeSuspend_ = 0;  // re-allocated by resume()

  FailureReports failureReports_;
  RedOps redOps_;
  Registrations registrations_;
  ScratchArena scratch_;
  DeviceScratchArena deviceScratch_;  // for the CUDA executor
  TemplateMemo memo_;
};

}  // namespace theseus::comm
