// Which transport backend serves each peer: the first in order that can
// connect the pair (backend_order.h), named explicitly by tests and tools, and
// chosen the NCCL way otherwise (NCCL_SHM_DISABLE, NCCL_NET).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "transport_test_util.h"

namespace theseus::testing {
namespace {

using transport::Kind;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// One message each way between ranks 0 and 1 over whatever backend serves them.
void pingPong(TransportManager& mgr, int r) {
  int peer = 1 - r;
  auto s = mgr.sendConnection(peer, 0);
  auto c = mgr.recvConnection(peer, 0);
  ASSERT_TRUE(s.isOk()) << s.status().message();
  ASSERT_TRUE(c.isOk()) << c.status().message();
  SendSlot slot;
  ASSERT_TRUE(acquireWithin(mgr, s.value(), &slot, 10000).isOk());
  fillPattern(slot.data, 1000, r, 0);
  s.value()->commitInline(1000, 77);
  RecvMessage msg;
  ASSERT_TRUE(peekWithin(mgr, c.value(), &msg, 10000).isOk());
  std::vector<unsigned char> want(1000);
  fillPattern(want.data(), want.size(), peer, 0);
  ASSERT_EQ(msg.bytes, 1000u);
  EXPECT_EQ(memcmp(msg.data, want.data(), want.size()), 0);
  c.value()->release();
  ASSERT_TRUE(consumedWithin(mgr, s.value(), 1, 10000).isOk());
}

// Every rank of `world` talks to its peer over TCP, with the configured backends.
void expectSocketBetweenTwoRanks(FakeWorld& world, const std::string& net = "") {
  runThreads(2, [&](int r) {
    auto boot = world.bootstrap(r);
    auto m = makeManager(*boot, 1, {}, net);
    ASSERT_TRUE(m.isOk()) << m.status().message();
    EXPECT_EQ(m.value()->kindFor(1 - r), Kind::kSocket);
    pingPong(*m.value(), r);
    EXPECT_TRUE(boot->barrier().isOk());
  });
}

TEST(BackendSelection, DefaultOrderIsShmOnOneHostAndSocketBetweenHosts) {
  auto world = FakeWorld::create(3, {7, 7, 8});
  runThreads(3, [&](int r) {
    auto boot = world->bootstrap(r);
    auto m = makeManager(*boot);
    ASSERT_TRUE(m.isOk()) << m.status().message();
    const Kind want[3][3] = {{Kind::kSocket, Kind::kShm, Kind::kSocket},
                             {Kind::kShm, Kind::kSocket, Kind::kSocket},
                             {Kind::kSocket, Kind::kSocket, Kind::kSocket}};
    for (int p = 0; p < 3; ++p) {
      if (p != r) {
        EXPECT_EQ(m.value()->kindFor(p), want[r][p]) << "rank " << r << " peer " << p;
      }
    }
    EXPECT_TRUE(boot->barrier().isOk());
  });
}

TEST(BackendSelection, TestsNameTheBackendsExplicitly) {
  auto world = FakeWorld::create(2);  // one host: shm would serve by default
  runThreads(2, [&](int r) {
    auto boot = world->bootstrap(r);
    auto m = makeManager(*boot, 1, {"socket"});
    ASSERT_TRUE(m.isOk()) << m.status().message();
    EXPECT_EQ(m.value()->kindFor(1 - r), Kind::kSocket);
    pingPong(*m.value(), r);
    EXPECT_TRUE(boot->barrier().isOk());
  });
  runThreads(2, [&](int r) {
    auto boot = world->bootstrap(r);
    auto m = makeManager(*boot, 1, {"shm", "socket"});
    ASSERT_TRUE(m.isOk()) << m.status().message();
    EXPECT_EQ(m.value()->kindFor(1 - r), Kind::kShm);
    pingPong(*m.value(), r);
    EXPECT_TRUE(boot->barrier().isOk());
  });
}

TEST(BackendSelection, APeerNoBackendReachesFailsWhenConnected) {
  auto world = FakeWorld::create(2, {1, 2});  // two hosts, shared memory only
  runThreads(2, [&](int r) {
    auto boot = world->bootstrap(r);
    auto m = makeManager(*boot, 1, {"shm"});
    ASSERT_TRUE(m.isOk()) << m.status().message();
    auto s = m.value()->sendConnection(1 - r, 0);
    ASSERT_FALSE(s.isOk());
    EXPECT_TRUE(contains(s.status().message(), "no transport backend connects rank")) << s.status().message();
    EXPECT_TRUE(contains(s.status().message(), "backends: shm")) << s.status().message();
  });
}

TEST(BackendSelection, UnknownBackendNameIsAnError) {
  auto world = FakeWorld::create(1);
  auto boot = world->bootstrap(0);
  auto m = makeManager(*boot, 1, {"carrier-pigeon"});
  ASSERT_FALSE(m.isOk());
  EXPECT_TRUE(contains(m.status().message(), "transport backend 'carrier-pigeon' does not exist"))
      << m.status().message();
}

// The network by NCCL's name: ncclConfig_t.netName, which NCCL_NET overrides (comm/config.cc).
TEST(BackendSelection, NcclNetPicksANetworkByNcclsName) {
  auto world = FakeWorld::create(2, {1, 2});
  expectSocketBetweenTwoRanks(*world, "socket");  // NCCL compares names case-insensitively
  runThreads(2, [&](int r) {
    auto boot = world->bootstrap(r);
    auto m = makeManager(*boot, 1, {}, "Verbs");
    ASSERT_FALSE(m.isOk());
    EXPECT_TRUE(contains(m.status().message(),
                         "NCCL_NET/netName 'Verbs': no such network in Theseus (available: IB, Socket)"))
        << m.status().message();
    EXPECT_EQ(m.status().code(), ncclInvalidUsage);
  });
}

TEST(BackendSelection, NcclShmDisableMovesLocalPeersToTheNetwork) {
  EnvGuard g("NCCL_SHM_DISABLE", "1");
  auto world = FakeWorld::create(2);
  expectSocketBetweenTwoRanks(*world);
}

}  // namespace
}  // namespace theseus::testing
