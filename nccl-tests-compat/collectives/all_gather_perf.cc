// all_gather_perf: ncclAllGather. Rank r's `count` elements land at block r of
// every rank's output. busbw factor (n-1)/n of the gathered size.
#include "perf_coll.h"
#include "perf_nccl_calls.h"

namespace theseus::perf {
namespace {

class AllGatherTest final : public CollectiveTest {
 public:
  const char* program() const override { return "all_gather_perf"; }
  CollCounts counts(size_t count, size_t eltSize, int n) const override {
    size_t base = alignedPerRank(count, eltSize, n);
    return {base, base * n, base, base, 0};
  }
  void bandwidth(size_t count, size_t eltSize, double sec, int n, double* algBw, double* busBw) const override {
    *algBw = static_cast<double>(count * eltSize * n) / 1.0e9 / sec;
    *busBw = *algBw * (static_cast<double>(n - 1) / n);
  }
  ncclResult_t run(const CollCall& c, int) const override {
    return nccl().allGather(c.sendbuff, c.recvbuff, c.count, c.type, c.comm, c.stream);
  }
  void expected(const InputModel& in, int, int, const CollCounts& k, void* out) const override {
    char* o = static_cast<char*>(out);
    for (int s = 0; s < in.nranks(); ++s) in.fillInput(s, 0, k.paramCount, o + s * k.paramCount * in.eltSize());
  }
};

}  // namespace

const CollectiveTest& allGatherTest() {
  static const AllGatherTest t;
  return t;
}

}  // namespace theseus::perf
