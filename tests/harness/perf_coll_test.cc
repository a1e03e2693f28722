// The per-collective definitions: nccl-tests' counts (16-byte rounding of
// per-rank blocks, in-place offsets), busbw factors (reference §3.6), and each
// collective's expected output checked against a naive simulation of the
// collective written independently here.
#include <gtest/gtest.h>

#include <cstring>

#include "perf_coll.h"

namespace theseus::perf {
namespace {

TEST(PerfColl, RegistryHasAllTenBinaries) {
  const char* names[] = {"all_reduce_perf",     "all_gather_perf", "broadcast_perf", "reduce_perf",
                         "reduce_scatter_perf", "alltoall_perf",   "gather_perf",    "scatter_perf",
                         "sendrecv_perf",       "hypercube_perf"};
  ASSERT_EQ(allCollectives().size(), 10u);
  for (const char* n : names) {
    const CollectiveTest* t = findCollective(n);
    ASSERT_NE(t, nullptr) << n;
    EXPECT_STREQ(t->program(), n);
  }
  EXPECT_EQ(findCollective("nope_perf"), nullptr);
}

TEST(PerfColl, BusBandwidthFactors) {
  struct Row {
    const char* name;
    double bytesPerCount;  // algbw bytes = count * es * this (n = 4)
    double factor;         // busbw / algbw
  };
  const int n = 4;
  const Row rows[] = {
      {"all_reduce_perf", 1, 2.0 * (n - 1) / n}, {"all_gather_perf", n, (n - 1.0) / n},
      {"reduce_scatter_perf", n, (n - 1.0) / n}, {"alltoall_perf", n, (n - 1.0) / n},
      {"gather_perf", n, (n - 1.0) / n},         {"scatter_perf", n, (n - 1.0) / n},
      {"broadcast_perf", 1, 1},                  {"reduce_perf", 1, 1},
      {"sendrecv_perf", 1, 1},                   {"hypercube_perf", n - 1.0, 1},
  };
  for (const Row& r : rows) {
    double alg = 0, bus = 0;
    findCollective(r.name)->bandwidth(1000, 4, 1e-3, n, &alg, &bus);
    EXPECT_DOUBLE_EQ(alg, 1000 * 4 * r.bytesPerCount / 1e9 / 1e-3) << r.name;
    EXPECT_DOUBLE_EQ(bus, alg * r.factor) << r.name;
  }
}

TEST(PerfColl, CountsFollowNcclTests) {
  // 1 MiB of floats on 3 ranks: 262144 elements; per-rank blocks round down to 4 floats.
  const size_t count = 262144, es = 4;
  const int n = 3;
  const size_t base = (count / n) / 4 * 4;  // 87380
  struct Row {
    const char* name;
    CollCounts k;
  };
  const Row rows[] = {
      {"all_reduce_perf", {count, count, count, 0, 0}},
      {"all_gather_perf", {base, base * n, base, base, 0}},
      {"reduce_scatter_perf", {base * n, base, base, 0, base}},
      {"alltoall_perf", {base * n, base * n, base, 0, 0}},
      {"gather_perf", {base, base * n, base, base, 0}},
      {"scatter_perf", {base * n, base, base, 0, base}},
      {"broadcast_perf", {count, count, count, 0, 0}},
      {"reduce_perf", {count, count, count, 0, 0}},
      {"sendrecv_perf", {count, count, count, 0, 0}},
      {"hypercube_perf", {base, base * n, base, base, 0}},
  };
  for (const Row& r : rows) {
    CollCounts k = findCollective(r.name)->counts(count, es, n);
    EXPECT_EQ(k.sendCount, r.k.sendCount) << r.name;
    EXPECT_EQ(k.recvCount, r.k.recvCount) << r.name;
    EXPECT_EQ(k.paramCount, r.k.paramCount) << r.name;
    EXPECT_EQ(k.sendInplaceOffset, r.k.sendInplaceOffset) << r.name;
    EXPECT_EQ(k.recvInplaceOffset, r.k.recvInplaceOffset) << r.name;
  }
  EXPECT_EQ(alignedPerRank(100, 1, 3), 32u);   // 33 -> 32 (16 int8)
  EXPECT_EQ(alignedPerRank(100, 8, 3), 32u);   // 33 -> 32 (2 doubles)
  EXPECT_EQ(alignedPerRank(7, 4, 2), 0u);
}

TEST(PerfColl, HypercubeNeedsAPowerOfTwo) {
  const CollectiveTest* h = findCollective("hypercube_perf");
  EXPECT_TRUE(h->checkRanks(1).isOk());
  EXPECT_TRUE(h->checkRanks(8).isOk());
  Status s = h->checkRanks(6);
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("power-of-two"), std::string::npos);
}

// The naive model of each collective: rank r's output from every rank's input.
std::vector<char> simulate(const std::string& name, const InputModel& m, const CollCounts& k, int r, int root) {
  const size_t es = m.eltSize();
  const int n = m.nranks();
  std::vector<std::vector<char>> in(n, std::vector<char>(k.sendCount * es));
  for (int s = 0; s < n; ++s) m.fillInput(s, 0, k.sendCount, in[s].data());
  std::vector<char> out(k.recvCount * es);
  const size_t c = k.paramCount;
  auto block = [&](int s, size_t first, size_t len, size_t at) { memcpy(&out[at * es], &in[s][first * es], len * es); };
  if (name == "all_reduce_perf" || name == "reduce_perf") {
    m.fillReduced(0, k.recvCount, out.data());
  } else if (name == "reduce_scatter_perf") {
    std::vector<char> all(k.sendCount * es);
    m.fillReduced(0, k.sendCount, all.data());
    memcpy(out.data(), &all[r * c * es], c * es);
  } else if (name == "broadcast_perf") {
    block(root, 0, c, 0);
  } else if (name == "all_gather_perf" || name == "gather_perf" || name == "hypercube_perf") {
    for (int s = 0; s < n; ++s) block(s, 0, c, s * c);
  } else if (name == "scatter_perf") {
    block(root, r * c, c, 0);
  } else if (name == "alltoall_perf") {
    for (int s = 0; s < n; ++s) block(s, r * c, c, s * c);
  } else if (name == "sendrecv_perf") {
    block((r + n - 1) % n, 0, c, 0);
  }
  return out;
}

TEST(PerfColl, ExpectedOutputsMatchANaiveSimulation) {
  for (const CollectiveTest* t : allCollectives()) {
    for (int n : {1, 2, 3, 4, 5}) {
      if (!t->checkRanks(n).isOk()) continue;
      for (ncclDataType_t type : {ncclInt8, ncclFloat16, ncclFloat64}) {
        const size_t es = typeInfo(type).size;
        CollCounts k = t->counts(4096 / es, es, n);
        InputModel m(type, t->usesOp() ? OpKind::kSum : OpKind::kMax, n, 99);
        for (int root = 0; root < n; ++root) {
          for (int r = 0; r < n; ++r) {
            if (!t->hasOutput(r, root)) {
              EXPECT_TRUE(std::string(t->program()) == "reduce_perf" || std::string(t->program()) == "gather_perf");
              EXPECT_NE(r, root);
              continue;
            }
            std::vector<char> got(k.recvCount * es);
            t->expected(m, r, root, k, got.data());
            EXPECT_EQ(got, simulate(t->program(), m, k, r, root))
                << t->program() << " n=" << n << " rank " << r << " root " << root << " " << typeInfo(type).name;
          }
          if (!t->usesRoot()) break;
        }
      }
    }
  }
}

}  // namespace
}  // namespace theseus::perf
