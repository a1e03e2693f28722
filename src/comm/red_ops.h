// RedOps: a communicator's reduction operations (ncclRedOpCreatePreMulSum,
// ncclRedOpDestroy) and how an operation's op resolves into the executor's
// Reduction.
//
// Builtin ops resolve through exec::builtinReduction (avg: a PreMulSum by
// 1/nranks on floating types, a sum then a division on integers). A PreMulSum
// resolves through exec's builders too, so every path applies the same rules
// (integer scalars must be exact in a double, |s| <= 2^53):
//   * ncclScalarHostImmediate: the value is read once, at creation (a bad
//     scalar fails ncclRedOpCreatePreMulSum);
//   * ncclScalarDevice: the pointer is kept and the value read when each
//     operation runs — by the executor, after the stream work queued before
//     the call, from host or device memory (exec::deferredPreMulSum); a bad
//     value fails that operation before any data moves.
#pragma once

#include <mutex>
#include <vector>

#include "common/status.h"
#include "exec/reduce.h"
#include "nccl.h"

namespace theseus::comm {

class RedOps {
 public:
  Status createPreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t type, ncclScalarResidence_t residence);
  Status destroy(ncclRedOp_t op);
  // True for builtin ops and live custom ops.
  bool isValid(ncclRedOp_t op) const;
  // The Reduction `op` means for `type` over `nranks` ranks.
  Result<exec::Reduction> resolve(ncclRedOp_t op, ncclDataType_t type, int nranks) const;

 private:
  struct UserOp {
    bool live = false;
    exec::Reduction reduction;  // resolved (immediate) or deferred (device residence)
  };
  mutable std::mutex mu_;
  std::vector<UserOp> ops_;
};

}  // namespace theseus::comm
