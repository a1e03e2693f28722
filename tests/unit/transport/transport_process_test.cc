// Two real processes (forked ranks) exchanging data through the transports.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "comm/mem_alloc.h"
#include "transport_test_util.h"

namespace theseus::testing {
namespace {

using transport::Kind;

constexpr size_t kTotal = size_t(256) << 20;

#define CHILD_CHECK(cond, ...)                                           \
  do {                                                                   \
    if (!(cond)) {                                                       \
      fprintf(stderr, "[rank %d] %s:%d: %s: ", rank, __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                      \
      fprintf(stderr, "\n");                                             \
      return 1;                                                          \
    }                                                                    \
  } while (0)

enum class Mode { kShmInline, kShmDirect, kSocket };

// Rank 0 streams kTotal bytes of a known pattern to rank 1, which checks every word.
int exchange(FakeWorld& world, int rank, Mode mode) {
  if (mode == Mode::kSocket) setenv("THESEUS_TRANSPORT", "socket", 1);
  if (mode == Mode::kSocket) setenv("THESEUS_SOCKET_NSOCKS", "2", 1);
  auto boot = world.bootstrap(rank);
  auto m = makeManager(*boot);
  CHILD_CHECK(m.isOk(), "%s", m.status().message().c_str());
  TransportManager& mgr = *m.value();
  Kind want = mode == Mode::kSocket ? Kind::kSocket : Kind::kShm;
  CHILD_CHECK(mgr.kindFor(1 - rank) == want, "kind %d", static_cast<int>(mgr.kindFor(1 - rank)));
  auto t0 = std::chrono::steady_clock::now();
  if (rank == 0) {
    SendConnection* s = mgr.sendConnection(1, 0).value();
    size_t chunk = mode == Mode::kShmDirect ? size_t(1) << 20 : s->slotBytes();
    void* src = nullptr;
    if (mode == Mode::kShmDirect) {
      auto p = comm::memAlloc(kTotal);
      CHILD_CHECK(p.isOk(), "%s", p.status().message().c_str());
      src = p.value();
      fillWords(src, kTotal, 7, 0);
      CHILD_CHECK(s->canSendDirect(src, kTotal), "ncclMemAlloc memory must be sendable in place");
      int onStack[4];
      CHILD_CHECK(!s->canSendDirect(onStack, sizeof(onStack)), "stack memory is not shared");
    }
    CHILD_CHECK(boot->barrier().isOk(), "barrier");
    t0 = std::chrono::steady_clock::now();
    uint64_t ticket = 0;
    for (size_t off = 0; off < kTotal; off += chunk) {
      size_t n = std::min(chunk, kTotal - off);
      SendSlot slot;
      Status st = acquireWithin(mgr, s, &slot, 30000);
      CHILD_CHECK(st.isOk(), "%s", st.message().c_str());
      if (mode == Mode::kShmDirect) {
        ticket = s->commitDirect(static_cast<char*>(src) + off, n, static_cast<uint32_t>(off / chunk));
      } else {
        fillWords(slot.data, n, 7, off);
        ticket = s->commitInline(n, static_cast<uint32_t>(off / chunk));
      }
    }
    Status st = consumedWithin(mgr, s, ticket, 30000);
    CHILD_CHECK(st.isOk(), "%s", st.message().c_str());
    if (src != nullptr) CHILD_CHECK(comm::memFree(src).isOk(), "memFree");
  } else {
    RecvConnection* c = mgr.recvConnection(0, 0).value();
    std::vector<char> dst(kTotal);
    CHILD_CHECK(boot->barrier().isOk(), "barrier");
    t0 = std::chrono::steady_clock::now();
    size_t got = 0;
    uint32_t expectTag = 0;
    while (got < kTotal) {
      RecvMessage msg;
      Status st = peekWithin(mgr, c, &msg, 30000);
      CHILD_CHECK(st.isOk(), "%s", st.message().c_str());
      CHILD_CHECK(msg.tag == expectTag, "tag %u, expected %u", msg.tag, expectTag);
      CHILD_CHECK(msg.direct == (mode == Mode::kShmDirect), "direct %d", msg.direct);
      CHILD_CHECK(msg.bytes > 0 && got + msg.bytes <= kTotal, "bytes %zu", msg.bytes);
      memcpy(dst.data() + got, msg.data, msg.bytes);
      got += msg.bytes;
      ++expectTag;
      c->release();
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHILD_CHECK(checkWords(dst.data(), kTotal, 7, 0), "payload differs from what was sent");
    auto stats = mgr.stats(0);
    CHILD_CHECK(stats.bytesReceived == kTotal, "stats say %llu bytes", (unsigned long long)stats.bytesReceived);
    printf("[rank 1] %s: 256 MiB in %.3f s (%.2f GB/s, incl. copy-out)\n",
           mode == Mode::kShmInline ? "shm inline" : mode == Mode::kShmDirect ? "shm direct" : "tcp 2 sockets", secs,
           kTotal / secs / 1e9);
  }
  CHILD_CHECK(boot->barrier().isOk(), "final barrier");
  return 0;
}

void expectAllZero(const std::vector<int>& codes) {
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

TEST(TransportProcesses, Exchange256MiBThroughShmInline) {
  auto world = FakeWorld::create(2);
  expectAllZero(runProcesses(2, [&](int r) { return exchange(*world, r, Mode::kShmInline); }));
}

TEST(TransportProcesses, Exchange256MiBThroughShmZeroCopy) {
  auto world = FakeWorld::create(2);
  expectAllZero(runProcesses(2, [&](int r) { return exchange(*world, r, Mode::kShmDirect); }));
}

TEST(TransportProcesses, Exchange256MiBThroughTcp) {
  auto world = FakeWorld::create(2);
  expectAllZero(runProcesses(2, [&](int r) { return exchange(*world, r, Mode::kSocket); }));
}

// One rank disables shm: the pair must agree on TCP (not hang with mismatched transports).
TEST(TransportProcesses, OneRankWithoutShmMakesThePairUseTcp) {
  auto world = FakeWorld::create(2);
  expectAllZero(runProcesses(2, [&](int rank) {
    if (rank == 1) setenv("NCCL_SHM_DISABLE", "1", 1);
    auto boot = world->bootstrap(rank);
    auto m = makeManager(*boot);
    CHILD_CHECK(m.isOk(), "%s", m.status().message().c_str());
    TransportManager& mgr = *m.value();
    CHILD_CHECK(mgr.kindFor(1 - rank) == Kind::kSocket, "kind %d", static_cast<int>(mgr.kindFor(1 - rank)));
    if (rank == 0) {
      SendConnection* s = mgr.sendConnection(1, 0).value();
      SendSlot slot;
      CHILD_CHECK(acquireWithin(mgr, s, &slot, 5000).isOk(), "acquire");
      fillPattern(slot.data, 999, 3, 0);
      s->commitInline(999, 3);
    } else {
      RecvConnection* c = mgr.recvConnection(0, 0).value();
      RecvMessage msg;
      Status st = peekWithin(mgr, c, &msg, 5000);
      CHILD_CHECK(st.isOk(), "%s", st.message().c_str());
      std::vector<unsigned char> expect(999);
      fillPattern(expect.data(), 999, 3, 0);
      CHILD_CHECK(msg.bytes == 999 && memcmp(msg.data, expect.data(), 999) == 0, "content");
      c->release();
    }
    CHILD_CHECK(boot->barrier().isOk(), "barrier");
    return 0;
  }));
}

// A local peer that dies is reported by the shm connections (not an endless wait).
TEST(TransportProcesses, ShmPeerDeathIsDetected) {
  auto world = FakeWorld::create(2);
  auto codes = runProcesses(2, [&](int rank) {
    auto boot = world->bootstrap(rank);
    auto m = makeManager(*boot);
    CHILD_CHECK(m.isOk(), "%s", m.status().message().c_str());
    TransportManager& mgr = *m.value();
    if (rank == 1) {
      (void)mgr.sendConnection(0, 0);
      CHILD_CHECK(boot->barrier().isOk(), "barrier");
      _exit(0);  // dies without sending
    }
    RecvConnection* c = mgr.recvConnection(0 + 1, 0).value();
    CHILD_CHECK(boot->barrier().isOk(), "barrier");
    auto t0 = std::chrono::steady_clock::now();
    RecvMessage msg;
    Status st = peekWithin(mgr, c, &msg, 20000);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHILD_CHECK(st.code() == ncclRemoteError, "%s", st.message().c_str());
    CHILD_CHECK(st.message().find("rank 1") != std::string::npos, "%s", st.message().c_str());
    CHILD_CHECK(secs < 5, "took %.1f s", secs);
    return 0;
  });
  expectAllZero(codes);
}

}  // namespace
}  // namespace theseus::testing
