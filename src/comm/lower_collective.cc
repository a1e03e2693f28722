// Lowering one collective: its sequence number and the table in effect for it,
// the cached template of the decision, the reduction, scratch and stand-ins
// for NULL buffers, then the template filled with this call's addresses.
#include <algorithm>

#include "comm/communicator.h"
#include "comm/engine.h"
#include "exec/device/device_executor.h"
#include "transport/emulation.h"

namespace theseus::comm {
namespace {

using schedule::Collective;

constexpr size_t kDirectMinBytes = 2048;  // see lowerCollective
constexpr size_t kInPlaceDirectMinBytes = 128 << 10;

uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

bool overlaps(const void* a, size_t na, const void* b, size_t nb) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return na > 0 && nb > 0 && pa < pb + nb && pb < pa + na;
}

}  // namespace

bool Engine::isInPlace(const OpDesc& op) const {
  const char* s = static_cast<const char*>(op.sendbuff);
  const char* r = static_cast<const char*>(op.recvbuff);
  size_t block = op.count * exec::typeSize(op.type);
  switch (op.collective) {
    case Collective::kAllGather:
    case Collective::kGather: return r != nullptr && s == r + comm_.rank() * block;
    case Collective::kReduceScatter:
    case Collective::kScatter: return s != nullptr && r == s + comm_.rank() * block;
    default: return s == r;
  }
}

Status Engine::lowerCollective(const OpDesc& op, exec::Plan& plan) {
  const Collective c = op.collective;
  const int n = comm_.nranks();
  const size_t esz = exec::typeSize(op.type);
  const size_t inBytes = op.count * schedule::inputBlocks(c, n) * esz;
  const size_t outBytes = op.count * schedule::outputBlocks(c, n) * esz;
  const bool inPlace = isInPlace(op);
  if (!inPlace && overlaps(op.sendbuff, inBytes, op.recvbuff, outBytes))
    return invalidArgument("%s: send and receive buffers overlap but are not in place", schedule::collectiveName(c));

  if (clock_->mustAdvance(seq_)) TH_CHECK(advanceEpoch());
  const int root = schedule::isRooted(c) ? op.root : 0;
  const TemplateMemo::Entry* memo;
  const exec::DeviceExecutorMode deviceMode = comm_.deviceExecutor();
  const bool onDevice =
      exec::deviceExecutorRuns(deviceMode, op.sendMemory) || exec::deviceExecutorRuns(deviceMode, op.recvMemory);
  TH_ASSIGN(memo, memo_.find(*table_, tableVersion_, {c, std::max(inBytes, outBytes), root, inPlace, onDevice}));
  exec::Reduction red;
  if (schedule::isReducing(c)) {
    TH_ASSIGN(red, redOps_.resolve(op.op, op.type, n));
  }

  // Scratch: the program's own blocks, plus stand-ins for buffers a non-root rank may pass as NULL.
  const exec::RankTemplate& t = *memo->tmpl;
  size_t progScratch = memo->program->program.scratchBlocks * op.count * esz;
  bool needIn = t.usesInput && op.sendbuff == nullptr && inBytes > 0;
  bool needOut = t.usesOutput && op.recvbuff == nullptr && outBytes > 0;
  size_t total = progScratch + (needIn ? inBytes : 0) + (needOut ? outBytes : 0);
  char* s = nullptr;
  // Operations on device buffers that the CUDA executor runs get device scratch (its kernels cannot
  // reach the shared host scratch; the staging executor mirrors either).
  const bool deviceScratch = total > 0 && onDevice && deviceMode == exec::DeviceExecutorMode::kCuda;
  const device::MemoryKind scratchKind = deviceScratch ? device::MemoryKind::kDevice : device::MemoryKind::kHost;
  if (total > 0) {
    TH_ASSIGN(s, deviceScratch ? deviceScratch_.get(total, comm_.cudaDev()) : scratch_.get(total));
  }

  exec::CallBuffers b;
  b.input = needIn ? s + progScratch : static_cast<const char*>(op.sendbuff);
  b.output = needOut ? s + progScratch + (needIn ? inBytes : 0) : static_cast<char*>(op.recvbuff);
  b.scratch = s;
  b.unitElems = op.count;
  b.elemBytes = esz;
  plan.sliceBytes = memo->sliceBytes;
  exec::lowerTemplate(t, b, red, plan);
  // Zero-copy costs the sender a wait for the receiver's release. Tiny pieces
  // are cheaper copied (2 ranks, 8 B: 0.78 us copied vs 0.98 us direct; 4 KiB:
  // 1.6 vs 1.1 us). In place, a rank overwrites the very memory its peers read
  // zero-copy, so the wait sits on its critical path: copying wins up to 128 KiB
  // (32 KiB: 5.2 us copied vs 8.0 us direct; direct ahead from 256 KiB).
  plan.directMinBytes = inPlace ? kInPlaceDirectMinBytes : kDirectMinBytes;
  if (t.usesInput) plan.addBuffer(b.input, inBytes, needIn ? scratchKind : op.sendMemory, false, op.stream);
  if (t.usesOutput) plan.addBuffer(b.output, outBytes, needOut ? scratchKind : op.recvMemory, true, op.stream);
  if (total > 0) plan.addBuffer(s, total, scratchKind, true, op.stream);

  uint64_t seq = seq_++;
  nextSeq_.store(seq_, std::memory_order_relaxed);
  if (emulation_ != nullptr) emulation_->onCollective(seq);
  plan.reduction = red;
  plan.stream = op.stream;
  plan.seq = seq;
  plan.opName = schedule::collectiveName(c);
  plan.scheduleName = memo->program->program.name.c_str();
  plan.bytes = std::max(inBytes, outBytes);
  int opClass = schedule::isReducing(c) ? static_cast<int>(red.kind) + 1 : 0;
  // Every message carries the tag and every receiver checks it, so whatever the ranks must
  // agree on goes into it: the sequence number, collective, datatype, operation class, root
  // and count (a rank called with another count gets an error, not a wrong result).
  plan.tag = static_cast<uint32_t>(
      mix64(seq ^ (uint64_t(c) << 56) ^ (uint64_t(op.type) << 48) ^ (uint64_t(opClass) << 40) ^
            (uint64_t(op.root) << 20) ^ mix64(static_cast<uint64_t>(op.count) + 0x9e3779b97f4a7c15ull)) >> 32);
  if (plan.tag == exec::kP2pTag) plan.tag ^= 1;
  if (red.divideAtEnd) {
    bool holdsResult = c == Collective::kAllReduce || c == Collective::kReduceScatter ||
                       (c == Collective::kReduce && comm_.rank() == op.root);
    if (holdsResult) {
      plan.divideDst = b.output;
      plan.divideElems = op.count;
    }
  }
  return Status::ok();
}

}  // namespace theseus::comm
