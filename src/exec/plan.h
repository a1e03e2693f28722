// Plan: one operation lowered for execution on one rank.
//
// Collectives run "slice-major", like NCCL's primitives: the unit of every
// chunk is split into R balanced rounds, and round r of the whole program
// touches only part r of every chunk. Rounds never touch each other's memory,
// so a step waits for its predecessors (data hazards, explicit deps) only
// *within the same round*, and consecutive rounds pipeline freely. Messages on a
// connection go in (round, program order): both ranks derive that order from
// the same program, so it needs no negotiation. A step's message in a round is
// one piece per chunk it covers (pieces never exceed the slice size).
//
// Point-to-point plans are "flat": one round, each step's bytes cut in slices.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "device/memory_kind.h"
#include "exec/reduce.h"
#include "exec/step_timing.h"
#include "nccl.h"
#include "schedule/ir.h"

namespace theseus::transport {
class TransportManager;
class SendConnection;
class RecvConnection;
}  // namespace theseus::transport

namespace theseus::exec {

// A connection a plan uses, and how many of its steps use it (per round).
struct PlanConn {
  int32_t peer = -1;
  uint8_t channel = 0;
  bool isSend = false;
  uint32_t nsteps = 0;
  transport::SendConnection* send = nullptr;  // resolved when the plan starts
  transport::RecvConnection* recv = nullptr;
};

struct PlanStep {
  schedule::Op op = schedule::Op::kSend;
  uint8_t channel = 0;
  bool scaleSrc = false;     // src is this rank's raw input and the reduction pre-multiplies it
  bool scaleDst = false;     // kReduce only: the accumulator is still raw input (in place)
  bool hasSrc = false;       // the op reads src / writes dst (their addresses may still be NULL for empty steps)
  bool hasDst = false;
  int32_t recvPeer = -1;
  int32_t sendPeer = -1;
  int32_t inConn = -1;       // index in Plan::conns, or -1
  int32_t outConn = -1;
  uint32_t inPos = 0;        // position among the steps of that connection
  uint32_t outPos = 0;
  // Memory. Chunked plans: src/dst are buffer bases and the ranges are chunk
  // indices. Flat plans: src/dst are the exact addresses and `bytes` the size.
  const char* src = nullptr;
  char* dst = nullptr;
  uint32_t srcFirst = 0;
  uint32_t dstFirst = 0;
  uint32_t nchunks = 0;
  size_t bytes = 0;
  uint32_t predBegin = 0;    // Plan::preds[predBegin, predEnd): must finish round r before this starts round r
  uint32_t predEnd = 0;
  uint32_t index = 0;        // step index in the program (error messages)
};

// A buffer a plan reads or writes that is not plain host memory, with where
// it lives (plain host buffers only mark Plan::memory: the per-collective path
// records nothing else for them). The staging executor mirrors the device
// buffers of this list in host memory; device executors register them; step
// addresses point into these ranges.
struct PlanBuffer {
  const char* base = nullptr;
  size_t bytes = 0;
  device::MemoryKind memory = device::MemoryKind::kHost;
  bool written = false;           // some step may write it (else read only)
  cudaStream_t stream = nullptr;  // the stream of the operation it belongs to
};

// The tag of every point-to-point plan; collectives' tags avoid it (so a plan is p2p iff it carries it).
inline constexpr uint32_t kP2pTag = 0x50325030;  // "P2P0"

struct Plan {
  std::vector<PlanStep> steps;
  std::vector<uint32_t> preds;
  std::vector<PlanConn> conns;
  bool chunked = true;
  size_t unitElems = 0;        // chunked: U
  uint32_t chunksPerBlock = 1; // chunked: k
  uint32_t rounds = 1;
  Reduction reduction;         // for reducing steps
  size_t elemBytes = 1;
  size_t sliceBytes = 0;       // largest piece (<= every connection's slot size)
  size_t directMinBytes = 0;   // smaller pieces are copied into slots even where the peer could read them in place
  uint32_t tag = 0;            // carried by every message; both sides compute the same value
  cudaStream_t stream = nullptr;      // the stream of the operation(s): device executors queue the plan on it
  std::vector<PlanBuffer> buffers;    // the buffers the steps address that are not plain host memory
  device::MemoryKindMask memory = 0;  // the kinds of every buffer the steps address (host included)
  int rank = -1;
  int cudaDev = -1;  // the communicator's CUDA device (-1: none): device executors launch there
  int ranksOnGpu = 1;  // ranks of the communicator on that GPU, this one included (their kernels share it)
  transport::TransportManager* transports = nullptr;
  const AbortFlag* abort = nullptr;
  // Integer average: divide these elements by reduction.divisor once everything else is done.
  char* divideDst = nullptr;
  size_t divideElems = 0;
  // What this plan runs, for errors and traces (formatted only when needed).
  const char* opName = "";
  const char* scheduleName = "";
  uint64_t seq = 0;
  size_t bytes = 0;
  uint64_t traceId = 0;         // the operation's id in the communicator's flight recorder (0: none)
  // Plans with one non-zero shapeId have the same steps, predecessors and connections (lowered from
  // one RankTemplate), differing in addresses and sizes only; 0: not known.
  uint64_t shapeId = 0;
  StepTiming* stepTimes = nullptr;  // one per step when this plan's steps are traced, else null
  std::string describe() const;  // "allreduce #12 [ring] 4194304 B"
  // The fields describe() formats, for an error told after the engine reused this plan object for a
  // later operation (the CUDA executor finds a kernel's failure at the next group).
  struct Name {
    const char* op = "";
    const char* schedule = "";
    uint64_t seq = 0;
    size_t bytes = 0;
    std::string describe() const;
  };
  Name name() const { return Name{opName, scheduleName, seq, bytes}; }
  void addBuffer(const void* base, size_t size, device::MemoryKind kind, bool isWritten, cudaStream_t s) {
    if (size == 0) return;
    memory |= device::maskOf(kind);
    if (kind != device::MemoryKind::kHost)
      buffers.push_back(PlanBuffer{static_cast<const char*>(base), size, kind, isWritten, s});
  }

  void clear() {
    steps.clear();
    preds.clear();
    conns.clear();
    buffers.clear();
    memory = 0;
    divideDst = nullptr;
    divideElems = 0;
    directMinBytes = 0;
    stepTimes = nullptr;
    shapeId = 0;
  }
};

// Rounds for a chunked plan: enough that one chunk's part fits in a slice.
uint32_t roundsFor(size_t unitElems, uint32_t chunksPerBlock, size_t elemBytes, size_t sliceBytes);

// The piece a step moves in round r for its i-th chunk (chunked) or i-th slice (flat).
struct Piece {
  const char* src = nullptr;
  char* dst = nullptr;
  size_t bytes = 0;
};
uint32_t piecesPerRound(const Plan& plan, const PlanStep& step);
Piece pieceOf(const Plan& plan, const PlanStep& step, uint32_t round, uint32_t i);

// The errors of a received message that does not belong to this plan, for every executor: a tag
// other than the plan's (the ranks run different operations), or another size than the step expects.
Status wrongTagError(const Plan& plan, uint32_t step, int peer, uint32_t gotTag);
Status wrongSizeError(const Plan& plan, uint32_t step, int peer, size_t wantBytes, size_t gotBytes);

}  // namespace theseus::exec
