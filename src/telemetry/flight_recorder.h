// The flight recorder: the last THESEUS_FLIGHT_RECORDER_ENTRIES operations of
// a communicator (default 256), always on, with their state — queued (lowered,
// not started), running (and, once it has been idle for 100 ms, what it waits
// for: "step 2 (recv) round 3/8 waits for data from rank 1"), done, failed
// (with the error) — and their times. What PyTorch users know as the NCCL
// flight recorder (TORCH_NCCL_TRACE_BUFFER_SIZE, dump on timeout, fr_trace).
//
// Dumps are JSON (format below, the input of theseus-doctor), written:
//   * when an operation fails (a stall timeout, a dead peer, an error) and at
//     ncclCommAbort, to THESEUS_FLIGHT_RECORDER_DUMP (a path; %r rank, %p pid,
//     %c communicator hash; unset: no files);
//   * on SIGUSR1 when THESEUS_FLIGHT_RECORDER_SIGUSR1=1 (every communicator of
//     the process; the handler only wakes a thread, which writes);
//   * on demand: theseusGetFlightRecorder() (include/theseus/theseus.h).
//
// Cost: the thread that lowers and runs operations (the caller's, for host
// memory) writes relaxed atomics into a fixed ring — no lock, no allocation;
// only the wait text, written while idle, takes a lock. Readers copy the ring
// and drop entries overwritten meanwhile.
//
// {"format": 1, "rank": r, "nranks": n, "comm": "<hash>", "host": "h", "pid": p,
//  "reason": "...", "now_ns": t, "created_ns": t, "entries": [{"id": i, "seq": s,
//  "op": "allreduce", "schedule": "ring", "count": c, "dtype": "float32", "bytes": b,
//  "peer": -1, "memory": "device", "executor": "cuda", "state": "done",
//  "queued_ns": t, "start_ns": t, "end_ns": t, "waiting": "...", "error": "..."}],
//  "host_of": [h0, h1, ...],
//  "peers": [{"peer": p, "bytes_sent": b, "send_busy_ns": t, "link_busy_ns": t,
//             "bytes_received": b, "recv_wait_ns": t}],
//  "attributes": <this rank's attribute snapshot, attrs::Snapshot's wire format>}
// (times: the steady clock, in ns; 0 = not yet). "memory" is the kinds of the
// operation's buffers ("host", "pinned host", "device", joined by "+") and
// "executor" what runs it on this communicator (exec::executorFor: "host",
// "staging", "cuda", "device (emulated)"), which says which FIFOs it waits on;
// both are left out when the buffers' kinds are unknown. The last three (set by attach())
// are what theseus-doctor needs to localize slow links, hosts and stragglers:
// the host of every rank, the transport counters of every peer since the
// connections opened (whole-window throughput, busy and wait times) and the
// rank's current measurements (link throughput and bottleneck fractions, waits,
// time per collective and between collectives: docs/attributes.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <nlohmann/json_fwd.hpp>
#include <vector>

#include "exec/executor.h"

namespace theseus::attrs {
class AttributeStore;
}
namespace theseus::transport {
class TransportManager;
}

namespace theseus::telemetry {

class FlightRecorder {
 public:
  enum class State : uint8_t { kQueued = 1, kRunning = 2, kDone = 3, kFailed = 4 };
  struct Identity {
    int rank = 0;
    int nranks = 0;
    uint64_t commHash = 0;
  };

  // What a dump carries besides the operations (see above); the pointers must
  // outlive the recorder (the communicator's store and transports do).
  struct Context {
    std::vector<int> hostOf;                                // host index of every rank
    const attrs::AttributeStore* attributes = nullptr;      // may be null
    const transport::TransportManager* transports = nullptr;  // may be null
    exec::DeviceExecutorMode deviceExecutor = exec::DeviceExecutorMode::kOff;  // the communicator's
  };

  explicit FlightRecorder(Identity id, size_t capacity = configuredCapacity());
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  // The thread that lowers and runs operations. Returns the operation's id (1, 2, ...).
  // `memory`: the kinds of its buffers (device::MemoryKindMask; 0: unknown).
  uint64_t queued(uint64_t seq, const char* op, const char* schedule, uint64_t count, const char* dtype,
                  uint64_t bytes, int peer, uint8_t memory = 0);
  void started(uint64_t id, uint64_t nowNs);
  void done(uint64_t id, uint64_t endNs);
  // Every operation not done yet fails with `why`.
  void failedAll(const std::string& why);
  // What the running operation `id` waits for (idle executor).
  void waiting(uint64_t id, const std::string& what);

  // Once, before operations run.
  void attach(Context context);

  // Any thread.
  std::string json(const std::string& reason) const;
  // Writes json(reason) to THESEUS_FLIGHT_RECORDER_DUMP (when set); the path, or "" when not written.
  std::string dumpToFile(const std::string& reason) const;

  static size_t configuredCapacity();

 private:
  struct Entry;
  Entry* slot(uint64_t id) const;
  void addContext(nlohmann::json* out) const;
  void addMemory(uint8_t memory, nlohmann::json* entry) const;
  Identity id_;
  Context context_;
  uint64_t createdNs_;
  size_t capacity_;  // entries a dump reports (THESEUS_FLIGHT_RECORDER_ENTRIES)
  size_t ringMask_;  // the ring's size (a power of two >= capacity_) - 1
  std::unique_ptr<Entry[]> ring_;
  std::atomic<uint64_t> next_{0};  // ids handed out
  mutable std::mutex textMu_;      // the entries' waiting/error texts
};

}  // namespace theseus::telemetry
