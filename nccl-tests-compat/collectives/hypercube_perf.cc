// hypercube_perf: an all-gather by recursive doubling over ncclSend/ncclRecv.
//
// At step k (mask = 2^k) rank r exchanges with r ^ mask everything it holds so
// far: the `mask` consecutive blocks of its aligned group (r & ~(mask-1)). After
// log2(n) steps every rank holds all n blocks. Step 0 sends straight from the
// send buffer and places the rank's own block with a send/recv to itself (not
// needed in place). Each step is its own group (steps() tells the driver), so
// steps complete in order on the host and stream-order on GPUs; a step reads
// what the previous one received, so two steps must never share a group.
// Needs a power-of-two number of ranks. Every rank receives (n-1) blocks:
// busbw factor 1 of count*(n-1) bytes.
#include "perf_coll.h"
#include "perf_nccl_calls.h"

namespace theseus::perf {
namespace {

class HypercubeTest final : public CollectiveTest {
 public:
  const char* program() const override { return "hypercube_perf"; }
  Status checkRanks(int n) const override {
    if (n <= 0 || (n & (n - 1)) != 0)
      return usageError("hypercube_perf needs a power-of-two number of ranks (got %d)", n);
    return Status::ok();
  }
  CollCounts counts(size_t count, size_t eltSize, int n) const override {
    size_t base = alignedPerRank(count, eltSize, n);
    return {base, base * n, base, base, 0};
  }
  void bandwidth(size_t count, size_t eltSize, double sec, int n, double* algBw, double* busBw) const override {
    *algBw = static_cast<double>(count * eltSize * (n - 1)) / 1.0e9 / sec;
    *busBw = *algBw;
  }
  int steps(int n) const override {
    int s = 0;
    while ((1 << s) < n) ++s;
    return s == 0 ? 1 : s;
  }
  ncclResult_t run(const CollCall& c, int step) const override {
    const int mask = 1 << step;
    const size_t block = c.count * typeInfo(c.type).size;
    char* recv = static_cast<char*>(c.recvbuff);
    const char* send = static_cast<const char*>(c.sendbuff);
    const bool inPlace = send == recv + c.rank * block;
    const int peer = c.rank ^ mask;
    const int mine = c.rank & ~(mask - 1);
    const int theirs = peer & ~(mask - 1);
    ncclResult_t r = nccl().groupStart();
    if (r != ncclSuccess) return r;
    ncclResult_t s = ncclSuccess;
    if (step == 0 && !inPlace) {
      s = nccl().send(send, c.count, c.type, c.rank, c.comm, c.stream);
      if (s == ncclSuccess) s = nccl().recv(recv + c.rank * block, c.count, c.type, c.rank, c.comm, c.stream);
    }
    if (s == ncclSuccess && peer < c.nranks) {
      const void* src = step == 0 ? static_cast<const void*>(send) : recv + mine * block;
      s = nccl().send(src, c.count * mask, c.type, peer, c.comm, c.stream);
      if (s == ncclSuccess) s = nccl().recv(recv + theirs * block, c.count * mask, c.type, peer, c.comm, c.stream);
    }
    r = nccl().groupEnd();
    return s != ncclSuccess ? s : r;
  }
  void expected(const InputModel& in, int, int, const CollCounts& k, void* out) const override {
    char* o = static_cast<char*>(out);
    for (int s = 0; s < in.nranks(); ++s) in.fillInput(s, 0, k.paramCount, o + s * k.paramCount * in.eltSize());
  }
};

}  // namespace

const CollectiveTest& hypercubeTest() {
  static const HypercubeTest t;
  return t;
}

}  // namespace theseus::perf
