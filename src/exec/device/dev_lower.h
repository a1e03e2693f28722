// Host side of the device executor: turning a lowered exec::Plan into the
// plain data the interpreter reads (dev_plan.h), with every FIFO resolved
// through the communicator's transports (TransportManager::deviceFifo).
#pragma once

#include <utility>
#include <vector>

#include "common/status.h"
#include "exec/device/dev_plan.h"
#include "exec/plan.h"

namespace theseus::exec::dev {

// The device form of a resolved reduction (its scalar converted to the
// element type exactly as the host kernels convert it).
Reduction toDevice(const exec::Reduction& r);

// A device plan and the storage it points into (kept together, reused).
struct LoweredPlan {
  Plan plan;
  std::vector<Step> steps;
  std::vector<uint32_t> preds;
  std::vector<Conn> conns;
  std::vector<StepState> state;
  std::vector<Cursor> cursors;
  // The host memory of its FIFOs a GPU must reach (control blocks, host slots, export tables), as
  // (base, bytes): lowerForDevice's, for an executor that registers memory with the device.
  std::vector<std::pair<void*, size_t>> hostRanges;
};

// Lowers `p` (its scalar already resolved) into `out`, with fresh run state.
// Errors: a peer without device FIFOs.
Status lowerForDevice(const exec::Plan& p, LoweredPlan* out);

// Copies a lowered plan and everything it points to into memory from
// `alloc(bytes, alignment)` — memory the device addresses at the same
// address (mapped pinned host memory) — and returns the plan there. Null when
// the allocator fails.
using ImageAlloc = void* (*)(void* ctx, size_t bytes, size_t alignment);
Plan* copyImage(const LoweredPlan& lowered, ImageAlloc alloc, void* ctx);

// The error a failed device plan reports (the host executor's wording).
Status failureStatus(const exec::Plan& p, const Plan& d);

}  // namespace theseus::exec::dev
