// sendrecv_perf: a ring shift with ncclSend/ncclRecv in one group: rank r
// sends its input to r+1 and receives r-1's input (mod n; a single rank sends
// to itself). busbw factor 1. In place, the send and the receive share one
// buffer inside one group, and NCCL does not order them, so the result is
// undefined: that half is timed but not checked (#wrong N/A), like nccl-tests.
#include "perf_coll.h"
#include "perf_nccl_calls.h"

namespace theseus::perf {
namespace {

class SendrecvTest final : public CollectiveTest {
 public:
  const char* program() const override { return "sendrecv_perf"; }
  CollCounts counts(size_t count, size_t, int) const override {
    return {count, count, count, 0, 0};
  }
  void bandwidth(size_t count, size_t eltSize, double sec, int, double* algBw, double* busBw) const override {
    *algBw = static_cast<double>(count * eltSize) / 1.0e9 / sec;
    *busBw = *algBw;
  }
  ncclResult_t run(const CollCall& c, int) const override {
    int next = (c.rank + 1) % c.nranks;
    int prev = (c.rank - 1 + c.nranks) % c.nranks;
    ncclResult_t r = nccl().groupStart();
    if (r != ncclSuccess) return r;
    ncclResult_t s = nccl().send(c.sendbuff, c.count, c.type, next, c.comm, c.stream);
    if (s == ncclSuccess) s = nccl().recv(c.recvbuff, c.count, c.type, prev, c.comm, c.stream);
    r = nccl().groupEnd();
    return s != ncclSuccess ? s : r;
  }
  bool checksInPlace() const override { return false; }
  void expected(const InputModel& in, int rank, int, const CollCounts& k, void* out) const override {
    in.fillInput((rank - 1 + in.nranks()) % in.nranks(), 0, k.recvCount, out);
  }
};

}  // namespace

const CollectiveTest& sendrecvTest() {
  static const SendrecvTest t;
  return t;
}

}  // namespace theseus::perf
