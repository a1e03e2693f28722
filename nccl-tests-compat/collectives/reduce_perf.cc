// reduce_perf: ncclReduce. Only the root's output is defined: the
// element-wise reduction of all inputs. busbw factor 1.
#include "perf_coll.h"
#include "perf_nccl_calls.h"

namespace theseus::perf {
namespace {

class ReduceTest final : public CollectiveTest {
 public:
  const char* program() const override { return "reduce_perf"; }
  bool usesOp() const override { return true; }
  bool usesRoot() const override { return true; }
  CollCounts counts(size_t count, size_t, int) const override {
    return {count, count, count, 0, 0};
  }
  void bandwidth(size_t count, size_t eltSize, double sec, int, double* algBw, double* busBw) const override {
    *algBw = static_cast<double>(count * eltSize) / 1.0e9 / sec;
    *busBw = *algBw;
  }
  ncclResult_t run(const CollCall& c, int) const override {
    return nccl().reduce(c.sendbuff, c.recvbuff, c.count, c.type, c.op, c.root, c.comm, c.stream);
  }
  bool hasOutput(int rank, int root) const override { return rank == root; }
  void expected(const InputModel& in, int, int, const CollCounts& k, void* out) const override {
    in.fillReduced(0, k.recvCount, out);
  }
};

}  // namespace

const CollectiveTest& reduceTest() {
  static const ReduceTest t;
  return t;
}

}  // namespace theseus::perf
