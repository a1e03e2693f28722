// The device executor's form of a lowered plan (exec/plan.h): plain data in
// memory the interpreter can address — device memory on a GPU, ordinary
// memory in the host emulation — with every pointer resolved (buffers,
// FIFOs, run state), so the interpreter needs nothing but this.
//
// FIFOs. One FIFO carries one direction of one channel between two ranks and
// lives in memory both ranks map; its layout is the shared-memory
// transport's (transport/shm/shm_layout.h): a control block with the message
// counters `head` (committed by the sender) and `tail` (released by the
// receiver) on their own cache lines, a header per slot and `slots` data
// slots of `slotBytes`. Message m uses slot m % slots. Both counters live in
// the FIFO memory only — neither side caches them across plans — so any mix
// of plans and lanes keeps them consistent.
//
// Geometry (rounds and pieces) is exec/plan.h's, computed by the same
// formulas (roundsFor, pieceOf) below, so a device plan moves exactly the
// pieces the host executor would.
#pragma once

#include "exec/device/dev_math.h"

namespace theseus::exec::dev {

// Mirrors of transport::shm::FifoControl / SlotHeader (static_asserts in the lowering).
struct alignas(64) FifoControl {
  alignas(64) uint64_t head;
  alignas(64) uint64_t tail;
};
struct alignas(64) SlotHeader {
  uint64_t bytes;
  uint32_t tag;
  uint32_t kind;  // kSlotInline or kSlotDirectDevice
  int32_t pid;
  int32_t fd;
  uint64_t regionId;  // direct: the sender's export entry
  uint64_t offset;    // direct: from the export's base
  uint64_t regionBytes;
  uint64_t address;   // direct: the data's address in the sender (diagnostics)
};
inline constexpr uint32_t kSlotInline = 1;
inline constexpr uint32_t kSlotDirectDevice = 4;

// Zero-copy reads of registered device buffers (transport/shm/device_exports.h).
// A mirror of transport::DeviceImport: where this rank mapped a peer's export.
struct Import {
  char* base;
  uint64_t bytes;
};
inline constexpr uint32_t kMaxExports = 64;  // DeviceExports::kMaxEntries

struct Fifo {
  FifoControl* ctl = nullptr;
  SlotHeader* headers = nullptr;
  char* data = nullptr;
  uint32_t slots = 0;
  uint64_t slotBytes = 0;
};

struct Conn {
  Fifo fifo;
  // Direct messages with this peer (both null when the pair has none): a send
  // connection reads the peer's acks of this rank's exports (kMaxExports
  // generations), a receive connection this rank's mappings of the peer's.
  uint64_t* acks = nullptr;
  const Import* imports = nullptr;
  int32_t peer = -1;
  uint32_t nsteps = 0;  // steps of the plan using it, per round
  uint8_t isSend = 0;
};

enum : uint8_t {  // schedule::Op values
  kOpSend = 0, kOpRecv, kOpRecvReduce, kOpCopy, kOpReduce, kOpRecvCopySend, kOpRecvReduceSend, kOpRecvReduceCopySend
};

struct Step {
  uint8_t op = kOpSend;
  uint8_t scaleSrc = 0, scaleDst = 0, hasSrc = 0, hasDst = 0;
  // A local step split across blocks (dev_split.h): this copy moves share `part` of `parts` of every piece.
  uint8_t part = 0, parts = 1;
  int32_t recvPeer = -1, sendPeer = -1;
  int32_t inConn = -1, outConn = -1;
  uint32_t inPos = 0, outPos = 0;
  uint32_t predBegin = 0, predEnd = 0;
  uint32_t srcFirst = 0, dstFirst = 0, nchunks = 0;
  uint32_t index = 0;
  const char* src = nullptr;
  char* dst = nullptr;
  uint64_t bytes = 0;  // flat plans
  // The export holding the memory this step sends from (src for sends, dst
  // for copy-sends), when the peer may read it in place: entry -1 for none.
  int32_t exportEntry = -1;
  uint64_t exportGen = 0;
  const char* exportBase = nullptr;
};

// Run state, in memory the interpreter writes (reset by the lowering).
struct StepState {
  uint32_t round = 0;
  uint32_t piece = 0;
  uint32_t received = 0;       // pieces of the round whose receive half is done
  uint32_t finishedRounds = 0;
  uint8_t pieceReceived = 0;   // two-phase fused piece: received, send pending
  uint8_t inAdvanced = 0;      // the receive cursor moved on for this round
  // Direct messages: a round whose data the receiver reads in place is final
  // only once the receiver released it (the out FIFO's tail reached the ticket).
  uint64_t roundTicket = 0;    // the current round's last direct message (head after it), 0: none
  uint64_t pendTicket = 0;     // ended rounds wait for this release (0: none)
  uint32_t pendRounds = 0;     // finishedRounds once it came
};
struct Cursor {
  uint32_t round = 0;
  uint32_t pos = 0;
};

// Why a plan failed (written by the interpreter, read by the host).
enum : uint32_t { kOk = 0, kWrongTag = 1, kWrongSize = 2, kAborted = 3, kStalled = 4, kBadScalar = 5, kBadDirect = 6 };
struct Failure {
  uint32_t code = kOk;
  uint32_t step = 0;
  int32_t peer = -1;
  uint32_t gotTag = 0;
  uint64_t gotBytes = 0;
  uint64_t wantBytes = 0;
};

struct Plan {
  const Step* steps = nullptr;
  const uint32_t* preds = nullptr;
  Conn* conns = nullptr;
  StepState* state = nullptr;
  Cursor* cursors = nullptr;
  uint32_t nsteps = 0;
  uint32_t nconns = 0;
  uint32_t npreds = 0;
  uint32_t rounds = 1;
  uint8_t chunked = 1;
  uint32_t chunksPerBlock = 1;
  uint64_t unitElems = 0;
  uint64_t elemBytes = 1;
  uint64_t sliceBytes = 0;
  uint32_t tag = 0;
  Reduction red;
  char* divideDst = nullptr;
  uint64_t divideElems = 0;
  uint64_t directMinBytes = 0;  // smaller pieces go through slots even where the peer could read them in place
  uint32_t remaining = 0;  // steps not finished (run state)
  uint32_t directSent = 0;  // messages the peers read in place (run state)
  Failure failure;
};

// ---- geometry (exec/plan.cc) ----

TH_HD inline size_t partStart(size_t n, size_t parts, size_t p) {
  size_t base = n / parts, extra = n % parts;
  return p * base + (p < extra ? p : extra);
}

TH_HD inline uint32_t piecesPerRound(const Plan& plan, const Step& step) {
  if (plan.chunked) return step.nchunks;
  return step.bytes == 0 ? 0 : static_cast<uint32_t>((step.bytes + plan.sliceBytes - 1) / plan.sliceBytes);
}

struct Piece {
  const char* src = nullptr;
  char* dst = nullptr;
  size_t bytes = 0;
};

TH_HD inline Piece pieceOf(const Plan& plan, const Step& step, uint32_t round, uint32_t i) {
  Piece p;
  if (!plan.chunked) {
    size_t off = static_cast<size_t>(i) * plan.sliceBytes;
    size_t left = step.bytes - off;
    p.bytes = left < plan.sliceBytes ? left : plan.sliceBytes;
    if (step.hasSrc) p.src = step.src + off;
    if (step.hasDst) p.dst = step.dst + off;
    return p;
  }
  const size_t U = plan.unitElems, k = plan.chunksPerBlock, R = plan.rounds, esz = plan.elemBytes;
  auto chunkBegin = [&](uint64_t j) { return (j / k) * U + partStart(U, k, j % k); };
  auto roundRange = [&](uint64_t j, size_t* off, size_t* n) {
    size_t cb = chunkBegin(j), ce = chunkBegin(j + 1);
    if ((j + 1) % k == 0) ce = (j / k) * U + U;
    size_t c = ce - cb;
    *off = cb + partStart(c, R, round);
    *n = partStart(c, R, round + 1) - partStart(c, R, round);
  };
  size_t off = 0, n = 0;
  if (step.hasSrc) {
    roundRange(step.srcFirst + i, &off, &n);
    if (step.src != nullptr) p.src = step.src + off * esz;
  }
  if (step.hasDst) {
    roundRange(step.dstFirst + i, &off, &n);
    if (step.dst != nullptr) p.dst = step.dst + off * esz;
  }
  p.bytes = n * esz;
  if (step.parts > 1) {  // this copy's share of the piece's elements
    const size_t first = partStart(n, step.parts, step.part), last = partStart(n, step.parts, step.part + 1u);
    if (p.src != nullptr) p.src += first * esz;
    if (p.dst != nullptr) p.dst += first * esz;
    p.bytes = (last - first) * esz;
  }
  return p;
}

}  // namespace theseus::exec::dev
