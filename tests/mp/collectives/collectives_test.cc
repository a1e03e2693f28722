// The collectives correctness matrix: collectives x datatypes x ops x schedules
// x rank counts {1,2,3,4,5,8} x sizes (0, 1, odd, around slice boundaries,
// several MiB), in place and out of place, with ncclMemAlloc'd (zero-copy) and
// malloc'd (staged) buffers. Every rank checks its own output against the
// reference computed independently in reference.cc.
//
// Each (rank count, schedule) pair is one spawn of real rank processes; the
// schedule is forced with NCCL_ALGO=<schedule name> (a schedule that does not
// serve a collective falls back to one that does).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "collective_check.h"
#include "mp_test.h"
#include "reference.h"

using namespace theseus::test;

namespace {

const Coll kAllColls[] = {Coll::kAllReduce, Coll::kBroadcast,   Coll::kReduce, Coll::kAllGather,
                          Coll::kReduceScatter, Coll::kAlltoAll, Coll::kGather, Coll::kScatter};
const ncclDataType_t kAllTypes[] = {ncclInt8,  ncclUint8,   ncclInt32,    ncclUint32,     ncclInt64,     ncclUint64,
                                    ncclFloat16, ncclFloat32, ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
const ncclRedOp_t kAllOps[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg, ncclNumOps /* PreMulSum */};

// Runs every case of the given plan; stops at the first failure.
int runCases(const RankContext& ctx, ncclComm_t comm, const std::vector<CheckCase>& cases) {
  for (const CheckCase& c : cases) {
    std::string why;
    if (!runCheck(comm, ctx.rank, ctx.nranks, c, &why)) {
      fprintf(stderr, "[rank %d] FAILED %s: %s\n", ctx.rank, describe(c).c_str(), why.c_str());
      return 1;
    }
  }
  return 0;
}

// Case lists. "types": every type and op at small sizes; "sizes": sizes around
// slice boundaries and several MiB for a few types.
std::vector<CheckCase> typeCases(int nranks) {
  std::vector<CheckCase> out;
  int salt = 0;
  const size_t counts[] = {0, 1, 7, 1023};
  for (Coll coll : kAllColls) {
    for (ncclDataType_t t : kAllTypes) {
      std::vector<ncclRedOp_t> ops = collReduces(coll) ? std::vector<ncclRedOp_t>(std::begin(kAllOps), std::end(kAllOps))
                                                       : std::vector<ncclRedOp_t>{ncclSum};
      for (ncclRedOp_t op : ops) {
        for (size_t count : counts) {
          for (int inPlace = 0; inPlace < 2; ++inPlace) {
            CheckCase c;
            c.coll = coll;
            c.type = t;
            c.op = op;
            c.count = count;
            c.inPlace = inPlace;
            c.root = collRooted(coll) ? (salt % nranks) : 0;
            c.memAlloc = (salt % 2) == 0;
            c.residence = (salt / 2) % 2 ? ncclScalarDevice : ncclScalarHostImmediate;
            c.salt = salt++;
            out.push_back(c);
          }
        }
      }
    }
  }
  return out;
}

std::vector<CheckCase> sizeCases(int nranks, bool large) {
  std::vector<CheckCase> out;
  int salt = 1000;
  const size_t slice = 128 << 10;  // default THESEUS_SLICE_BYTES
  std::vector<size_t> bytes = {slice - 4, slice, slice + 4, 3 * slice + 12};
  if (large) bytes = {1000003, (5 << 20) + 36};
  for (Coll coll : kAllColls) {
    for (ncclDataType_t t : {ncclFloat32, ncclInt8, ncclBfloat16}) {
      for (size_t b : bytes) {
        for (int inPlace = 0; inPlace < 2; ++inPlace) {
          CheckCase c;
          c.coll = coll;
          c.type = t;
          c.op = t == ncclInt8 ? ncclMax : ncclSum;
          c.count = b / typeBytes(t) / ((coll == Coll::kAllReduce || coll == Coll::kBroadcast || coll == Coll::kReduce)
                                            ? 1 : static_cast<size_t>(nranks));
          c.inPlace = inPlace;
          c.root = collRooted(coll) ? (nranks - 1 - salt % nranks) : 0;
          c.memAlloc = (salt % 2) == 1;
          c.salt = salt++;
          out.push_back(c);
        }
      }
    }
  }
  return out;
}

}  // namespace

// args: {"types"|"sizes"|"large"}
THESEUS_RANK_FN(matrix_body) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  std::string mode = ctx.args.empty() ? "types" : ctx.args[0];
  std::vector<CheckCase> cases =
      mode == "types" ? typeCases(ctx.nranks) : sizeCases(ctx.nranks, mode == "large");
  int rc = runCases(ctx, comm, cases);
  RANK_NCCL(ncclCommDestroy(comm));
  return rc;
}

struct MatrixParam {
  int nranks;
  const char* schedule;  // NCCL_ALGO value; "" = default policy
  const char* mode;
};

class CollectivesMatrix : public ::testing::TestWithParam<MatrixParam> {};

TEST_P(CollectivesMatrix, AllCorrect) {
  const MatrixParam& p = GetParam();
  SpawnOptions opts;
  opts.timeoutSec = 600;
  opts.args = {p.mode};
  if (*p.schedule) opts.env["NCCL_ALGO"] = p.schedule;
  opts.env["THESEUS_STALL_TIMEOUT_MS"] = "60000";
  EXPECT_RANKS_OK(runRanks("matrix_body", p.nranks, opts));
}

std::vector<MatrixParam> matrixParams() {
  std::vector<MatrixParam> v;
  const char* schedules[] = {"", "ring", "tree", "double_binary_tree", "recursive_doubling", "halving_doubling",
                             "direct", "hierarchical"};
  // Every schedule, every datatype and op, small sizes; slice-boundary sizes for
  // every schedule; several MiB only for the default choice and the ring (the
  // executor and transports are the same for all schedules), to keep the suite quick.
  for (int n : {1, 2, 3, 4, 5, 8}) {
    for (const char* s : schedules) {
      v.push_back({n, s, "types"});
      if (n > 1) v.push_back({n, s, "sizes"});
    }
    if (n == 2 || n == 4) {
      v.push_back({n, "", "large"});
      v.push_back({n, "ring", "large"});
    }
  }
  return v;
}

std::string paramName(const ::testing::TestParamInfo<MatrixParam>& info) {
  std::string s = *info.param.schedule ? info.param.schedule : "default";
  return std::to_string(info.param.nranks) + "ranks_" + s + "_" + info.param.mode;
}

// Grouped collectives on one communicator (several per group, like nccl-tests -m),
// and point-to-point all-to-all the way PyTorch does it: grouped send/recv with
// zero counts and send-to-self.
THESEUS_RANK_FN(grouped_body) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  const int n = ctx.nranks;
  const size_t count = 4099;
  std::vector<float> a(count), b(count);
  for (size_t i = 0; i < count; ++i) a[i] = float(i % 11 + ctx.rank);
  // Four in-place allreduces in one group: each sees the previous one's result.
  b = a;
  RANK_NCCL(ncclGroupStart());
  for (int k = 0; k < 4; ++k) RANK_NCCL(ncclAllReduce(b.data(), b.data(), count, ncclFloat, ncclSum, comm, nullptr));
  RANK_NCCL(ncclGroupEnd());
  for (size_t i = 0; i < count; ++i) {
    double want = double(n) * double(i % 11) + double(n) * (n - 1) / 2.0;
    for (int k = 1; k < 4; ++k) want *= n;
    RANK_CHECK(b[i] == float(want));
  }
  // All-to-all through grouped send/recv; peer p gets `p` elements (0 for rank 0), self included.
  std::vector<std::vector<int32_t>> out(n), in(n);
  RANK_NCCL(ncclGroupStart());
  for (int p = 0; p < n; ++p) {
    in[p].assign(static_cast<size_t>(p) * 1000, ctx.rank * 100 + p);
    out[p].assign(static_cast<size_t>(ctx.rank) * 1000, -1);
    RANK_NCCL(ncclSend(in[p].data(), in[p].size(), ncclInt32, p, comm, nullptr));
    RANK_NCCL(ncclRecv(out[p].data(), out[p].size(), ncclInt32, p, comm, nullptr));
  }
  RANK_NCCL(ncclGroupEnd());
  for (int p = 0; p < n; ++p)
    for (int32_t v : out[p]) RANK_CHECK(v == p * 100 + ctx.rank);
  // Nested groups mixing a collective and point-to-point.
  int next = (ctx.rank + 1) % n, prev = (ctx.rank + n - 1) % n;
  std::vector<double> ring(777, ctx.rank), got(777, -1), sum(64, 1.0);
  RANK_NCCL(ncclGroupStart());
  RANK_NCCL(ncclGroupStart());
  RANK_NCCL(ncclAllReduce(sum.data(), sum.data(), sum.size(), ncclDouble, ncclSum, comm, nullptr));
  RANK_NCCL(ncclGroupEnd());
  RANK_NCCL(ncclSend(ring.data(), ring.size(), ncclDouble, next, comm, nullptr));
  RANK_NCCL(ncclRecv(got.data(), got.size(), ncclDouble, prev, comm, nullptr));
  RANK_NCCL(ncclGroupEnd());
  for (double v : sum) RANK_CHECK(v == double(n));
  for (double v : got) RANK_CHECK(v == double(prev));
  RANK_NCCL(ncclCommDestroy(comm));
  return 0;
}

TEST(Collectives, GroupedOperationsAndPointToPoint) {
  for (int n : {1, 2, 3, 5}) {
    SpawnOptions opts;
    opts.timeoutSec = 120;
    auto rr = runRanks("grouped_body", n, opts);
    EXPECT_TRUE(rr.allOk()) << n << " ranks: " << rr.describe();
  }
}

// One group whose later operation needs more executor scratch than an earlier one
// (in-place recursive doubling keeps a scratch block): growing the scratch must
// not pull it from under the plans lowered before, which run after it.
THESEUS_RANK_FN(grouped_scratch_growth) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  const int n = ctx.nranks;
  std::vector<std::vector<float>> bufs;
  for (size_t count : {size_t{64}, size_t{70001}, size_t{300}, size_t{1 << 20}})
    bufs.emplace_back(count, float(ctx.rank + 1));
  RANK_NCCL(ncclGroupStart());
  for (auto& b : bufs) RANK_NCCL(ncclAllReduce(b.data(), b.data(), b.size(), ncclFloat, ncclSum, comm, nullptr));
  RANK_NCCL(ncclGroupEnd());
  for (auto& b : bufs)
    for (size_t i = 0; i < b.size(); i += 7) RANK_CHECK(b[i] == float(n * (n + 1) / 2));
  RANK_NCCL(ncclCommDestroy(comm));
  return 0;
}

TEST(Collectives, ScratchGrowsWithinAGroup) {
  for (int n : {2, 3}) {
    SpawnOptions opts;
    opts.timeoutSec = 120;
    opts.env["THESEUS_SCHEDULE"] = "recursive_doubling";
    auto rr = runRanks("grouped_scratch_growth", n, opts);
    EXPECT_TRUE(rr.allOk()) << n << " ranks: " << rr.describe();
  }
}

INSTANTIATE_TEST_SUITE_P(Host, CollectivesMatrix, ::testing::ValuesIn(matrixParams()), paramName);
