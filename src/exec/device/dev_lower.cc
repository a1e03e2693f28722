#include "exec/device/dev_lower.h"

#include <cstring>

#include "exec/reduce_kernels.h"
#include "transport/fifo_layout.h"
#include "transport/transport_manager.h"

namespace theseus::exec::dev {

static_assert(sizeof(FifoControl) == sizeof(transport::shm::FifoControl) &&
              offsetof(FifoControl, tail) == offsetof(transport::shm::FifoControl, tail));
static_assert(sizeof(SlotHeader) == sizeof(transport::shm::SlotHeader) &&
              offsetof(SlotHeader, tag) == offsetof(transport::shm::SlotHeader, tag) &&
              offsetof(SlotHeader, kind) == offsetof(transport::shm::SlotHeader, kind));
static_assert(offsetof(SlotHeader, regionId) == offsetof(transport::shm::SlotHeader, regionId) &&
              offsetof(SlotHeader, offset) == offsetof(transport::shm::SlotHeader, offset) &&
              offsetof(SlotHeader, address) == offsetof(transport::shm::SlotHeader, address));
static_assert(kSlotInline == transport::shm::kSlotInline && kSlotDirectDevice == transport::shm::kSlotDirectDevice);
static_assert(sizeof(Import) == sizeof(transport::DeviceImport) &&
              offsetof(Import, bytes) == offsetof(transport::DeviceImport, bytes));
static_assert(kMaxExports == transport::kMaxDeviceExports);

namespace {

// The export a step may send from in place: the plan buffer holding the memory
// it sends (src for sends, dst for copy-sends) must lie in a registered range.
void findExport(const exec::Plan& p, const PlanStep& h, Step* d) {
  const char* sent = nullptr;
  if (h.op == schedule::Op::kSend && !h.scaleSrc) sent = h.src;
  else if (h.op == schedule::Op::kRecvCopySend || h.op == schedule::Op::kRecvReduceCopySend) sent = h.dst;
  if (sent == nullptr) return;
  for (const PlanBuffer& b : p.buffers) {
    if (sent < b.base || sent >= b.base + b.bytes) continue;
    transport::DeviceExportRef ref = p.transports->deviceExport(b.base, b.bytes);
    if (ref.entry < 0) return;
    d->exportEntry = ref.entry;
    d->exportGen = ref.generation;
    d->exportBase = ref.base;
    return;
  }
}

}  // namespace

Reduction toDevice(const exec::Reduction& r) {
  Reduction d;
  d.kind = static_cast<uint8_t>(r.kind);
  d.type = static_cast<uint8_t>(r.type);
  d.preMul = r.preMul ? 1 : 0;
  d.divideAtEnd = r.divideAtEnd ? 1 : 0;
  d.divisor = r.divisor;
  kernels::ScaleArg s = kernels::scaleArgFor(r);
  d.scaleF = s.f;
  d.scaleD = s.d;
  d.scaleU = s.u;
  if (r.scalarSource != nullptr) d.scalarSource = r.scalarSource;  // read on the device, when the plan starts
  return d;
}

Status lowerForDevice(const exec::Plan& p, LoweredPlan* out) {
  out->steps.resize(p.steps.size());
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const PlanStep& h = p.steps[i];
    Step& d = out->steps[i];
    d.op = static_cast<uint8_t>(h.op);
    d.part = 0;
    d.parts = 1;
    d.scaleSrc = h.scaleSrc;
    d.scaleDst = h.scaleDst;
    d.hasSrc = h.hasSrc;
    d.hasDst = h.hasDst;
    d.recvPeer = h.recvPeer;
    d.sendPeer = h.sendPeer;
    d.inConn = h.inConn;
    d.outConn = h.outConn;
    d.inPos = h.inPos;
    d.outPos = h.outPos;
    d.predBegin = h.predBegin;
    d.predEnd = h.predEnd;
    d.srcFirst = h.srcFirst;
    d.dstFirst = h.dstFirst;
    d.nchunks = h.nchunks;
    d.index = h.index;
    d.src = h.src;
    d.dst = h.dst;
    d.bytes = h.bytes;
    d.exportEntry = -1;
    d.exportGen = 0;
    d.exportBase = nullptr;
  }
  // Moves that change nothing. A PreMulSum by exactly 1 (an average over one
  // rank) scales nothing: x * 1 is x in every type. A copy of memory onto
  // itself, unscaled, moves nothing (one rank's in-place reductions are such a
  // copy, kept in the program so that a scale has a step to run in), so it
  // gets no pieces and its rounds end at once instead of visiting every slice:
  // on an H200, DDP's in-place gradient buckets at world size 1 paid that pass
  // (in-place 256 MiB allreduce on 1 rank: 10 ms).
  const exec::Reduction& red = p.reduction;
  const bool identityScale = red.preMul && red.scalarSource == nullptr && red.scalar == 1.0;
  for (Step& d : out->steps) {
    if (identityScale) d.scaleSrc = d.scaleDst = 0;
    const bool sameChunks = !p.chunked || d.srcFirst == d.dstFirst;
    if (d.op == kOpCopy && !d.scaleSrc && d.src == d.dst && sameChunks) {
      d.nchunks = 0;
      d.bytes = 0;
    }
  }
  out->preds.assign(p.preds.begin(), p.preds.end());
  out->conns.resize(p.conns.size());
  out->hostRanges.clear();
  for (size_t i = 0; i < p.conns.size(); ++i) {
    const PlanConn& h = p.conns[i];
    Conn& d = out->conns[i];
    d.peer = h.peer;
    d.nsteps = h.nsteps;
    d.isSend = h.isSend;
    if (p.transports == nullptr) return internalError("%s: a plan with connections but no transports", p.describe().c_str());
    auto f = p.transports->deviceFifo(h.peer, h.channel, h.isSend);
    if (!f.isOk())
      return f.status().withContext(p.describe() + ": the device executor connects only ranks of one host");
    if (f.value().slotBytes < p.sliceBytes)
      return internalError("%s: the device FIFO with rank %d has %llu-byte slots, smaller than the %zu-byte slices",
                           p.describe().c_str(), h.peer, static_cast<unsigned long long>(f.value().slotBytes),
                           p.sliceBytes);
    d.fifo.ctl = static_cast<FifoControl*>(f.value().control);
    d.fifo.headers = static_cast<SlotHeader*>(f.value().headers);
    d.fifo.data = f.value().data;
    d.fifo.slots = f.value().slots;
    d.fifo.slotBytes = f.value().slotBytes;
    d.acks = h.isSend ? f.value().directAcks : nullptr;
    d.imports = h.isSend ? nullptr : static_cast<const Import*>(f.value().directImports);
    out->hostRanges.emplace_back(f.value().segmentBase, f.value().segmentBytes);
    if (f.value().directTablesBase != nullptr)
      out->hostRanges.emplace_back(f.value().directTablesBase, f.value().directTablesBytes);
  }
  for (size_t s = 0; s < p.steps.size(); ++s)
    if (p.steps[s].outConn >= 0 && out->conns[p.steps[s].outConn].acks != nullptr)
      findExport(p, p.steps[s], &out->steps[s]);
  out->state.assign(p.steps.size(), StepState{});
  out->cursors.assign(p.conns.size(), Cursor{});
  Plan& d = out->plan;
  d = Plan{};
  d.steps = out->steps.data();
  d.preds = out->preds.data();
  d.conns = out->conns.data();
  d.state = out->state.data();
  d.cursors = out->cursors.data();
  d.nsteps = static_cast<uint32_t>(out->steps.size());
  d.nconns = static_cast<uint32_t>(out->conns.size());
  d.npreds = static_cast<uint32_t>(out->preds.size());
  d.rounds = p.rounds;
  d.chunked = p.chunked;
  d.chunksPerBlock = p.chunksPerBlock;
  d.unitElems = p.unitElems;
  d.elemBytes = p.elemBytes;
  d.sliceBytes = p.sliceBytes;
  d.tag = p.tag;
  d.red = toDevice(p.reduction);
  d.divideDst = p.divideDst;
  d.divideElems = p.divideElems;
  d.directMinBytes = p.directMinBytes;
  d.remaining = d.nsteps;
  return Status::ok();
}

namespace {

template <class T>
T* copyArray(const std::vector<T>& v, ImageAlloc alloc, void* ctx, bool* ok) {
  if (v.empty()) return nullptr;
  void* dst = alloc(ctx, v.size() * sizeof(T), alignof(T) < 16 ? 16 : alignof(T));
  if (dst == nullptr) {
    *ok = false;
    return nullptr;
  }
  memcpy(dst, v.data(), v.size() * sizeof(T));
  return static_cast<T*>(dst);
}

}  // namespace

Plan* copyImage(const LoweredPlan& lowered, ImageAlloc alloc, void* ctx) {
  bool ok = true;
  Plan plan = lowered.plan;
  plan.steps = copyArray(lowered.steps, alloc, ctx, &ok);
  plan.preds = copyArray(lowered.preds, alloc, ctx, &ok);
  plan.conns = copyArray(lowered.conns, alloc, ctx, &ok);
  plan.state = copyArray(lowered.state, alloc, ctx, &ok);
  plan.cursors = copyArray(lowered.cursors, alloc, ctx, &ok);
  auto* out = static_cast<Plan*>(alloc(ctx, sizeof(Plan), alignof(Plan)));
  if (!ok || out == nullptr) return nullptr;
  memcpy(static_cast<void*>(out), &plan, sizeof(Plan));
  return out;
}

Status failureStatus(const exec::Plan& p, const Plan& d) {
  const Failure& f = d.failure;
  switch (f.code) {
    case kWrongTag:
      return exec::wrongTagError(p, f.step, f.peer, f.gotTag);
    case kWrongSize:
      return exec::wrongSizeError(p, f.step, f.peer, static_cast<size_t>(f.wantBytes), static_cast<size_t>(f.gotBytes));
    case kBadScalar:
      return invalidArgument("%s: PreMulSum scalar of type %s is beyond 2^53 in magnitude; Theseus supports integer "
                             "scalars up to 2^53",
                             p.describe().c_str(), typeName(p.reduction.type));
    case kBadDirect:
      return remoteError("%s: rank %d: step %u: rank %d sent a zero-copy message this rank cannot read (export %u, "
                         "%llu bytes at offset %llu: not mapped here, or beyond the exported allocation)",
                         p.describe().c_str(), p.rank, f.step, f.peer, f.gotTag,
                         static_cast<unsigned long long>(f.gotBytes), static_cast<unsigned long long>(f.wantBytes));
    default:
      return internalError("%s: rank %d: the device interpreter failed with code %u at step %u", p.describe().c_str(),
                           p.rank, f.code, f.step);
  }
}

}  // namespace theseus::exec::dev
