// all_reduce_perf: ncclAllReduce. Every rank ends with the element-wise
// reduction of all inputs. busbw factor 2(n-1)/n: a ring moves each byte
// through n-1 reduce steps and n-1 copy steps.
#include "perf_coll.h"
#include "perf_nccl_calls.h"

namespace theseus::perf {
namespace {

class AllReduceTest final : public CollectiveTest {
 public:
  const char* program() const override { return "all_reduce_perf"; }
  bool usesOp() const override { return true; }
  CollCounts counts(size_t count, size_t, int) const override {
    return {count, count, count, 0, 0};
  }
  void bandwidth(size_t count, size_t eltSize, double sec, int n, double* algBw, double* busBw) const override {
    *algBw = static_cast<double>(count * eltSize) / 1.0e9 / sec;
    *busBw = *algBw * (2.0 * (n - 1) / n);
  }
  ncclResult_t run(const CollCall& c, int) const override {
    return nccl().allReduce(c.sendbuff, c.recvbuff, c.count, c.type, c.op, c.comm, c.stream);
  }
  void expected(const InputModel& in, int, int, const CollCounts& k, void* out) const override {
    in.fillReduced(0, k.recvCount, out);
  }
};

}  // namespace

const CollectiveTest& allReduceTest() {
  static const AllReduceTest t;
  return t;
}

}  // namespace theseus::perf
