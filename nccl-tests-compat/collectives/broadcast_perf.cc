// broadcast_perf: ncclBroadcast. Every rank's output is the root's input.
// busbw factor 1: each byte crosses each link once in a pipelined chain.
#include "perf_coll.h"
#include "perf_nccl_calls.h"

namespace theseus::perf {
namespace {

class BroadcastTest final : public CollectiveTest {
 public:
  const char* program() const override { return "broadcast_perf"; }
  bool usesRoot() const override { return true; }
  CollCounts counts(size_t count, size_t, int) const override {
    return {count, count, count, 0, 0};
  }
  void bandwidth(size_t count, size_t eltSize, double sec, int, double* algBw, double* busBw) const override {
    *algBw = static_cast<double>(count * eltSize) / 1.0e9 / sec;
    *busBw = *algBw;
  }
  ncclResult_t run(const CollCall& c, int) const override {
    return nccl().broadcast(c.sendbuff, c.recvbuff, c.count, c.type, c.root, c.comm, c.stream);
  }
  void expected(const InputModel& in, int, int root, const CollCounts& k, void* out) const override {
    in.fillInput(root, 0, k.recvCount, out);
  }
};

}  // namespace

const CollectiveTest& broadcastTest() {
  static const BroadcastTest t;
  return t;
}

}  // namespace theseus::perf
