#include "exec/plan.h"

namespace theseus::exec {
namespace {

// Start of part p when n items are split into `parts` balanced parts.
inline size_t partStart(size_t n, size_t parts, size_t p) {
  size_t base = n / parts, extra = n % parts;
  return p * base + (p < extra ? p : extra);
}

}  // namespace

std::string Plan::Name::describe() const {
  return std::string(op) + " #" + std::to_string(seq) + " [" + schedule + "] " + std::to_string(bytes) + " B";
}

std::string Plan::describe() const { return name().describe(); }

Status wrongTagError(const Plan& plan, uint32_t step, int peer, uint32_t gotTag) {
  return invalidUsage(
      "%s: rank %d step %u received a message from rank %d that belongs to a different operation (tag %08x, "
      "expected %08x): the ranks called different collectives, or one with another datatype, reduction, root or "
      "count, or called collectives in a different order",
      plan.describe().c_str(), plan.rank, step, peer, gotTag, plan.tag);
}

Status wrongSizeError(const Plan& plan, uint32_t step, int peer, size_t wantBytes, size_t gotBytes) {
  return invalidUsage(
      "%s: rank %d step %u expected %zu bytes from rank %d but received %zu: the ranks passed different counts or "
      "datatypes",
      plan.describe().c_str(), plan.rank, step, wantBytes, peer, gotBytes);
}

uint32_t roundsFor(size_t unitElems, uint32_t chunksPerBlock, size_t elemBytes, size_t sliceBytes) {
  size_t chunkElems = (unitElems + chunksPerBlock - 1) / chunksPerBlock;
  size_t perSlice = sliceBytes / elemBytes;
  if (perSlice == 0) perSlice = 1;
  size_t r = (chunkElems + perSlice - 1) / perSlice;
  return r == 0 ? 1 : static_cast<uint32_t>(r);
}

uint32_t piecesPerRound(const Plan& plan, const PlanStep& step) {
  if (plan.chunked) return step.nchunks;
  return step.bytes == 0 ? 0 : static_cast<uint32_t>((step.bytes + plan.sliceBytes - 1) / plan.sliceBytes);
}

Piece pieceOf(const Plan& plan, const PlanStep& step, uint32_t round, uint32_t i) {
  Piece p;
  if (!plan.chunked) {
    size_t off = static_cast<size_t>(i) * plan.sliceBytes;
    size_t left = step.bytes - off;
    p.bytes = left < plan.sliceBytes ? left : plan.sliceBytes;
    if (step.hasSrc) p.src = step.src + off;
    if (step.hasDst) p.dst = step.dst + off;
    return p;
  }
  // Chunk j covers a balanced share of its block; round r covers a balanced share of that.
  const size_t U = plan.unitElems, k = plan.chunksPerBlock, R = plan.rounds, esz = plan.elemBytes;
  auto chunkBegin = [&](uint64_t j) { return (j / k) * U + partStart(U, k, j % k); };
  auto roundRange = [&](uint64_t j, size_t* off, size_t* n) {
    size_t cb = chunkBegin(j), ce = chunkBegin(j + 1);  // j+1 at a block end starts the next block: same value
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
  return p;
}

}  // namespace theseus::exec
