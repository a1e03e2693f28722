// SharedMemoryRegistry (memAlloc/memFree), ShmSegment locators and RegionCache.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>

#include "comm/mem_alloc.h"
#include "transport/shm/region_cache.h"
#include "transport/shared_memory_registry.h"
#include "transport/shm_segment.h"

namespace theseus::transport {
namespace {

using comm::memAlloc;
using comm::memFree;

TEST(MemAlloc, ReturnsPageAlignedSharedMemory) {
  size_t before = SharedMemoryRegistry::instance().regionCount();
  auto p = memAlloc(10000);
  ASSERT_TRUE(p.isOk()) << p.status().message();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p.value()) % pageSize(), 0u);
  memset(p.value(), 0x3c, 10000);
  EXPECT_EQ(SharedMemoryRegistry::instance().regionCount(), before + 1);
  SharedRegionRef ref;
  ASSERT_TRUE(SharedMemoryRegistry::instance().find(static_cast<char*>(p.value()) + 100, 9900, &ref));
  EXPECT_EQ(ref.offset, 100u);
  EXPECT_EQ(ref.pid, getpid());
  EXPECT_GE(ref.regionBytes, 10000u);
  EXPECT_TRUE(memFree(p.value()).isOk());
  EXPECT_EQ(SharedMemoryRegistry::instance().regionCount(), before);
}

TEST(MemAlloc, BadFreesAreInvalidArguments) {
  int onStack = 0;
  Status s = memFree(&onStack);
  EXPECT_EQ(s.code(), ncclInvalidArgument);
  EXPECT_NE(s.message().find("not allocated by ncclMemAlloc"), std::string::npos) << s.message();

  auto p = memAlloc(1 << 20);
  ASSERT_TRUE(p.isOk());
  s = memFree(static_cast<char*>(p.value()) + 64);
  EXPECT_EQ(s.code(), ncclInvalidArgument);
  EXPECT_NE(s.message().find("inside the allocation"), std::string::npos) << s.message();
  EXPECT_TRUE(memFree(p.value()).isOk());
  EXPECT_EQ(memFree(p.value()).code(), ncclInvalidArgument);  // double free
  EXPECT_EQ(memAlloc(0).status().code(), ncclInvalidArgument);
  EXPECT_EQ(memAlloc(size_t(1) << 62).status().code(), ncclInvalidArgument);
}

TEST(MemAlloc, FindRejectsRangesOutsideOneRegion) {
  auto p = memAlloc(8192);
  ASSERT_TRUE(p.isOk());
  char* base = static_cast<char*>(p.value());
  SharedRegionRef ref;
  auto& reg = SharedMemoryRegistry::instance();
  EXPECT_TRUE(reg.find(base, 8192, &ref));
  EXPECT_FALSE(reg.find(base, 8193, &ref));
  EXPECT_FALSE(reg.find(base + 8192, 1, &ref));
  EXPECT_FALSE(reg.find(base - 1, 2, &ref));
  int local = 0;
  EXPECT_FALSE(reg.find(&local, sizeof(local), &ref));
  EXPECT_TRUE(memFree(p.value()).isOk());
  EXPECT_FALSE(reg.find(base, 1, &ref));
}

TEST(MemAlloc, SharedScratchUsesTheSameRegistry) {
  auto p = allocShared(4096);
  ASSERT_TRUE(p.isOk());
  SharedRegionRef ref;
  EXPECT_TRUE(SharedMemoryRegistry::instance().find(p.value(), 4096, &ref));
  EXPECT_TRUE(freeShared(p.value()).isOk());
}

TEST(ShmSegment, LocatorsAreValidated) {
  EXPECT_EQ(ShmSegment::open("nonsense", 0, true).status().code(), ncclInvalidArgument);
  EXPECT_EQ(ShmSegment::open("fd:abc", 0, true).status().code(), ncclInvalidArgument);
  EXPECT_FALSE(ShmSegment::open("shm:/theseus-does-not-exist", 0, true).isOk());
  // A real descriptor that is not the named memfd.
  std::string wrong = "fd:" + std::to_string(getpid()) + ":0:theseus-0000000000000001";
  auto r = ShmSegment::open(wrong, 0, true);
  EXPECT_FALSE(r.isOk());
}

TEST(ShmSegment, TooSmallSegmentIsRejected) {
  auto seg = ShmSegment::createMemfd("theseus-test-small", 4096);
  ASSERT_TRUE(seg.isOk());
  EXPECT_EQ(ShmSegment::open(seg.value()->locator(), 8192, true).status().code(), ncclRemoteError);
  EXPECT_TRUE(ShmSegment::open(seg.value()->locator(), 4096, true).isOk());
}

SharedRegionRef refOf(void* p, size_t bytes) {
  SharedRegionRef ref;
  EXPECT_TRUE(SharedMemoryRegistry::instance().find(p, bytes, &ref));
  return ref;
}

TEST(RegionCache, MapsOnceAndReadsThePeersBytes) {
  auto p = memAlloc(1 << 20);
  ASSERT_TRUE(p.isOk());
  char* base = static_cast<char*>(p.value());
  for (int i = 0; i < (1 << 20); ++i) base[i] = static_cast<char>(i * 13);
  RegionCache cache(4);
  SharedRegionRef ref = refOf(base + 4096, 1000);
  auto a = cache.pin(ref, 1000);
  ASSERT_TRUE(a.isOk()) << a.status().message();
  EXPECT_NE(a.value(), base + 4096);  // a second mapping of the same pages
  EXPECT_EQ(memcmp(a.value(), base + 4096, 1000), 0);
  base[5000] = 99;  // shared, not a copy
  EXPECT_EQ(a.value()[5000 - 4096], 99);
  auto b = cache.pin(refOf(base, 10), 10);
  ASSERT_TRUE(b.isOk());
  EXPECT_EQ(cache.misses(), 1u);
  cache.unpin(ref.pid, ref.id);
  cache.unpin(ref.pid, ref.id);
  EXPECT_EQ(cache.size(), 1u);
  // A range past the region's end is refused.
  ref.offset = (1 << 20) - 10;
  EXPECT_EQ(cache.pin(ref, 11).status().code(), ncclRemoteError);
  EXPECT_TRUE(memFree(p.value()).isOk());
}

TEST(RegionCache, EvictsLeastRecentlyUsedButNeverPinned) {
  void* regions[4];
  for (auto& r : regions) {
    auto p = memAlloc(4096);
    ASSERT_TRUE(p.isOk());
    r = p.value();
  }
  RegionCache cache(2);
  auto pinUnpin = [&](void* r) {
    SharedRegionRef ref = refOf(r, 1);
    ASSERT_TRUE(cache.pin(ref, 1).isOk());
    cache.unpin(ref.pid, ref.id);
  };
  pinUnpin(regions[0]);
  pinUnpin(regions[1]);
  pinUnpin(regions[0]);  // 0 is now the most recent
  pinUnpin(regions[2]);  // evicts 1
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.misses(), 3u);
  pinUnpin(regions[0]);  // still cached
  EXPECT_EQ(cache.misses(), 3u);
  pinUnpin(regions[1]);  // was evicted
  EXPECT_EQ(cache.misses(), 4u);

  // Pinned entries stay even beyond the bound.
  SharedRegionRef r0 = refOf(regions[0], 1), r2 = refOf(regions[2], 1), r3 = refOf(regions[3], 1);
  ASSERT_TRUE(cache.pin(r0, 1).isOk());
  ASSERT_TRUE(cache.pin(r2, 1).isOk());
  ASSERT_TRUE(cache.pin(r3, 1).isOk());
  EXPECT_EQ(cache.size(), 3u);
  cache.unpin(r0.pid, r0.id);
  cache.unpin(r2.pid, r2.id);
  EXPECT_EQ(cache.size(), 2u);
  cache.unpin(r3.pid, r3.id);
  for (void* r : regions) EXPECT_TRUE(memFree(r).isOk());
}

TEST(RegionCache, FreedRegionIsNeverConfusedWithANewOne) {
  auto p = memAlloc(4096);
  ASSERT_TRUE(p.isOk());
  SharedRegionRef old = refOf(p.value(), 4096);
  ASSERT_TRUE(memFree(p.value()).isOk());
  // The descriptor number is likely reused by the next allocation; the id is not.
  auto q = memAlloc(4096);
  ASSERT_TRUE(q.isOk());
  SharedRegionRef fresh = refOf(q.value(), 4096);
  EXPECT_NE(old.id, fresh.id);
  RegionCache cache(4);
  auto stale = cache.pin(old, 1);
  EXPECT_FALSE(stale.isOk());
  EXPECT_TRUE(cache.pin(fresh, 1).isOk());
  EXPECT_TRUE(memFree(q.value()).isOk());
}

TEST(RegionCache, RegionsTheOwnerFreedAreDroppedOnTheNextMiss) {
  auto a = memAlloc(1 << 20), b = memAlloc(1 << 20);
  ASSERT_TRUE(a.isOk() && b.isOk());
  RegionCache cache(8);
  SharedRegionRef ra = refOf(a.value(), 1), rb = refOf(b.value(), 1);
  ASSERT_TRUE(cache.pin(ra, 1).isOk());
  cache.unpin(ra.pid, ra.id);
  ASSERT_TRUE(cache.pin(rb, 1).isOk());  // stays pinned: never dropped while read
  EXPECT_EQ(cache.size(), 2u);
  ASSERT_TRUE(memFree(a.value()).isOk());
  ASSERT_TRUE(memFree(b.value()).isOk());
  auto c = memAlloc(4096);
  ASSERT_TRUE(c.isOk());
  ASSERT_TRUE(cache.pin(refOf(c.value(), 1), 1).isOk());
  EXPECT_EQ(cache.size(), 2u);  // a's mapping is gone, b's (pinned) and c's remain
  cache.unpin(rb.pid, rb.id);
  EXPECT_TRUE(memFree(c.value()).isOk());
}

}  // namespace
}  // namespace theseus::transport
