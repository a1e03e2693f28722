// scatter_perf: ncclScatter. Rank r's output is block r of the root's input.
// busbw factor (n-1)/n of the scattered size.
#include "perf_coll.h"
#include "perf_nccl_calls.h"

namespace theseus::perf {
namespace {

class ScatterTest final : public CollectiveTest {
 public:
  const char* program() const override { return "scatter_perf"; }
  bool usesRoot() const override { return true; }
  CollCounts counts(size_t count, size_t eltSize, int n) const override {
    size_t base = alignedPerRank(count, eltSize, n);
    return {base * n, base, base, 0, base};
  }
  void bandwidth(size_t count, size_t eltSize, double sec, int n, double* algBw, double* busBw) const override {
    *algBw = static_cast<double>(count * n * eltSize) / 1.0e9 / sec;
    *busBw = *algBw * (static_cast<double>(n - 1) / n);
  }
  ncclResult_t run(const CollCall& c, int) const override {
    return nccl().scatter(c.sendbuff, c.recvbuff, c.count, c.type, c.root, c.comm, c.stream);
  }
  void expected(const InputModel& in, int rank, int root, const CollCounts& k, void* out) const override {
    in.fillInput(root, static_cast<size_t>(rank) * k.paramCount, k.paramCount, out);
  }
};

}  // namespace

const CollectiveTest& scatterTest() {
  static const ScatterTest t;
  return t;
}

}  // namespace theseus::perf
