// SCAFFOLD (temporary, replaced by comm/enqueue.cc and the collective engine).
#include "comm/collective_engine.h"
#include "comm/group.h"

namespace theseus::comm {
namespace {

class NoEngine final : public CollectiveEngine {
 public:
  Status createPreMulSum(ncclRedOp_t*, void*, ncclDataType_t, ncclScalarResidence_t) override { return notYet(); }
  Status destroyRedOp(ncclRedOp_t) override { return notYet(); }
  bool redOpIsValid(ncclRedOp_t op) const override { return static_cast<int>(op) >= 0 && op < ncclNumOps; }
  Status registerBuffer(void*, size_t, void** handle) override {
    *handle = nullptr;
    return Status::ok();
  }
  Status deregisterBuffer(void*) override { return Status::ok(); }
  Status registerWindow(void*, size_t, ncclWindow_t*, int) override { return Status::ok(); }
  Status deregisterWindow(ncclWindow_t) override { return Status::ok(); }
  void shutdown() override {}

 private:
  static Status notYet() { return internalError("collectives are not implemented yet"); }
};

}  // namespace

Status executeOps(std::vector<CommOps>&) { return internalError("collectives are not implemented yet"); }
Status estimateOps(const std::vector<CommOps>&, float*) { return internalError("not implemented yet"); }
Result<std::unique_ptr<CollectiveEngine>> createCollectiveEngine(Communicator&) {
  return std::unique_ptr<CollectiveEngine>(new NoEngine());
}

}  // namespace theseus::comm
