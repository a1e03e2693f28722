// Integration: the transports over the real TCP bootstrap (not the fake), with
// forked processes as ranks: shm between ranks of this host, and TCP when
// forced, including the connectTo/acceptFrom parking path in both orders.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>

#include <cstdio>

#include "bootstrap/bootstrap.h"
#include "transport_test_util.h"

namespace theseus::testing {
namespace {

using transport::Kind;

#define CHILD_CHECK(cond, ...)                                                   \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "[rank %d] %s:%d: %s: ", rank, __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                              \
      fprintf(stderr, "\n");                                                     \
      return 1;                                                                  \
    }                                                                            \
  } while (0)

// Every rank sends one message to every other rank (receivers asking first on
// odd ranks) and checks what it gets.
int allToAll(const ncclUniqueId& id, int rank, int nranks, bool socket) {
  if (socket) setenv("THESEUS_TRANSPORT", "socket", 1);
  bootstrap::InitOptions io;
  io.timeoutMs = 30000;
  auto boot = bootstrap::createFromUniqueIds(&id, 1, rank, nranks, io);
  CHILD_CHECK(boot.isOk(), "%s", boot.status().message().c_str());
  auto m = makeManager(*boot.value());
  CHILD_CHECK(m.isOk(), "%s", m.status().message().c_str());
  TransportManager& mgr = *m.value();
  for (int p = 0; p < nranks; ++p)
    if (p != rank) CHILD_CHECK(mgr.kindFor(p) == (socket ? Kind::kSocket : Kind::kShm), "kind of %d", p);
  std::vector<RecvConnection*> in(nranks, nullptr);
  if (rank % 2 == 1)
    for (int p = 0; p < nranks; ++p)
      if (p != rank) in[p] = mgr.recvConnection(p, 0).value();
  for (int p = 0; p < nranks; ++p) {
    if (p == rank) continue;
    auto s = mgr.sendConnection(p, 0);
    CHILD_CHECK(s.isOk(), "%s", s.status().message().c_str());
    SendSlot slot;
    Status st = acquireWithin(mgr, s.value(), &slot, 20000);
    CHILD_CHECK(st.isOk(), "%s", st.message().c_str());
    fillPattern(slot.data, 5000, rank * 100 + p, 0);
    s.value()->commitInline(5000, rank);
  }
  for (int p = 0; p < nranks; ++p) {
    if (p == rank) continue;
    if (in[p] == nullptr) in[p] = mgr.recvConnection(p, 0).value();
    RecvMessage msg;
    Status st = peekWithin(mgr, in[p], &msg, 20000);
    CHILD_CHECK(st.isOk(), "%s", st.message().c_str());
    std::vector<unsigned char> expect(5000);
    fillPattern(expect.data(), 5000, p * 100 + rank, 0);
    CHILD_CHECK(msg.tag == static_cast<uint32_t>(p) && msg.bytes == 5000, "tag %u bytes %zu", msg.tag, msg.bytes);
    CHILD_CHECK(memcmp(msg.data, expect.data(), 5000) == 0, "payload from rank %d", p);
    in[p]->release();
  }
  CHILD_CHECK(boot.value()->barrier().isOk(), "barrier");
  m.value().reset();
  boot.value()->close();
  return 0;
}

// Rank 0 makes the unique id (its root listener is a thread, and this test
// process must stay single-threaded to fork) and hands it to the others.
struct IdBox {
  std::atomic<int> ready{0};
  ncclUniqueId id;
};

int rankMain(IdBox* box, int rank, int nranks, bool socket) {
  if (rank == 0) {
    Status st = bootstrap::createUniqueId(&box->id);
    CHILD_CHECK(st.isOk(), "%s", st.message().c_str());
    box->ready.store(st.isOk() ? 1 : -1, std::memory_order_release);
  }
  Deadline d = Deadline::afterMs(30000);
  while (box->ready.load(std::memory_order_acquire) == 0 && !d.expired()) usleep(1000);
  CHILD_CHECK(box->ready.load() == 1, "no unique id from rank 0");
  return allToAll(box->id, rank, nranks, socket);
}

void runAllToAll(int nranks, bool socket) {
  void* mem = mmap(nullptr, sizeof(IdBox), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* box = new (mem) IdBox();
  auto codes = runProcesses(nranks, [&](int r) { return rankMain(box, r, nranks, socket); }, 90);
  for (int r = 0; r < nranks; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
  munmap(mem, sizeof(IdBox));
}

TEST(TransportsOverRealBootstrap, ShmAllToAllFourRanks) { runAllToAll(4, false); }
TEST(TransportsOverRealBootstrap, TcpAllToAllFourRanks) { runAllToAll(4, true); }

}  // namespace
}  // namespace theseus::testing
