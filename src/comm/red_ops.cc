#include "comm/red_ops.h"

#include "device/cuda_driver.h"

namespace theseus::comm {

Status RedOps::createPreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t type, ncclScalarResidence_t residence) {
  exec::Reduction r;
  if (residence == ncclScalarHostImmediate) {
    TH_ASSIGN(r, exec::preMulSumReduction(type, scalar));
  } else {
    const device::CudaDriver* cuda = device::CudaDriver::get();
    device::MemoryKind where = cuda != nullptr ? cuda->memoryKind(scalar) : device::MemoryKind::kHost;
    TH_ASSIGN(r, exec::deferredPreMulSum(type, scalar, where));
  }
  std::lock_guard<std::mutex> lock(mu_);
  size_t slot = 0;
  while (slot < ops_.size() && ops_[slot].live) ++slot;
  if (slot >= static_cast<size_t>(ncclMaxRedOp - ncclNumOps))
    return invalidUsage("too many live custom reduction operations");
  if (slot == ops_.size()) ops_.emplace_back();
  ops_[slot] = UserOp{true, r};
  *op = static_cast<ncclRedOp_t>(ncclNumOps + static_cast<int>(slot));
  return Status::ok();
}

Status RedOps::destroy(ncclRedOp_t op) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t slot = static_cast<size_t>(op) - ncclNumOps;
  if (static_cast<int>(op) < ncclNumOps || slot >= ops_.size() || !ops_[slot].live)
    return invalidArgument("ncclRedOpDestroy: %d is not a live custom operation of this communicator",
                           static_cast<int>(op));
  ops_[slot].live = false;
  return Status::ok();
}

bool RedOps::isValid(ncclRedOp_t op) const {
  int v = static_cast<int>(op);
  if (v >= 0 && v < ncclNumOps) return true;
  std::lock_guard<std::mutex> lock(mu_);
  size_t slot = static_cast<size_t>(v) - ncclNumOps;
  return v >= ncclNumOps && slot < ops_.size() && ops_[slot].live;
}

Result<exec::Reduction> RedOps::resolve(ncclRedOp_t op, ncclDataType_t type, int nranks) const {
  if (static_cast<int>(op) >= 0 && static_cast<int>(op) < ncclAvg) {  // sum, prod, max, min: the per-collective case
    static_assert(ncclSum == 0 && ncclProd == 1 && ncclMax == 2 && ncclMin == 3);
    exec::Reduction r;
    r.type = type;  // validated by the caller
    r.kind = static_cast<exec::RedKind>(op);
    return r;
  }
  if (static_cast<int>(op) >= 0 && static_cast<int>(op) < ncclNumOps) return exec::builtinReduction(op, type, nranks);
  std::lock_guard<std::mutex> lock(mu_);
  size_t slot = static_cast<size_t>(op) - ncclNumOps;
  if (static_cast<int>(op) < ncclNumOps || slot >= ops_.size() || !ops_[slot].live)
    return invalidArgument("reduction operation %d is not valid on this communicator", static_cast<int>(op));
  const exec::Reduction& r = ops_[slot].reduction;
  if (r.type != type)
    return invalidArgument("PreMulSum operation %d was created for datatype %s but used with %s", static_cast<int>(op),
                           exec::typeName(r.type), exec::typeName(type));
  return r;
}

}  // namespace theseus::comm
