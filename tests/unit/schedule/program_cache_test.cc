// Program cache: one generation per key (also under concurrent first use),
// distinct keys for distinct requests, cached failures, verification of
// external programs, single-rank entries.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <new>
#include <thread>

#include "program_helpers.h"
#include "schedule/program_cache.h"

// Counts heap allocations of this test binary, to prove lookups make none.
std::atomic<long> gAllocations{0};

void* operator new(size_t size) {
  gAllocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}
// GCC cannot see that the replaced operator new above uses malloc.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace theseus::schedule {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

GenerateRequest allreduce(int n) { return GenerateRequest{Collective::kAllReduce, n, 0, false, {}, {}}; }

TEST(ProgramCache, GeneratesOncePerKey) {
  ProgramCache cache(ProgramCache::Options{nullptr, 1});
  ProgramKey key = ProgramKey::make("ring", allreduce(4));
  auto a = cache.get(key);
  ASSERT_TRUE(a.isOk()) << a.status().message();
  auto b = cache.get(ProgramKey::make("ring", allreduce(4)));
  ASSERT_TRUE(b.isOk());
  EXPECT_EQ(a.value().get(), b.value().get());
  EXPECT_EQ(cache.generations(), 1u);
  EXPECT_TRUE(a.value()->verified);
  EXPECT_EQ(a.value()->program.nranks, 4);
  EXPECT_EQ(a.value()->plans.size(), 4u);
  EXPECT_EQ(a.value()->plans[0].steps.size(), a.value()->program.ranks[0].steps.size());
}

// Memory stays bounded: beyond its limit the cache drops the programs nobody holds any more,
// never one still in use.
TEST(ProgramCache, DropsUnusedProgramsBeyondItsLimit) {
  ProgramCache cache(ProgramCache::Options{nullptr, 0});
  auto held = cache.get(ProgramKey::make("direct", allreduce(2)));
  ASSERT_TRUE(held.isOk());
  for (int k = 0; k < 1500; ++k) {
    GenerateRequest r = allreduce(64);
    r.onlyRank = k % 64;
    r.params.channels = 1 + k / 64;
    auto p = cache.get(ProgramKey::make("ring", r));
    ASSERT_TRUE(p.isOk()) << p.status().message();
  }
  EXPECT_LE(cache.size(), 1025u);
  const size_t generated = cache.generations();
  auto again = cache.get(ProgramKey::make("direct", allreduce(2)));
  ASSERT_TRUE(again.isOk());
  EXPECT_EQ(again.value().get(), held.value().get()) << "a program in use was dropped";
  EXPECT_EQ(cache.generations(), generated);
}

TEST(ProgramCache, DistinctRequestsAreDistinctKeys) {
  ProgramCache cache(ProgramCache::Options{nullptr, 0});
  GenerateRequest base = allreduce(4);
  std::vector<ProgramKey> keys;
  keys.push_back(ProgramKey::make("ring", base));
  keys.push_back(ProgramKey::make("tree", base));
  GenerateRequest r = base;
  r.inPlace = true;
  keys.push_back(ProgramKey::make("ring", r));
  r = base;
  r.nranks = 5;
  keys.push_back(ProgramKey::make("ring", r));
  r = base;
  r.params.channels = 2;
  keys.push_back(ProgramKey::make("ring", r));
  r = base;
  r.hostOf = {0, 0, 1, 1};
  keys.push_back(ProgramKey::make("hierarchical", r));
  r.hostOf = {0, 1, 0, 1};
  keys.push_back(ProgramKey::make("hierarchical", r));
  r = base;
  r.collective = Collective::kBroadcast;
  keys.push_back(ProgramKey::make("ring", r));
  r.root = 2;
  keys.push_back(ProgramKey::make("ring", r));
  for (const ProgramKey& k : keys) ASSERT_TRUE(cache.get(k).isOk()) << k.toString();
  EXPECT_EQ(cache.size(), keys.size());
  EXPECT_EQ(cache.generations(), keys.size());
  // The root of a non-rooted collective is not part of the key.
  GenerateRequest rootless = base;
  rootless.root = 3;
  EXPECT_TRUE(ProgramKey::make("ring", rootless) == keys[0]);
  EXPECT_TRUE(cache.get(ProgramKey::make("ring", rootless)).isOk());
  EXPECT_EQ(cache.size(), keys.size());
}

TEST(ProgramCache, ConcurrentFirstUseGeneratesOnce) {
  ProgramCache cache(ProgramCache::Options{nullptr, 1});
  ProgramKey key = ProgramKey::make("double_binary_tree", allreduce(16));
  std::vector<const CachedProgram*> seen(8, nullptr);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      auto r = cache.get(key);
      if (r.isOk()) seen[t] = r.value().get();
    });
  for (auto& th : threads) th.join();
  for (const CachedProgram* p : seen) EXPECT_EQ(p, seen[0]);
  EXPECT_NE(seen[0], nullptr);
  EXPECT_EQ(cache.generations(), 1u);
}

TEST(ProgramCache, FailuresAreCachedWithTheirMessage) {
  ProgramCache cache;
  GenerateRequest r = allreduce(4);
  r.collective = Collective::kAlltoAll;
  ProgramKey key = ProgramKey::make("ring", r);
  auto a = cache.get(key);
  ASSERT_FALSE(a.isOk());
  EXPECT_NE(a.status().message().find("'ring' does not implement alltoall"), std::string::npos) << a.status().message();
  auto b = cache.get(key);
  EXPECT_EQ(b.status().message(), a.status().message());
  EXPECT_EQ(cache.generations(), 1u);
  auto c = cache.get(ProgramKey::make("from_json", allreduce(2)));
  ASSERT_FALSE(c.isOk());
  EXPECT_NE(c.status().message().find("unknown schedule 'from_json'"), std::string::npos);
}

TEST(ProgramCache, ExternalProgramsAreAlwaysVerified) {
  using namespace testing;  // NOLINT
  auto good = program(Collective::kAllReduce, {{send(1, in(0)), recvReduce(1, in(0), out(0))},
                                               {send(0, in(0)), recvReduce(0, in(0), out(0))}});
  auto bad = good;
  bad.ranks[1].steps[1] = recv(0, out(0));
  ProgramCache::Options opts;
  opts.verifyBuiltins = 0;
  opts.external = [&](const std::string& name, const GenerateRequest& req) -> Result<Program> {
    if (req.nranks != 2) return invalidArgument("'%s' is defined for 2 ranks only", name.c_str());
    return name == "good" ? good : bad;
  };
  ProgramCache cache(opts);
  auto g = cache.get(ProgramKey::make("good", allreduce(2)));
  ASSERT_TRUE(g.isOk()) << g.status().message();
  EXPECT_TRUE(g.value()->verified);
  auto b = cache.get(ProgramKey::make("bad", allreduce(2)));
  ASSERT_FALSE(b.isOk());
  EXPECT_EQ(b.status().code(), ncclInvalidArgument);
  EXPECT_NE(b.status().message().find("program bad allreduce nranks=2 failed verification"), std::string::npos)
      << b.status().message();
  EXPECT_NE(b.status().message().find("rank 1 output chunk 0 holds {r0:c0}"), std::string::npos);
  auto n = cache.get(ProgramKey::make("good", allreduce(3)));
  EXPECT_NE(n.status().message().find("defined for 2 ranks only"), std::string::npos);
  // Built-ins skip verification when told to.
  auto ring = cache.get(ProgramKey::make("ring", allreduce(3)));
  ASSERT_TRUE(ring.isOk());
  EXPECT_FALSE(ring.value()->verified);
}

TEST(ProgramCache, SingleRankEntries) {
  ProgramCache cache(ProgramCache::Options{nullptr, 1});
  GenerateRequest r = allreduce(8);
  r.onlyRank = 3;
  auto one = cache.get(ProgramKey::make("ring", r));
  ASSERT_TRUE(one.isOk()) << one.status().message();
  EXPECT_TRUE(one.value()->verified);
  const CachedProgram& c = *one.value();
  for (int rank = 0; rank < 8; ++rank) {
    EXPECT_EQ(c.program.ranks[rank].steps.empty(), rank != 3);
    EXPECT_EQ(c.plans[rank].steps.size(), c.program.ranks[rank].steps.size());
  }
  EXPECT_EQ(c.plans[3].peers, (std::vector<int>{2, 4}));
  EXPECT_EQ(ProgramKey::make("ring", r).toString(), "ring allreduce nranks=8 rank=3");
}

TEST(ProgramCache, LookupsAreCheap) {
  ProgramCache cache;
  ProgramKey key = ProgramKey::make("ring", allreduce(8));
  ASSERT_TRUE(cache.get(key).isOk());
  constexpr int kLookups = 100000;
  long before = gAllocations.load();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kLookups; ++i) ASSERT_TRUE(cache.get(key).isOk());
  double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / kLookups;
  EXPECT_EQ(gAllocations.load() - before, 0) << "a cache hit must not allocate";
  EXPECT_EQ(cache.generations(), 1u);
  printf("cache hit: %.0f ns per lookup\n", ns);
  if (!kSanitized) {
    EXPECT_LT(ns, 5000.0);  // generous: shared, loaded machines
  }
}

}  // namespace
}  // namespace theseus::schedule
