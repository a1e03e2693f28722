// alltoall_perf: ncclAlltoAll. Block s of rank r's output is block r of rank
// s's input (`count` elements per peer). busbw factor (n-1)/n.
#include "perf_coll.h"
#include "perf_nccl_calls.h"

namespace theseus::perf {
namespace {

class AlltoallTest final : public CollectiveTest {
 public:
  const char* program() const override { return "alltoall_perf"; }
  CollCounts counts(size_t count, size_t eltSize, int n) const override {
    size_t per = alignedPerRank(count, eltSize, n);
    return {per * n, per * n, per, 0, 0};
  }
  void bandwidth(size_t count, size_t eltSize, double sec, int n, double* algBw, double* busBw) const override {
    *algBw = static_cast<double>(count * n * eltSize) / 1.0e9 / sec;
    *busBw = *algBw * (static_cast<double>(n - 1) / n);
  }
  ncclResult_t run(const CollCall& c, int) const override {
    return nccl().alltoAll(c.sendbuff, c.recvbuff, c.count, c.type, c.comm, c.stream);
  }
  void expected(const InputModel& in, int rank, int, const CollCounts& k, void* out) const override {
    char* o = static_cast<char*>(out);
    const size_t per = k.paramCount;
    for (int s = 0; s < in.nranks(); ++s) in.fillInput(s, rank * per, per, o + s * per * in.eltSize());
  }
};

}  // namespace

const CollectiveTest& alltoallTest() {
  static const AlltoallTest t;
  return t;
}

}  // namespace theseus::perf
