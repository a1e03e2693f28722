// HostEngine: the collective engine of a communicator (see
// collective_engine.h). It turns the operations of a group into executor
// plans: each collective gets the next sequence number, a schedule choice, the
// cached program and rank template for that choice, and addresses for its
// buffers; consecutive point-to-point operations become one plan whose steps
// run concurrently. It also owns the communicator's user reduction ops, buffer
// registrations, windows and scratch memory.
#pragma once

#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "comm/collective_engine.h"
#include "comm/group.h"
#include "exec/plan.h"
#include "exec/rank_template.h"
#include "policy/default_selector.h"
#include "schedule/program_cache.h"

namespace theseus::comm {

class HostEngine final : public CollectiveEngine {
 public:
  explicit HostEngine(Communicator& comm);
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

 private:
  struct UserOp {
    bool live = false;
    ncclDataType_t type = ncclFloat32;
    ncclScalarResidence_t residence = ncclScalarHostImmediate;
    double value = 0;              // host-immediate scalar
    const void* pointer = nullptr; // device-resident scalar, read when the collective runs
  };
  struct MemoKey {
    uint8_t collective, small, inPlace;
    int32_t root;
    bool operator==(const MemoKey&) const = default;
  };
  struct MemoHash {
    size_t operator()(const MemoKey& k) const {
      return (size_t(k.collective) << 40) ^ (size_t(k.small) << 32) ^ (size_t(k.inPlace) << 33) ^ size_t(k.root);
    }
  };
  struct Memo {
    std::shared_ptr<const schedule::CachedProgram> program;
    std::unique_ptr<exec::RankTemplate> tmpl;
  };

  exec::Plan* nextPlan();
  Status lowerCollective(const OpDesc& op, exec::Plan& plan);
  Status lowerP2p(const OpDesc* ops, size_t n, exec::Plan& plan);
  Result<const Memo*> templateFor(const OpDesc& op, size_t bytes, bool inPlace);
  Result<exec::Reduction> resolveReduction(const OpDesc& op) const;
  Result<char*> scratch(size_t bytes);
  bool isInPlace(const OpDesc& op) const;

  Communicator& comm_;
  uint64_t seq_ = 0;
  size_t sliceBytes_ = 0;
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
