// reduce_scatter_perf: ncclReduceScatter. Rank r gets block r of the
// element-wise reduction of all inputs (each input has n blocks of `count`).
// busbw factor (n-1)/n of the full input size.
#include "perf_coll.h"
#include "perf_nccl_calls.h"

namespace theseus::perf {
namespace {

class ReduceScatterTest final : public CollectiveTest {
 public:
  const char* program() const override { return "reduce_scatter_perf"; }
  bool usesOp() const override { return true; }
  CollCounts counts(size_t count, size_t eltSize, int n) const override {
    size_t base = alignedPerRank(count, eltSize, n);
    return {base * n, base, base, 0, base};
  }
  void bandwidth(size_t count, size_t eltSize, double sec, int n, double* algBw, double* busBw) const override {
    *algBw = static_cast<double>(count * eltSize * n) / 1.0e9 / sec;
    *busBw = *algBw * (static_cast<double>(n - 1) / n);
  }
  ncclResult_t run(const CollCall& c, int) const override {
    return nccl().reduceScatter(c.sendbuff, c.recvbuff, c.count, c.type, c.op, c.comm, c.stream);
  }
  void expected(const InputModel& in, int rank, int, const CollCounts& k, void* out) const override {
    in.fillReduced(static_cast<size_t>(rank) * k.recvCount, k.recvCount, out);
  }
};

}  // namespace

const CollectiveTest& reduceScatterTest() {
  static const ReduceScatterTest t;
  return t;
}

}  // namespace theseus::perf
