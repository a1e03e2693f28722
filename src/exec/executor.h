// Executors: what runs lowered plans (plan.h) on one kind of memory.
//
// The collective engine (comm/) lowers every operation of a group into plans —
// the same plans whatever the memory — and hands each communicator's lane to
// the executor for the memory its buffers live in and its communicator's mode
// (executorFor; lanes that share one run together). Executors share the plan
// format, slicing, per-connection message order and the progress logic
// (progress.h); they differ in their Primitives (primitives.h) and in how
// they wait:
//   * host    — plans on host memory (and pinned host memory where the
//               communicator has no CUDA executor), run on the calling
//               thread; run() returns when every plan completed.
//   * staging — device buffers mirrored in host memory around the host
//               executor (staging.h): a synchronous fallback until the CUDA
//               executor serves an operation.
//   * cuda    — (the CUDA data path) plans on device and pinned host memory
//               interpreted by device code on the caller's stream; run()
//               returns once the work is queued, completion is stream-ordered.
//
// The contract every executor keeps:
//   1. A group runs as a whole: run() returns the first error of any lane and
//      the other lanes stop too; when it fails before anything moved (a bad
//      buffer, a deferred scalar that does not resolve), no data was touched.
//   2. Plans of a lane run in order; lanes progress concurrently, so one
//      thread may drive several ranks or communicators.
//   3. Messages on a connection go in (round, program order) and carry the
//      plan's tag; a wrong tag or size is an error, never a corrupted buffer.
//   4. Nothing waits forever: waits check the abort flag, the lane's health
//      and the stall timeout, and errors name the step, op and peer.
//   5. Deferred PreMulSum scalars (ncclScalarDevice) are read when the group
//      starts running, after the stream work queued before the call.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "common/status.h"
#include "device/memory_kind.h"
#include "device/stream_capture.h"
#include "exec/plan.h"

namespace theseus::exec {

// What the executor tells about each plan it runs: one virtual call per event, no allocation.
class PlanObserver {
 public:
  // The plan starts (steady clock).
  virtual void planStarted(const Plan& plan, uint64_t startNs) = 0;
  // The plan completed: its duration and the time it ended (one clock read serves every consumer).
  virtual void planDone(const Plan& plan, uint64_t ns, uint64_t endNs) = 0;
  // The plan has been idle for 100 ms (then every 100 ms): what it waits for
  // ("step 2 (recv) round 3/8 waits for data from rank 1").
  virtual void planWaiting(const Plan& plan, const std::string& waits) = 0;
  // The plan was captured into a CUDA graph, not run: every replay of the graph runs it as
  // captured (its schedule included). Its planDone follows at once, with a duration of 0.
  virtual void planCaptured(const Plan& plan) { (void)plan; }

 protected:
  ~PlanObserver() = default;
};

// What a lane's current plan waits on, for its health check.
struct LaneWait {
  const std::vector<int>* peers = nullptr;  // peers of its unfinished steps (null: any peer counts)
  bool longIdle = true;                     // no progress for a second (or more)
};

// LaneWait::peers of a plan, host (PlanStep, StepRun) or lowered for the device (dev::Step,
// dev::StepState): the peers of the steps that have not finished all `rounds`.
template <class Step, class Run>
void unfinishedStepPeers(const Step* steps, const Run* runs, uint32_t nsteps, uint32_t rounds, std::vector<int>* out) {
  out->clear();
  for (uint32_t s = 0; s < nsteps; ++s) {
    if (runs[s].finishedRounds == rounds) continue;
    if (steps[s].inConn >= 0) out->push_back(steps[s].recvPeer);
    if (steps[s].outConn >= 0) out->push_back(steps[s].sendPeer);
  }
}

struct Lane {
  std::vector<Plan*> plans;
  device::MemoryKindMask memory = 0;  // union of the plans' memory kinds (0 when unknown: host)
  bool deferredScalars = false;       // some plan's reduction has a scalar to read when it runs
  // Polled while idle; a non-OK status fails the lane (e.g. a peer died). A peer known to have
  // failed fails the lane at once while its current plan still waits on that peer; otherwise only
  // once the lane made no progress for a second: a peer that finished its part of an operation and
  // then died leaves its data here, and the operation may still complete.
  std::function<Status(const LaneWait&)> health;
  // Told when the lane's plans start and finish (telemetry, flight recorder, traces); null: nobody.
  PlanObserver* observer = nullptr;
};

struct ExecOptions {
  int64_t stallTimeoutMs = 0;   // no progress for this long => error (THESEUS_STALL_TIMEOUT_MS when 0)
  // The capture state of the group's streams as the caller read it before lowering (one driver call per
  // stream); an executor that needs it for a stream not listed asks the driver. Null: none read.
  const std::vector<device::StreamCapture>* captures = nullptr;
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual const char* name() const = 0;
  // True when it runs plans whose buffers are of the kinds in `kinds`.
  virtual bool serves(device::MemoryKindMask kinds) const = 0;
  // Runs every lane (see the contract above).
  virtual Status run(std::vector<Lane>& lanes, const ExecOptions& options) = 0;
  // True when it can queue plans into a CUDA graph being captured (else a group on a capturing
  // stream is refused before anything runs).
  virtual bool capturable() const { return false; }
};

// Plans on host and pinned host memory.
Executor& hostExecutor();

// What runs a communicator's plans on device memory (decided at its creation, exec/device/device_executor.h):
// the staging executor (off), the CUDA executor, or the emulated device executor for every plan (tests).
enum class DeviceExecutorMode { kOff, kEmulate, kCuda };

// The executor for plans whose buffers are of `kinds`, on a communicator in `mode` (lanes of
// communicators in different modes may get different executors: comm/enqueue.cc runs each set).
// In CUDA mode every plan on device or pinned host memory is the CUDA executor's, as its lowering
// gave it device FIFOs (deviceExecutorRuns); plans on pageable host memory alone are the host
// executor's. An error when no executor serves them (device memory without a usable CUDA driver).
Result<Executor*> executorFor(device::MemoryKindMask kinds, DeviceExecutorMode mode);

// Fails when a lane has memory outside `accessible`. Deferred PreMulSum
// scalars: an executor that reads them itself when each plan starts (the CUDA
// executor: every replay of a captured plan reads the scalar afresh) gets those
// in device and pinned memory untouched; the others are read here, and a
// scalar in memory the host cannot read is then an error.
Status prepareLanes(std::vector<Lane>& lanes, device::MemoryKindMask accessible, const char* executor,
                    bool executorReadsScalars = false);

// hostExecutor().run(): the lanes' plans are host memory (tests, tools).
Status execute(std::vector<Lane>& lanes, const ExecOptions& options = {});

}  // namespace theseus::exec
