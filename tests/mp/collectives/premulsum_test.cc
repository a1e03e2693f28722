// PreMulSum scalars on every path: by value (ncclScalarHostImmediate, read at
// creation) and by pointer (ncclScalarDevice, read when each collective runs;
// in a host build the pointer is host memory). The 2^53 rule for integer
// scalars applies to both: at creation for a value, at the collective for a
// pointer, which then fails on every rank before any data moves.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "mp_test.h"

namespace {

using theseus::test::runRanks;

THESEUS_RANK_FN(scalar_read_at_run_time) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  const int n = ctx.nranks;
  float scalar = 2.0f;
  ncclRedOp_t op;
  RANK_NCCL(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat32, ncclScalarDevice, comm));
  const size_t count = 3001;  // several pieces with small slices
  std::vector<float> in(count), out(count);
  for (size_t i = 0; i < count; ++i) in[i] = float(i % 7 + ctx.rank);
  for (float s : {2.0f, 0.5f, -3.0f}) {
    scalar = s;  // the same pointer, a new value: NCCL reads it when the collective runs
    RANK_NCCL(ncclAllReduce(in.data(), out.data(), count, ncclFloat32, op, comm, nullptr));
    for (size_t i = 0; i < count; ++i) {
      double want = 0;
      for (int r = 0; r < n; ++r) want += double(s) * double(i % 7 + r);
      RANK_CHECK(out[i] == float(want));
    }
  }
  // Reduce-scatter in place with an integer scalar by pointer.
  int32_t iscalar = 3;
  ncclRedOp_t iop;
  RANK_NCCL(ncclRedOpCreatePreMulSum(&iop, &iscalar, ncclInt32, ncclScalarDevice, comm));
  std::vector<int32_t> buf(static_cast<size_t>(n) * 100);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = int32_t(i) + ctx.rank;
  RANK_NCCL(ncclReduceScatter(buf.data(), buf.data() + ctx.rank * 100, 100, ncclInt32, iop, comm, nullptr));
  for (size_t i = 0; i < 100; ++i) {
    int64_t want = 0;
    for (int r = 0; r < n; ++r) want += 3 * (int64_t(ctx.rank * 100 + i) + r);
    RANK_CHECK(buf[ctx.rank * 100 + i] == int32_t(want));
  }
  RANK_NCCL(ncclRedOpDestroy(iop, comm));
  RANK_NCCL(ncclRedOpDestroy(op, comm));
  RANK_NCCL(ncclCommDestroy(comm));
  return 0;
}

THESEUS_RANK_FN(scalar_beyond_2_53) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  int64_t big = (int64_t(1) << 53) + 1;
  ncclRedOp_t op;
  // By value: the creation fails, naming the rule.
  RANK_CHECK(ncclRedOpCreatePreMulSum(&op, &big, ncclInt64, ncclScalarHostImmediate, comm) == ncclInvalidArgument);
  RANK_CHECK(strstr(ncclGetLastError(comm), "2^53") != nullptr);
  // At the limit it is fine.
  int64_t limit = int64_t(1) << 53;
  RANK_NCCL(ncclRedOpCreatePreMulSum(&op, &limit, ncclInt64, ncclScalarHostImmediate, comm));
  RANK_NCCL(ncclRedOpDestroy(op, comm));
  // A datatype other than the op's is refused before anything runs.
  float f = 1.0f;
  ncclRedOp_t fop;
  RANK_NCCL(ncclRedOpCreatePreMulSum(&fop, &f, ncclFloat32, ncclScalarDevice, comm));
  std::vector<double> d(8, 1.0);
  RANK_CHECK(ncclAllReduce(d.data(), d.data(), d.size(), ncclFloat64, fop, comm, nullptr) == ncclInvalidArgument);
  // By pointer: the collective fails on every rank, before it touches the output (last: the
  // communicator cannot be trusted after a failed collective).
  RANK_NCCL(ncclRedOpCreatePreMulSum(&op, &big, ncclInt64, ncclScalarDevice, comm));
  std::vector<int64_t> in(64, 1), out(64, -7);
  RANK_CHECK(ncclAllReduce(in.data(), out.data(), in.size(), ncclInt64, op, comm, nullptr) == ncclInvalidArgument);
  RANK_CHECK(strstr(ncclGetLastError(comm), "2^53") != nullptr);
  for (int64_t v : out) RANK_CHECK(v == -7);
  RANK_NCCL(ncclCommDestroy(comm));
  return 0;
}

TEST(PreMulSum, ScalarByPointerIsReadWhenTheCollectiveRuns) {
  for (int n : {1, 2, 3}) {
    theseus::test::SpawnOptions o;
    o.env["THESEUS_SLICE_BYTES"] = "4096";
    auto rr = runRanks("scalar_read_at_run_time", n, o);
    EXPECT_TRUE(rr.allOk()) << n << " ranks: " << rr.describe();
  }
}

TEST(PreMulSum, IntegerScalarsBeyond2To53AreRefusedOnEveryPath) {
  for (int n : {1, 2}) {
    auto rr = runRanks("scalar_beyond_2_53", n);
    EXPECT_TRUE(rr.allOk()) << n << " ranks: " << rr.describe();
  }
}

}  // namespace
