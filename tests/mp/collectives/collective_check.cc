#include "collective_check.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "reference.h"

namespace theseus::test {
namespace {

constexpr size_t kGuard = 64;        // bytes of guard on each side of every buffer
constexpr unsigned char kPattern = 0xA5;

struct Buffer {
  char* base = nullptr;  // allocation (guard + payload + guard)
  size_t bytes = 0;      // payload bytes
  bool fromNccl = false;
  char* data() const { return base + kGuard; }
};

bool allocate(Buffer* b, size_t bytes, bool useNccl) {
  b->bytes = bytes;
  b->fromNccl = useNccl;
  size_t total = bytes + 2 * kGuard;
  if (useNccl) {
    void* p = nullptr;
    if (ncclMemAlloc(&p, total) != ncclSuccess) return false;
    b->base = static_cast<char*>(p);
  } else {
    b->base = static_cast<char*>(malloc(total));
  }
  if (b->base == nullptr) return false;
  memset(b->base, kPattern, total);
  return true;
}

void release(Buffer* b) {
  if (b->base == nullptr) return;
  if (b->fromNccl) ncclMemFree(b->base);
  else free(b->base);
  b->base = nullptr;
}

bool guardsIntact(const Buffer& b) {
  for (size_t i = 0; i < kGuard; ++i)
    if (static_cast<unsigned char>(b.base[i]) != kPattern ||
        static_cast<unsigned char>(b.base[kGuard + b.bytes + i]) != kPattern)
      return false;
  return true;
}

double scalarOf(int rank) { return (rank % 2) ? 2.0 : 1.0; }

}  // namespace

const char* collLabel(Coll c) {
  static const char* names[] = {"allreduce", "broadcast", "reduce", "allgather", "reducescatter", "alltoall",
                                "gather", "scatter"};
  return names[static_cast<int>(c)];
}
bool collReduces(Coll c) { return c == Coll::kAllReduce || c == Coll::kReduce || c == Coll::kReduceScatter; }
bool collRooted(Coll c) { return c == Coll::kBroadcast || c == Coll::kReduce || c == Coll::kGather || c == Coll::kScatter; }

std::string describe(const CheckCase& c) {
  char buf[256];
  snprintf(buf, sizeof(buf), "%s %s %s%s count=%zu %s root=%d %s salt=%d", collLabel(c.coll), typeLabel(c.type),
           collReduces(c.coll) ? opLabel(c.op) : "-",
           c.op == ncclNumOps && c.residence == ncclScalarDevice ? " (scalar by pointer)" : "", c.count, c.inPlace ? "in-place" : "out-of-place", c.root,
           c.memAlloc ? "ncclMemAlloc" : "malloc", c.salt);
  return buf;
}

bool runCheck(ncclComm_t comm, int rank, int nranks, const CheckCase& c, std::string* why) {
  const size_t esz = typeBytes(c.type);
  const size_t n = static_cast<size_t>(nranks);
  size_t inElems = c.count, outElems = c.count;
  switch (c.coll) {
    case Coll::kAllGather: case Coll::kGather: outElems = n * c.count; break;
    case Coll::kReduceScatter: case Coll::kScatter: inElems = n * c.count; break;
    case Coll::kAlltoAll: inElems = outElems = n * c.count; break;
    default: break;
  }
  // In place, one allocation holds both; otherwise two.
  Buffer inBuf, outBuf;
  char* in = nullptr;
  char* out = nullptr;
  bool ok = true;
  if (c.inPlace) {
    size_t big = std::max(inElems, outElems) * esz;
    ok = allocate(&outBuf, big, c.memAlloc);
    if (!ok) { *why = "allocation failed"; return false; }
    char* base = outBuf.data();
    switch (c.coll) {
      case Coll::kAllGather: case Coll::kGather: out = base; in = base + rank * c.count * esz; break;
      case Coll::kReduceScatter: case Coll::kScatter: in = base; out = base + rank * c.count * esz; break;
      default: in = out = base; break;
    }
  } else {
    ok = allocate(&inBuf, inElems * esz, c.memAlloc) && allocate(&outBuf, outElems * esz, c.memAlloc);
    if (!ok) { release(&inBuf); release(&outBuf); *why = "allocation failed"; return false; }
    in = inBuf.data();
    out = outBuf.data();
  }
  // Inputs (where this rank has meaningful input).
  ncclRedOp_t refOp = c.op;
  for (size_t i = 0; i < inElems; ++i) storeValue(c.type, in, i, inputValue(c.type, refOp, rank, i, c.salt));

  ncclRedOp_t op = c.op;
  bool custom = collReduces(c.coll) && c.op == ncclNumOps;
  std::vector<char> scalar(16);  // lives until the collective ran (ncclScalarDevice reads it then)
  if (custom) {
    double s = scalarOf(rank);
    storeValue(c.type, scalar.data(), 0, s);
    if (ncclRedOpCreatePreMulSum(&op, scalar.data(), c.type, c.residence, comm) != ncclSuccess) {
      *why = std::string("ncclRedOpCreatePreMulSum failed: ") + ncclGetLastError(nullptr);
      release(&inBuf); release(&outBuf);
      return false;
    }
  }
  ncclResult_t r = ncclSuccess;
  switch (c.coll) {
    case Coll::kAllReduce: r = ncclAllReduce(in, out, c.count, c.type, op, comm, nullptr); break;
    case Coll::kBroadcast: r = ncclBroadcast(in, out, c.count, c.type, c.root, comm, nullptr); break;
    case Coll::kReduce: r = ncclReduce(in, out, c.count, c.type, op, c.root, comm, nullptr); break;
    case Coll::kAllGather: r = ncclAllGather(in, out, c.count, c.type, comm, nullptr); break;
    case Coll::kReduceScatter: r = ncclReduceScatter(in, out, c.count, c.type, op, comm, nullptr); break;
    case Coll::kAlltoAll: r = ncclAlltoAll(in, out, c.count, c.type, comm, nullptr); break;
    case Coll::kGather: r = ncclGather(in, out, c.count, c.type, c.root, comm, nullptr); break;
    case Coll::kScatter: r = ncclScatter(in, out, c.count, c.type, c.root, comm, nullptr); break;
  }
  if (custom) ncclRedOpDestroy(op, comm);
  if (r != ncclSuccess) {
    *why = std::string("call failed: ") + ncclGetErrorString(r) + ": " + ncclGetLastError(nullptr);
    release(&inBuf); release(&outBuf);
    return false;
  }

  // Expected values, computed from every rank's (deterministic) inputs.
  std::vector<double> contrib(n), scalars(n);
  for (size_t q = 0; q < n; ++q) scalars[q] = custom ? scalarOf(static_cast<int>(q)) : 1.0;
  RefOp ref{custom ? ncclNumOps : c.op, nranks};
  auto input = [&](int q, size_t i) { return inputValue(c.type, refOp, q, i, c.salt); };
  auto reduced = [&](size_t i) {
    for (size_t q = 0; q < n; ++q) contrib[q] = input(static_cast<int>(q), i);
    return reduceRef(c.type, ref, contrib, scalars);
  };
  bool checkOut = true;
  if ((c.coll == Coll::kReduce || c.coll == Coll::kGather) && rank != c.root) checkOut = false;
  for (size_t i = 0; checkOut && i < outElems; ++i) {
    double want;
    switch (c.coll) {
      case Coll::kAllReduce: case Coll::kReduce: want = reduced(i); break;
      case Coll::kBroadcast: want = input(c.root, i); break;
      case Coll::kAllGather: case Coll::kGather: want = input(static_cast<int>(i / c.count), i % c.count); break;
      case Coll::kReduceScatter: want = reduced(rank * c.count + i); break;
      case Coll::kAlltoAll: want = input(static_cast<int>(i / c.count), rank * c.count + i % c.count); break;
      case Coll::kScatter: want = input(c.root, rank * c.count + i); break;
      default: want = 0;
    }
    double got = loadValue(c.type, out, i);
    double tol = tolerance(c.type, ref.op, want, nranks);
    if (!(std::fabs(got - want) <= tol)) {
      char buf[256];
      snprintf(buf, sizeof(buf), "rank %d element %zu: got %.9g, want %.9g (tolerance %.3g)", rank, i, got, want,
               tol);
      *why = buf;
      ok = false;
      break;
    }
  }
  // Non-root output of an out-of-place reduce/gather must be untouched.
  if (ok && !checkOut && !c.inPlace) {
    for (size_t b = 0; b < outBuf.bytes; ++b) {
      if (static_cast<unsigned char>(outBuf.data()[b]) != kPattern) {
        *why = "rank " + std::to_string(rank) + " is not the root but its receive buffer was written";
        ok = false;
        break;
      }
    }
  }
  if (ok && ((inBuf.base && !guardsIntact(inBuf)) || !guardsIntact(outBuf))) {
    *why = "rank " + std::to_string(rank) + ": bytes outside the buffers were written";
    ok = false;
  }
  release(&inBuf);
  release(&outBuf);
  return ok;
}

}  // namespace theseus::test
