// HostEngine: the collective engine of a communicator (see
// collective_engine.h). It turns the operations of a group into executor
// plans: each collective gets the next sequence number, the decision of the
// epoch in effect for that number (epoch/epoch_clock.h: the same table on
// every rank), the cached program and rank template for that decision, and
// addresses for its buffers; consecutive point-to-point operations become one
// plan whose steps run concurrently. It also owns the communicator's user
// reduction ops, buffer registrations, windows and scratch memory, and its
// control plane (epoch/epoch_service.h), for which it prepares new tables off
// the critical path (prepareEpoch).
//
// Per collective, with nothing changing: seq++, one comparison against the
// lease, a short scan of the table's size ranges, one hash lookup of the
// template memo keyed by (table version, collective, range, root, in-place).
// No allocation, no lock shared with the epoch thread.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "comm/collective_engine.h"
#include "comm/group.h"
#include "epoch/epoch_service.h"
#include "exec/plan.h"
#include "exec/rank_template.h"
#include "policy/default_selector.h"
#include "schedule/program_cache.h"
#include "transport/transport_manager.h"

namespace theseus::comm {

class HostEngine final : public CollectiveEngine, public epoch::Participant {
 public:
  explicit HostEngine(Communicator& comm);
  // Collective (all ranks, at creation): starts the control plane and agrees on the initial table.
  Status startEpochs();
  ~HostEngine() override;

  Status createPreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t type, ncclScalarResidence_t residence) override;
  Status destroyRedOp(ncclRedOp_t op) override;
  bool redOpIsValid(ncclRedOp_t op) const override;
  Status registerBuffer(void* buff, size_t size, void** handle) override;
  Status deregisterBuffer(void* handle) override;
  Status registerWindow(void* buff, size_t size, ncclWindow_t* win, int flags) override;
  Status deregisterWindow(ncclWindow_t win) override;
  void shutdown() override;

  // Lowers a group's operations on this communicator into plans (owned by the
  // engine, valid until the next call), in execution order.
  Status lowerOps(const std::vector<OpDesc>& ops, std::vector<exec::Plan*>* plans);
  // Fails when the communicator cannot make progress (aborted, revoked, a peer failed).
  Status health() const;
  // Marks the plans' failure on the communicator (async error) after a failed group.
  void noteFailure(const Status& s);
  // Before a group's plans run: THESEUS_EMULATE's straggler delay (abortable).
  Status beforeExecute();
  // Per-collective records (null when the adaptive machinery is off).
  telemetry::Recorder* telemetry() { return epochs_ ? epochs_->telemetry() : nullptr; }
  epoch::EpochService* epochs() { return epochs_.get(); }
  // The number the next collective will get (any thread).
  uint64_t nextSeq() const { return nextSeq_.load(std::memory_order_relaxed); }

  // epoch::Participant (epoch thread).
  Status prepareEpoch(epoch::Epoch& e) override;
  std::vector<uint64_t> recentSizes() override;

 private:
  struct UserOp {
    bool live = false;
    ncclDataType_t type = ncclFloat32;
    ncclScalarResidence_t residence = ncclScalarHostImmediate;
    double value = 0;              // host-immediate scalar
    const void* pointer = nullptr; // device-resident scalar, read when the collective runs
  };
  struct MemoKey {
    uint64_t version;  // decision table version
    uint8_t collective, inPlace;
    int16_t range;     // DecisionTable::rangeIndex (< 0: the table leaves the collective out; -1 - size class)
    int32_t root;
    bool operator==(const MemoKey&) const = default;
  };
  struct MemoHash {
    size_t operator()(const MemoKey& k) const {
      return (k.version * 0x9e3779b97f4a7c15ull) ^ (size_t(k.collective) << 40) ^ (size_t(uint16_t(k.range)) << 24) ^
             (size_t(k.inPlace) << 56) ^ size_t(uint32_t(k.root));
    }
  };
  struct Memo {
    std::shared_ptr<const schedule::CachedProgram> program;
    std::unique_ptr<exec::RankTemplate> tmpl;
    size_t sliceBytes = 0;  // the decision's slice size (or THESEUS_SLICE_BYTES)
  };
  // A request shape seen on this communicator (recorded on memo misses): what PREPARE warms up.
  struct Shape {
    schedule::Collective collective;
    uint64_t bytes;
    int32_t root;
    bool inPlace;
  };
  // Templates built for a table by prepareEpoch, adopted when the table takes effect.
  struct WarmMemos final : epoch::Prepared {
    std::vector<std::pair<MemoKey, Memo>> entries;
  };

  exec::Plan* nextPlan();
  Status lowerCollective(const OpDesc& op, exec::Plan& plan);
  Status lowerP2p(const OpDesc* ops, size_t n, exec::Plan& plan);
  Result<const Memo*> templateFor(const OpDesc& op, size_t bytes, bool inPlace);
  // Builds the memo of a request under `table` (app thread or epoch thread: touches no engine state).
  Result<Memo> buildMemo(const policy::DecisionTable& table, int range, schedule::Collective c, size_t bytes,
                         int root, bool inPlace) const;
  // Slow path of the epoch clock: lease, reports, installing the next table.
  Status advanceEpoch();
  void adoptEpoch();
  Result<exec::Reduction> resolveReduction(const OpDesc& op) const;
  Result<char*> scratch(size_t bytes);
  bool isInPlace(const OpDesc& op) const;

  Communicator& comm_;
  uint64_t seq_ = 0;
  std::atomic<uint64_t> nextSeq_{0};
  size_t sliceBytes_ = 0;
  size_t maxSliceBytes_ = 0;  // decisions' slice sizes are clamped to the smallest transport slot
  std::unique_ptr<epoch::EpochService> epochs_;
  epoch::EpochClock* clock_ = nullptr;
  const policy::DecisionTable* table_ = nullptr;  // of the epoch in effect (app thread)
  uint64_t tableVersion_ = 0;
  uint64_t memoFloor_ = 0;  // memo entries of older table versions are dropped at the next lowerOps
  transport::LinkEmulation* emulation_ = nullptr;
  std::mutex shapesMu_;
  std::vector<Shape> shapes_;
  std::vector<std::unique_ptr<exec::Plan>> plans_;
  size_t plansUsed_ = 0;
  std::unordered_map<MemoKey, Memo, MemoHash> memo_;
  std::vector<int> hostOf_;

  mutable std::mutex opsMutex_;
  std::vector<UserOp> userOps_;

  std::mutex regMutex_;
  std::vector<std::unique_ptr<std::pair<void*, size_t>>> registrations_;
  std::vector<std::unique_ptr<std::pair<void*, size_t>>> windows_;

  void* scratch_ = nullptr;
  size_t scratchBytes_ = 0;
};

}  // namespace theseus::comm
