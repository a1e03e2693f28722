// TCP socket transport, ranks as threads of this process (THESEUS_TRANSPORT=socket
// or different emulated hosts).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "transport/socket/socket_transport.h"
#include "transport_test_util.h"

namespace theseus::testing {
namespace {

using transport::Kind;

double secondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Two ranks on two emulated hosts: TCP without any environment change.
const std::vector<uint64_t> kTwoHosts = {1, 2};

void streamMessages(int nsocks, int messages, size_t maxBytes) {
  std::string ns = std::to_string(nsocks);
  EnvGuard a("THESEUS_SOCKET_NSOCKS", ns.c_str());
  EnvGuard b("THESEUS_SOCKET_STRIPE_MIN_BYTES", "64K");
  EnvGuard c("THESEUS_SOCKET_SLOTS", "4");
  EnvGuard d("THESEUS_SOCKET_SLOT_BYTES", "512K");
  auto world = FakeWorld::create(2, kTwoHosts);
  ASSERT_NE(world, nullptr);
  runThreads(2, [&](int r) {
    auto boot = world->bootstrap(r);
    auto m = makeManager(*boot);
    ASSERT_TRUE(m.isOk()) << m.status().message();
    TransportManager& mgr = *m.value();
    EXPECT_EQ(mgr.kindFor(1 - r), Kind::kSocket);
    if (r == 0) {
      auto s = mgr.sendConnection(1, 0);
      ASSERT_TRUE(s.isOk()) << s.status().message();
      EXPECT_EQ(s.value()->kind(), Kind::kSocket);
      EXPECT_FALSE(s.value()->canSendDirect(&mgr, 8));
      for (int i = 0; i < messages; ++i) {
        SendSlot slot;
        ASSERT_TRUE(acquireWithin(mgr, s.value(), &slot, 10000).isOk()) << i;
        size_t bytes = (static_cast<size_t>(i) * 104729) % (maxBytes + 1);
        if (i % 7 == 0) bytes = maxBytes;
        fillPattern(slot.data, bytes, i, 0);
        s.value()->commitInline(bytes, 1000 + i);
      }
      ASSERT_TRUE(consumedWithin(mgr, s.value(), messages, 10000).isOk());
    } else {
      auto c = mgr.recvConnection(0, 0);
      ASSERT_TRUE(c.isOk());
      std::vector<unsigned char> expect(maxBytes);
      for (int i = 0; i < messages; ++i) {
        RecvMessage msg;
        Status st = peekWithin(mgr, c.value(), &msg, 10000);
        ASSERT_TRUE(st.isOk()) << st.message();
        size_t bytes = (static_cast<size_t>(i) * 104729) % (maxBytes + 1);
        if (i % 7 == 0) bytes = maxBytes;
        ASSERT_EQ(msg.bytes, bytes) << i;
        ASSERT_EQ(msg.tag, 1000u + i);
        fillPattern(expect.data(), bytes, i, 0);
        ASSERT_EQ(memcmp(msg.data, expect.data(), bytes), 0) << "message " << i;
        c.value()->release();
      }
      auto st = mgr.stats(0);
      EXPECT_EQ(st.messagesReceived, static_cast<uint64_t>(messages));
    }
    EXPECT_TRUE(boot->barrier().isOk());
  });
}

TEST(SocketTransport, OneSocketKeepsOrderAndContent) { streamMessages(1, 200, 512 << 10); }
TEST(SocketTransport, FourSocketsStripeLargeMessages) { streamMessages(4, 200, 512 << 10); }

TEST(SocketTransport, ForcedByEnvironmentOnOneHost) {
  EnvGuard g("THESEUS_TRANSPORT", "socket");
  auto world = FakeWorld::create(2);
  runThreads(2, [&](int r) {
    auto boot = world->bootstrap(r);
    auto m = makeManager(*boot);
    ASSERT_TRUE(m.isOk());
    EXPECT_EQ(m.value()->kindFor(1 - r), Kind::kSocket);
  });
  EnvGuard d("THESEUS_TRANSPORT", nullptr);
  EnvGuard e("NCCL_SHM_DISABLE", "1");
  runThreads(2, [&](int r) {
    auto boot = world->bootstrap(r);
    auto m = makeManager(*boot);
    ASSERT_TRUE(m.isOk());
    EXPECT_EQ(m.value()->kindFor(1 - r), Kind::kSocket);
  });
}

// The receiver asks first and the sender only connects 200 ms later: nothing blocks.
TEST(SocketTransport, ReceiverMayAskBeforeSenderConnects) {
  auto world = FakeWorld::create(2, kTwoHosts);
  runThreads(2, [&](int r) {
    auto boot = world->bootstrap(r);
    auto m = makeManager(*boot);
    ASSERT_TRUE(m.isOk());
    TransportManager& mgr = *m.value();
    if (r == 1) {
      auto t0 = std::chrono::steady_clock::now();
      auto c = mgr.recvConnection(0, 0);
      ASSERT_TRUE(c.isOk());
      EXPECT_LT(secondsSince(t0), 0.1);  // returned at once
      RecvMessage msg;
      EXPECT_FALSE(c.value()->tryPeek(&msg));
      EXPECT_TRUE(c.value()->progress().isOk());
      ASSERT_TRUE(peekWithin(mgr, c.value(), &msg, 10000).isOk());
      EXPECT_EQ(msg.tag, 5u);
      c.value()->release();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      SendConnection* s = mgr.sendConnection(1, 0).value();
      SendSlot slot;
      ASSERT_TRUE(acquireWithin(mgr, s, &slot, 5000).isOk());
      s->commitInline(16, 5);
    }
    EXPECT_TRUE(boot->barrier().isOk());
  });
}

TEST(SocketTransport, PeerDeathIsARemoteErrorNotAHang) {
  auto world = FakeWorld::create(2, kTwoHosts);
  runThreads(2, [&](int r) {
    auto boot = world->bootstrap(r);
    auto m = makeManager(*boot);
    ASSERT_TRUE(m.isOk());
    if (r == 1) {
      SendConnection* s = m.value()->sendConnection(0, 0).value();
      for (int i = 0; i < 3; ++i) {
        SendSlot slot;
        ASSERT_TRUE(acquireWithin(*m.value(), s, &slot, 5000).isOk());
        s->commitInline(100, i);
      }
      ASSERT_TRUE(consumedWithin(*m.value(), s, 3, 5000).isOk());
      m.value().reset();  // "dies": its sockets close
      EXPECT_TRUE(boot->barrier().isOk());
      return;
    }
    TransportManager& mgr = *m.value();
    RecvConnection* c = mgr.recvConnection(1, 0).value();
    EXPECT_TRUE(boot->barrier().isOk());
    // Messages sent before the death are still delivered...
    for (uint32_t i = 0; i < 3; ++i) {
      RecvMessage msg;
      ASSERT_TRUE(peekWithin(mgr, c, &msg, 5000).isOk());
      EXPECT_EQ(msg.tag, i);
      c->release();
    }
    // ...then the next wait fails fast, naming the peer.
    auto t0 = std::chrono::steady_clock::now();
    RecvMessage msg;
    Status st = peekWithin(mgr, c, &msg, 20000);
    EXPECT_LT(secondsSince(t0), 5.0);
    EXPECT_EQ(st.code(), ncclRemoteError) << st.message();
    EXPECT_NE(st.message().find("rank 1"), std::string::npos) << st.message();
  });
}

// A collective completes once its messages are queued: destroying the sender
// right after must still deliver them (the connection flushes before closing).
// With several sockets the receiver may see EOF on socket 0 while parts of the
// last messages are still in flight on the others: they must still arrive.
void flushThenClose(const char* nsocks) {
  EnvGuard g("THESEUS_SOCKET_SLOTS", "16");
  EnvGuard n("THESEUS_SOCKET_NSOCKS", nsocks);
  EnvGuard m("THESEUS_SOCKET_STRIPE_MIN_BYTES", "64K");
  EnvGuard b("THESEUS_SOCKET_SLOT_BYTES", "512K");
  auto world = FakeWorld::create(2, kTwoHosts);
  constexpr int kMessages = 16;
  std::atomic<bool> destroying{false};
  runThreads(2, [&](int r) {
    auto boot = world->bootstrap(r);
    auto m = makeManager(*boot);
    ASSERT_TRUE(m.isOk());
    if (r == 0) {
      SendConnection* s = m.value()->sendConnection(1, 0).value();
      for (int i = 0; i < kMessages; ++i) {
        SendSlot slot;
        ASSERT_TRUE(s->tryAcquire(&slot));
        fillPattern(slot.data, s->slotBytes(), i, 0);
        s->commitInline(s->slotBytes(), i);
      }
      // Nobody reads yet: 8 MiB do not fit in one socket's kernel buffers (four may take them).
      if (std::string(nsocks) == "1") {
        EXPECT_FALSE(s->consumed(kMessages));
      }
      destroying.store(true);
      m.value().reset();
      EXPECT_TRUE(boot->barrier().isOk());
      return;
    }
    // Start reading only once the sender is being destroyed: 8 MiB do not fit in
    // the kernel's socket buffers, so its destruction has to wait for us.
    while (!destroying.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    RecvConnection* c = m.value()->recvConnection(0, 0).value();
    std::vector<unsigned char> expect(512 << 10);
    for (int i = 0; i < kMessages; ++i) {
      RecvMessage msg;
      Status st = peekWithin(*m.value(), c, &msg, 10000);
      ASSERT_TRUE(st.isOk()) << i << ": " << st.message();
      fillPattern(expect.data(), expect.size(), i, 0);
      ASSERT_EQ(msg.bytes, expect.size());
      ASSERT_EQ(memcmp(msg.data, expect.data(), expect.size()), 0) << i;
      c->release();
    }
    // Everything arrived; asking for more now reports the closed connection.
    RecvMessage more;
    Status st = peekWithin(*m.value(), c, &more, 5000);
    EXPECT_EQ(st.code(), ncclRemoteError) << st.message();
    EXPECT_TRUE(boot->barrier().isOk());
  });
}

TEST(SocketTransport, DestroyFlushesQueuedMessages) { flushThenClose("1"); }
TEST(SocketTransport, DestroyFlushesQueuedStripedMessages) { flushThenClose("4"); }

TEST(SocketTransport, SendingToADeadPeerFails) {
  auto world = FakeWorld::create(2, kTwoHosts);
  runThreads(2, [&](int r) {
    auto boot = world->bootstrap(r);
    auto m = makeManager(*boot);
    ASSERT_TRUE(m.isOk());
    if (r == 1) {
      RecvConnection* c = m.value()->recvConnection(0, 0).value();
      RecvMessage msg;
      ASSERT_TRUE(peekWithin(*m.value(), c, &msg, 5000).isOk());  // connected
      m.value().reset();
      EXPECT_TRUE(boot->barrier().isOk());
      return;
    }
    TransportManager& mgr = *m.value();
    SendConnection* s = mgr.sendConnection(1, 0).value();
    SendSlot slot;
    ASSERT_TRUE(s->tryAcquire(&slot));
    s->commitInline(8, 0);
    EXPECT_TRUE(boot->barrier().isOk());
    Status st;
    Deadline d = Deadline::afterMs(20000);
    while (st.isOk() && !d.expired()) {
      st = acquireWithin(mgr, s, &slot, 100);
      if (st.isOk()) s->commitInline(s->slotBytes(), 1);
      else if (st.message().find("no free slot") != std::string::npos) st = s->progress();
    }
    EXPECT_EQ(st.code(), ncclRemoteError) << st.message();
    EXPECT_NE(st.message().find("rank 1"), std::string::npos) << st.message();
  });
}

// Writes `bytes` on a raw data connection that pretends to be rank 1's.
void rawConnection(bootstrap::Bootstrap& boot, const void* bytes, size_t n) {
  auto fd = boot.connectTo(0, transport::socketTag(0, 0), Deadline::afterMs(5000));
  ASSERT_TRUE(fd.isOk());
  ASSERT_EQ(write(fd.value(), bytes, n), static_cast<ssize_t>(n));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let the receiver read before EOF
  close(fd.value());
}

Status receiveGarbage(const void* bytes, size_t n) {
  auto world = FakeWorld::create(2, kTwoHosts);
  Status result;
  runThreads(2, [&](int r) {
    auto boot = world->bootstrap(r);
    auto m = makeManager(*boot);
    ASSERT_TRUE(m.isOk());
    if (r == 1) {
      rawConnection(*boot, bytes, n);
    } else {
      RecvConnection* c = m.value()->recvConnection(1, 0).value();
      RecvMessage msg;
      result = peekWithin(*m.value(), c, &msg, 10000);
    }
    EXPECT_TRUE(boot->barrier().isOk());
  });
  return result;
}

transport::wire::Hello goodHello() {
  return {transport::wire::kHelloMagic, transport::wire::kVersion, 1, 0, 0, 1, 0, 64 << 10, 1 << 20};
}

TEST(SocketTransport, GarbageHelloIsRejected) {
  char junk[48];
  memset(junk, 0x5a, sizeof(junk));
  Status st = receiveGarbage(junk, sizeof(junk));
  EXPECT_EQ(st.code(), ncclRemoteError) << st.message();
  EXPECT_NE(st.message().find("hello"), std::string::npos) << st.message();

  auto h = goodHello();
  h.slotBytes = uint64_t(1) << 40;  // absurd slot size: refused, not allocated
  st = receiveGarbage(&h, sizeof(h));
  EXPECT_EQ(st.code(), ncclRemoteError) << st.message();
}

TEST(SocketTransport, GarbageMessageHeaderIsRejected) {
  struct {
    transport::wire::Hello hello;
    transport::wire::MessageHeader header;
  } bad{goodHello(), {0xdeadbeef, 1, 10}};
  Status st = receiveGarbage(&bad, sizeof(bad));
  EXPECT_EQ(st.code(), ncclRemoteError) << st.message();
  EXPECT_NE(st.message().find("malformed"), std::string::npos) << st.message();

  bad.header = {transport::wire::kMessageMagic, 1, (64 << 10) + 1};  // larger than the slots
  st = receiveGarbage(&bad, sizeof(bad));
  EXPECT_EQ(st.code(), ncclRemoteError) << st.message();
  EXPECT_NE(st.message().find("malformed"), std::string::npos) << st.message();
}

TEST(SocketTransport, TruncatedMessageIsAnError) {
  struct {
    transport::wire::Hello hello;
    transport::wire::MessageHeader header;
    char part[100];
  } bad{goodHello(), {transport::wire::kMessageMagic, 1, 1000}, {}};
  Status st = receiveGarbage(&bad, sizeof(bad));
  EXPECT_EQ(st.code(), ncclRemoteError) << st.message();
  EXPECT_NE(st.message().find("closed"), std::string::npos) << st.message();
}

// prepare() waits for the peers' connections up to the connect timeout and names the missing ones.
TEST(SocketTransport, PrepareWithoutThePeerTimesOut) {
  EnvGuard g("THESEUS_CONNECT_TIMEOUT_MS", "300");
  auto world = FakeWorld::create(2, kTwoHosts);
  runThreads(2, [&](int r) {
    auto boot = world->bootstrap(r);
    auto m = makeManager(*boot);
    ASSERT_TRUE(m.isOk());
    if (r == 0) {
      auto t0 = std::chrono::steady_clock::now();
      Status st = m.value()->prepare({1}, 1);
      EXPECT_LT(secondsSince(t0), 3.0);
      EXPECT_EQ(st.code(), ncclRemoteError);
      EXPECT_NE(st.message().find("no TCP connection from rank 1 channel 0"), std::string::npos) << st.message();
    }
    EXPECT_TRUE(boot->barrier().isOk());
  });
}

// A lazy receive from a peer that never sends just reports "nothing yet" (the
// executor's stall timeout owns that wait), and tearing it down does not hang.
TEST(SocketTransport, LazyReceiveFromASilentPeerIsCancelledOnDestroy) {
  auto world = FakeWorld::create(2, kTwoHosts);
  runThreads(2, [&](int r) {
    auto boot = world->bootstrap(r);
    auto m = makeManager(*boot);
    ASSERT_TRUE(m.isOk());
    if (r == 0) {
      RecvConnection* c = m.value()->recvConnection(1, 0).value();
      RecvMessage msg;
      Status st = peekWithin(*m.value(), c, &msg, 300);
      EXPECT_NE(st.message().find("no message from rank 1"), std::string::npos) << st.message();
      auto t0 = std::chrono::steady_clock::now();
      m.value().reset();
      EXPECT_LT(secondsSince(t0), 2.0);
    }
    EXPECT_TRUE(boot->barrier().isOk());
  });
}

TEST(SocketTransport, WaitTimesOutAndWakesOnData) {
  auto world = FakeWorld::create(2, kTwoHosts);
  runThreads(2, [&](int r) {
    auto boot = world->bootstrap(r);
    auto m = makeManager(*boot);
    ASSERT_TRUE(m.isOk());
    TransportManager& mgr = *m.value();
    EXPECT_TRUE(mgr.prepare({1 - r}, 1).isOk());
    if (r == 1) {
      RecvConnection* c = mgr.recvConnection(0, 0).value();
      RecvMessage msg;
      EXPECT_FALSE(c->tryPeek(&msg));
      uint64_t token = mgr.activityToken();
      auto t0 = std::chrono::steady_clock::now();
      mgr.waitForActivity(token, 60000);
      EXPECT_GE(secondsSince(t0), 0.055);
      EXPECT_LT(secondsSince(t0), 2.0);
      ASSERT_TRUE(boot->barrier().isOk());
      t0 = std::chrono::steady_clock::now();
      while (!c->tryPeek(&msg) && secondsSince(t0) < 10) mgr.waitForActivity(mgr.activityToken(), 10000000);
      EXPECT_LT(secondsSince(t0), 5.0);
      EXPECT_EQ(msg.tag, 9u);
      c->release();
    } else {
      SendConnection* s = mgr.sendConnection(1, 0).value();
      ASSERT_TRUE(boot->barrier().isOk());
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      SendSlot slot;
      ASSERT_TRUE(s->tryAcquire(&slot));
      s->commitInline(4, 9);
    }
    EXPECT_TRUE(boot->barrier().isOk());
  });
}

// Three ranks, two hosts: 0 -> 1 over shm, 1 -> 2 and 2 -> 0 over TCP, with waits mixing both.
TEST(MixedTransports, RingAcrossShmAndSockets) {
  auto world = FakeWorld::create(3, {1, 1, 2});
  constexpr int kRounds = 50;
  runThreads(3, [&](int r) {
    auto boot = world->bootstrap(r);
    auto m = makeManager(*boot);
    ASSERT_TRUE(m.isOk());
    TransportManager& mgr = *m.value();
    int next = (r + 1) % 3, prev = (r + 2) % 3;
    EXPECT_EQ(mgr.kindFor(next), r == 0 ? Kind::kShm : Kind::kSocket);
    SendConnection* s = mgr.sendConnection(next, 0).value();
    RecvConnection* c = mgr.recvConnection(prev, 0).value();
    // A token ring: rank 0 sends first; the others forward what they got.
    auto send = [&](int i) {
      SendSlot slot;
      ASSERT_TRUE(acquireWithin(mgr, s, &slot, 10000).isOk());
      fillPattern(slot.data, 4000, i * 3 + r, 0);
      s->commitInline(4000, i);
    };
    auto recv = [&](int i) {
      RecvMessage msg;
      Status st = peekWithin(mgr, c, &msg, 10000);
      ASSERT_TRUE(st.isOk()) << st.message();
      EXPECT_EQ(msg.tag, static_cast<uint32_t>(i));
      std::vector<unsigned char> expect(4000);
      fillPattern(expect.data(), 4000, i * 3 + prev, 0);
      EXPECT_EQ(memcmp(expect.data(), msg.data, 4000), 0) << "rank " << r << " round " << i;
      c->release();
    };
    for (int i = 0; i < kRounds; ++i) {
      if (r == 0) {
        send(i);
        recv(i);
      } else {
        recv(i);
        send(i);
      }
    }
    EXPECT_TRUE(boot->barrier().isOk());
  });
}

}  // namespace
}  // namespace theseus::testing
