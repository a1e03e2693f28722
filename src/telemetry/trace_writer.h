// Traces: THESEUS_TRACE=<dir> makes each rank of each communicator write
// <dir>/theseus-trace.<comm hash>.<rank>.json in Chrome's trace-event format
// (opens in Perfetto's UI and chrome://tracing) when the communicator goes
// away (destroy, abort, a failure): one complete event per operation (op,
// collective number, schedule, bytes) on the communicator's track, an instant
// event per schedule swap (old -> new table, why) and per error; the per-peer
// steps of one operation in THESEUS_TRACE_STEPS (default 100), each step a
// slice on the track of the peer it receives from (or sends to, when it only
// sends): when it first moved data, when it finished, how long it waited for
// data first; and every change of this rank's attributes as a counter track
// (docs/attributes.md), so a slow link's throughput, a straggler's waits and
// the doctor's verdicts show next to the operations they explain.
//
// Clocks: events carry this rank's steady clock (µs). At creation, with
// tracing on, the ranks estimate each one's offset to rank 0's clock over the
// bootstrap (min-error of 8 allGather rounds: offset = rank 0's stamp minus the
// midpoint of this rank's round, error = half the round), written in the
// file's "theseus" block; `theseus-trace merge` shifts every rank onto rank
// 0's clock and quotes the largest error.
//
// Cost: off, one null check per operation (and one per moved piece in the
// executor: Plan::stepTimes); on, an event appended to a chunked log (op and
// schedule names are interned, not copied), at most THESEUS_TRACE_MAX_EVENTS
// per rank (the rest are counted as dropped); a sampled operation costs one
// clock read per step when it first moves data and one when it finishes, and
// an event per step. Attribute changes are traced by the epoch thread, off
// the collective's path. The file is streamed at the end (about 1,100
// instructions per event, a MiB of buffer), not built as a document in memory.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "exec/step_timing.h"
#include "telemetry/chunked_log.h"

namespace theseus::exec {
struct Plan;
}  // namespace theseus::exec

namespace theseus::telemetry {

class TraceWriter {
 public:
  struct Identity {
    int rank = 0;
    int nranks = 0;
    uint64_t commHash = 0;
  };
  // Null when THESEUS_TRACE is unset.
  static std::unique_ptr<TraceWriter> create(Identity id);
  // Whether THESEUS_TRACE is set (every rank must agree: the clock rounds are collective).
  static bool enabled();

  void setClock(int64_t offsetNs, int64_t errorNs);
  // The thread that runs operations.
  void operation(const char* op, const char* schedule, uint64_t seq, uint64_t bytes, uint64_t startNs, uint64_t endNs);
  void swap(uint64_t atNs, uint64_t fromSeq, uint64_t oldVersion, uint64_t newVersion, const std::string& why);
  void error(uint64_t atNs, const std::string& what);
  // Step sampling (the thread that runs operations): the timing buffer for the
  // next operation's steps when it is one THESEUS_TRACE_STEPS picks, else null.
  exec::StepTiming* sampleSteps(size_t steps);
  // That operation finished: one event per step of `plan` (its stepTimes).
  void steps(const exec::Plan& plan, uint64_t planStartNs);
  // The epoch thread: attribute `name` of this rank changed to `value`.
  void attribute(uint64_t atNs, const std::string& name, double value);
  // Writes the file (once; later calls do nothing). Returns its path, or "" (a WARN says why).
  std::string finish();

 private:
  explicit TraceWriter(Identity id, std::string dir) : id_(id), dir_(std::move(dir)) {}
  uint32_t intern(const char* s);
  struct Event {
    uint8_t kind;  // 0 operation, 1 swap, 2 error, 3 step, 4 attribute
    uint32_t name, detail;  // interned: op / schedule, step op / -, attribute name / -, or texts
    uint64_t seq, bytes, startNs, endNs, a, b;  // step: a = peer, b = wait ns; attribute: a = value's bits
  };
  class JsonStream;  // trace_writer.cc
  void writeEvent(JsonStream& out, const Event& e, const std::vector<std::string>& quoted,
                  std::string_view pid) const;
  Identity id_;
  std::string dir_;
  std::mutex mu_;
  void keep(const Event& e);  // under mu_
  std::unique_ptr<ChunkedLog<Event>> events_;
  std::vector<std::string> strings_;
  std::unordered_map<const char*, uint32_t> interned_;
  std::array<std::pair<const char*, uint32_t>, 4> recent_{};  // the last names interned
  size_t recentNext_ = 0;
  std::unordered_map<std::string, uint32_t> attributeNames_;  // interned attribute names
  std::vector<exec::StepTiming> stepTimes_;  // the sampled operation's (the operations' thread)
  uint64_t stepEvery_ = 0;                   // THESEUS_TRACE_STEPS (0: never)
  uint64_t untilSample_ = 0;                 // operations before the next sampled one
  size_t maxEvents_ = 0;
  uint64_t dropped_ = 0;
  int64_t offsetNs_ = 0, errorNs_ = -1;
  bool finished_ = false;
};

}  // namespace theseus::telemetry
