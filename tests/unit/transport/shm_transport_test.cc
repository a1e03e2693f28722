// Shared-memory transport, ranks as threads of this process (same host).
#include <gtest/gtest.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <vector>

#include "transport/shared_memory_registry.h"
#include "transport/transport_config.h"
#include "transport_test_util.h"

namespace theseus::testing {
namespace {

using transport::Kind;
using transport::TransportOptions;

// Runs body(rank, manager, bootstrap) on `n` threads; managers are created
// concurrently (their set-up is collective) and destroyed after a final barrier.
void withManagers(int n, const std::function<void(int, TransportManager&, bootstrap::Bootstrap&)>& body,
                  std::vector<uint64_t> hosts = {}, int channels = 1) {
  auto world = FakeWorld::create(n, hosts);
  ASSERT_NE(world, nullptr);
  runThreads(n, [&](int r) {
    auto boot = world->bootstrap(r);
    auto m = makeManager(*boot, channels);
    ASSERT_TRUE(m.isOk()) << m.status().message();
    body(r, *m.value(), *boot);
    EXPECT_TRUE(boot->barrier().isOk());
  });
}

double secondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

TEST(ShmTransport, KindsFollowHosts) {
  withManagers(
      3,
      [](int r, TransportManager& m, bootstrap::Bootstrap&) {
        if (r == 0) {
          EXPECT_EQ(m.kindFor(1), Kind::kShm);
          EXPECT_EQ(m.kindFor(2), Kind::kSocket);
        }
        if (r == 2) {
          EXPECT_EQ(m.kindFor(0), Kind::kSocket);
          EXPECT_EQ(m.kindFor(1), Kind::kSocket);
        }
      },
      {7, 7, 9});
}

TEST(ShmTransport, FifoKeepsOrderTagsAndSizes) {
  constexpr int kMessages = 300;
  withManagers(2, [&](int r, TransportManager& m, bootstrap::Bootstrap&) {
    if (r == 0) {
      auto c = m.sendConnection(1, 0);
      ASSERT_TRUE(c.isOk()) << c.status().message();
      SendConnection* s = c.value();
      EXPECT_EQ(s->kind(), Kind::kShm);
      EXPECT_EQ(s->peer(), 1);
      for (int i = 0; i < kMessages; ++i) {
        SendSlot slot;
        ASSERT_TRUE(acquireWithin(m, s, &slot, 10000).isOk());
        ASSERT_EQ(slot.capacity, s->slotBytes());
        size_t bytes = (static_cast<size_t>(i) * 7919) % (s->slotBytes() + 1);
        fillPattern(slot.data, bytes, i, 0);
        EXPECT_EQ(s->commitInline(bytes, 0xabc00000u + i), static_cast<uint64_t>(i + 1));
      }
    } else {
      auto c = m.recvConnection(0, 0);
      ASSERT_TRUE(c.isOk()) << c.status().message();
      size_t slotBytes = transport::readTransportConfig().value().shmSlotBytes;
      std::vector<unsigned char> expect(slotBytes);
      for (int i = 0; i < kMessages; ++i) {
        RecvMessage msg;
        ASSERT_TRUE(peekWithin(m, c.value(), &msg, 10000).isOk()) << i;
        size_t bytes = (static_cast<size_t>(i) * 7919) % (slotBytes + 1);
        ASSERT_EQ(msg.bytes, bytes) << i;
        ASSERT_EQ(msg.tag, 0xabc00000u + i);
        ASSERT_FALSE(msg.direct);
        fillPattern(expect.data(), bytes, i, 0);
        ASSERT_EQ(memcmp(msg.data, expect.data(), bytes), 0) << "message " << i;
        c.value()->release();
      }
      RecvMessage none;
      EXPECT_FALSE(c.value()->tryPeek(&none));
    }
  });
}

TEST(ShmTransport, FullFifoBackPressure) {
  EnvGuard slots("THESEUS_SHM_SLOTS", "4");
  withManagers(2, [&](int r, TransportManager& m, bootstrap::Bootstrap& boot) {
    if (r == 0) {
      SendConnection* s = m.sendConnection(1, 0).value();
      SendSlot a, b;
      ASSERT_TRUE(s->tryAcquire(&a));
      ASSERT_TRUE(s->tryAcquire(&b));  // again before commit: the same slot
      EXPECT_EQ(a.data, b.data);
      int sent = 0;
      SendSlot slot;
      while (s->tryAcquire(&slot)) s->commitInline(8, static_cast<uint32_t>(sent++));
      EXPECT_EQ(sent, 4);
      EXPECT_FALSE(s->consumed(1));
      ASSERT_TRUE(boot.barrier().isOk());  // receiver releases one
      ASSERT_TRUE(boot.barrier().isOk());
      EXPECT_TRUE(s->consumed(1));
      EXPECT_FALSE(s->consumed(2));
      ASSERT_TRUE(s->tryAcquire(&slot));
      s->commitInline(8, 4);
      EXPECT_FALSE(s->tryAcquire(&slot));
      ASSERT_TRUE(boot.barrier().isOk());  // now the receiver drains the rest
    } else {
      RecvConnection* c = m.recvConnection(0, 0).value();
      ASSERT_TRUE(boot.barrier().isOk());
      RecvMessage msg;
      ASSERT_TRUE(c->tryPeek(&msg));
      EXPECT_EQ(msg.tag, 0u);
      c->release();
      ASSERT_TRUE(boot.barrier().isOk());
      ASSERT_TRUE(boot.barrier().isOk());
      for (uint32_t t = 1; t <= 4; ++t) {
        ASSERT_TRUE(peekWithin(m, c, &msg, 5000).isOk());
        EXPECT_EQ(msg.tag, t);
        c->release();
      }
    }
  });
}

TEST(ShmTransport, DirectMessagesAndTickets) {
  withManagers(2, [&](int r, TransportManager& m, bootstrap::Bootstrap& boot) {
    static std::vector<uint64_t> buffer(1 << 16);
    if (r == 0) {
      fillWords(buffer.data(), buffer.size() * 8, 42, 0);
      SendConnection* s = m.sendConnection(1, 0).value();
      // Same process: any memory can be read in place.
      ASSERT_TRUE(s->canSendDirect(buffer.data(), buffer.size() * 8));
      uint64_t t1 = 0, t2 = 0;
      SendSlot slot;
      ASSERT_TRUE(acquireWithin(m, s, &slot, 5000).isOk());
      t1 = s->commitDirect(buffer.data(), 4096, 1);
      ASSERT_TRUE(acquireWithin(m, s, &slot, 5000).isOk());
      t2 = s->commitDirect(buffer.data() + 512, buffer.size() * 8 - 4096, 2);
      EXPECT_EQ(t1, 1u);
      EXPECT_EQ(t2, 2u);
      ASSERT_TRUE(boot.barrier().isOk());  // receiver peeked both, released the first
      ASSERT_TRUE(boot.barrier().isOk());
      EXPECT_TRUE(s->consumed(t1));
      EXPECT_FALSE(s->consumed(t2));
      ASSERT_TRUE(boot.barrier().isOk());  // only now may the receiver release the second
      ASSERT_TRUE(consumedWithin(m, s, t2, 5000).isOk());
    } else {
      RecvConnection* c = m.recvConnection(0, 0).value();
      RecvMessage msg, again;
      ASSERT_TRUE(peekWithin(m, c, &msg, 5000).isOk());
      ASSERT_TRUE(c->tryPeek(&again));  // the same message until release
      EXPECT_EQ(again.data, msg.data);
      EXPECT_TRUE(msg.direct);
      EXPECT_EQ(msg.data, buffer.data());
      EXPECT_EQ(msg.bytes, 4096u);
      c->release();
      ASSERT_TRUE(peekWithin(m, c, &msg, 5000).isOk());
      EXPECT_TRUE(msg.direct);
      EXPECT_EQ(msg.tag, 2u);
      EXPECT_TRUE(checkWords(msg.data, msg.bytes, 42, 4096));
      ASSERT_TRUE(boot.barrier().isOk());
      ASSERT_TRUE(boot.barrier().isOk());
      ASSERT_TRUE(boot.barrier().isOk());  // the sender has checked that the second is not consumed yet
      c->release();
      c->release();  // without a peeked message: no effect
    }
  });
}

TEST(ShmTransport, ChannelsAreIndependentFifos) {
  withManagers(
      2,
      [&](int r, TransportManager& m, bootstrap::Bootstrap& boot) {
        if (r == 0) {
          for (int ch = 2; ch >= 0; --ch) {
            SendConnection* s = m.sendConnection(1, ch).value();
            SendSlot slot;
            ASSERT_TRUE(acquireWithin(m, s, &slot, 5000).isOk());
            s->commitInline(0, 100 + ch);
          }
          EXPECT_FALSE(m.sendConnection(1, 3).isOk());
        } else {
          for (int ch = 0; ch < 3; ++ch) {
            RecvConnection* c = m.recvConnection(0, ch).value();
            RecvMessage msg;
            ASSERT_TRUE(peekWithin(m, c, &msg, 5000).isOk());
            EXPECT_EQ(msg.tag, 100u + ch);
            EXPECT_EQ(msg.bytes, 0u);
            c->release();
          }
        }
      },
      {}, 3);
}

TEST(ShmTransport, BadEndpointsAreInvalidArguments) {
  withManagers(2, [&](int r, TransportManager& m, bootstrap::Bootstrap&) {
    auto self = m.sendConnection(r, 0);
    EXPECT_EQ(self.status().code(), ncclInvalidArgument);
    EXPECT_EQ(m.recvConnection(2, 0).status().code(), ncclInvalidArgument);
    EXPECT_EQ(m.recvConnection(-1, 0).status().code(), ncclInvalidArgument);
    EXPECT_EQ(m.sendConnection(1 - r, 1).status().code(), ncclInvalidArgument);
    EXPECT_EQ(m.prepare({1 - r}, 2).code(), ncclInvalidArgument);
  });
}

TEST(ShmTransport, StatsCountBothDirections) {
  withManagers(2, [&](int r, TransportManager& m, bootstrap::Bootstrap& boot) {
    if (r == 0) {
      SendConnection* s = m.sendConnection(1, 0).value();
      for (int i = 0; i < 10; ++i) {
        SendSlot slot;
        ASSERT_TRUE(acquireWithin(m, s, &slot, 5000).isOk());
        s->commitInline(1000, i);
      }
      ASSERT_TRUE(boot.barrier().isOk());
      auto st = m.stats(1);
      EXPECT_EQ(st.bytesSent, 10000u);
      EXPECT_EQ(st.messagesSent, 10u);
      EXPECT_EQ(st.bytesReceived, 0u);
    } else {
      RecvConnection* c = m.recvConnection(0, 0).value();
      for (int i = 0; i < 10; ++i) {
        RecvMessage msg;
        ASSERT_TRUE(peekWithin(m, c, &msg, 5000).isOk());
        c->release();
      }
      ASSERT_TRUE(boot.barrier().isOk());
      auto st = m.stats(0);
      EXPECT_EQ(st.bytesReceived, 10000u);
      EXPECT_EQ(st.messagesReceived, 10u);
      EXPECT_EQ(st.bytesSent, 0u);
      EXPECT_EQ(m.stats(5).bytesSent, 0u);  // out of range: empty
    }
  });
}

TEST(ShmTransport, WaitTimesOutAndWakesOnCommit) {
  withManagers(2, [&](int r, TransportManager& m, bootstrap::Bootstrap& boot) {
    if (r == 1) {
      RecvConnection* c = m.recvConnection(0, 0).value();
      // Nothing is coming: the wait lasts its timeout, no less, not much more.
      uint64_t token = m.activityToken();
      auto t0 = std::chrono::steady_clock::now();
      m.waitForActivity(token, 60000);
      double waited = secondsSince(t0);
      EXPECT_GE(waited, 0.055);
      EXPECT_LT(waited, 2.0);
      ASSERT_TRUE(boot.barrier().isOk());
      // The peer commits ~50 ms after the barrier: the wait ends then, not at 10 s.
      token = m.activityToken();
      RecvMessage msg;
      t0 = std::chrono::steady_clock::now();
      while (!c->tryPeek(&msg) && secondsSince(t0) < 10) {
        m.waitForActivity(token, 10000000);
        token = m.activityToken();
      }
      EXPECT_LT(secondsSince(t0), 5.0);
      EXPECT_EQ(msg.tag, 77u);
      c->release();
    } else {
      SendConnection* s = m.sendConnection(1, 0).value();
      ASSERT_TRUE(boot.barrier().isOk());
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      SendSlot slot;
      ASSERT_TRUE(s->tryAcquire(&slot));
      s->commitInline(4, 77);
    }
  });
}

TEST(ShmTransport, InboxNamesAreUnlinkedAfterSetUp) {
  auto world = FakeWorld::create(2);
  ASSERT_NE(world, nullptr);
  runThreads(2, [&](int r) {
    auto boot = world->bootstrap(r);
    auto m = makeManager(*boot);
    ASSERT_TRUE(m.isOk());
    EXPECT_EQ(m.value()->kindFor(1 - r), Kind::kShm);
    char path[128];
    snprintf(path, sizeof(path), "/dev/shm/theseus-%016" PRIx64 "-r%d-p%d", boot->commHash(), r, getpid());
    struct stat st;
    EXPECT_NE(stat(path, &st), 0) << path << " still exists";
    EXPECT_TRUE(boot->barrier().isOk());
  });
}

TEST(ShmTransport, StaleInboxFromACrashedRunIsReplaced) {
  auto world = FakeWorld::create(2);
  ASSERT_NE(world, nullptr);
  // A stale segment with the name rank 0 will use (left by a crash).
  auto probeBoot = world->bootstrap(0);
  char name[128];
  snprintf(name, sizeof(name), "theseus-%016" PRIx64 "-r0", probeBoot->commHash());
  auto stale = transport::ShmSegment::createNamed(name, 4096);
  ASSERT_TRUE(stale.isOk());
  memset(stale.value()->base(), 0xff, 4096);
  runThreads(2, [&](int r) {
    auto boot = world->bootstrap(r);
    auto m = makeManager(*boot);
    ASSERT_TRUE(m.isOk()) << m.status().message();
    EXPECT_EQ(m.value()->kindFor(1 - r), Kind::kShm);
    EXPECT_TRUE(boot->barrier().isOk());
  });
}

// kill -9 between creating and unlinking a segment leaves it in /dev/shm: the next process
// that sets up shared memory removes it, and only when its creator is certainly gone.
TEST(ShmTransport, SegmentsOfDeadProcessesAreRemoved) {
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  ASSERT_GT(dead, 0);
  waitpid(dead, nullptr, 0);
  const std::string prefix = "theseus-staletest-" + std::to_string(getpid());
  auto make = [&](pid_t pid) {
    const std::string name = "/" + prefix + "-r0-p" + std::to_string(pid);
    int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    EXPECT_GE(fd, 0) << name;
    if (fd >= 0) close(fd);
    return "/dev/shm" + name;
  };
  const std::string orphan = make(dead), live = make(getpid());
  EXPECT_EQ(transport::ShmSegment::removeStaleNamed(prefix), 1);
  struct stat st;
  EXPECT_NE(stat(orphan.c_str(), &st), 0) << orphan << " is still there";
  EXPECT_EQ(stat(live.c_str(), &st), 0) << "a live process's segment was removed";
  shm_unlink(live.substr(8).c_str());
}

int openDescriptors() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d) != nullptr) ++n;
    closedir(d);
  }
  return n;
}

// Peers' inboxes are kept as mappings only: descriptors per communicator do not
// grow with the number of local ranks (apps create many communicators).
TEST(ShmTransport, SetUpHoldsFewDescriptors) {
  constexpr int kRanks = 6;
  auto world = FakeWorld::create(kRanks);
  (void)transport::SharedMemoryRegistry::instance().probeLocator();  // process-wide, created once
  int before = openDescriptors();
  std::atomic<int> during{0};
  runThreads(kRanks, [&](int r) {
    auto boot = world->bootstrap(r);
    auto m = makeManager(*boot);
    ASSERT_TRUE(m.isOk());
    for (int p = 0; p < kRanks; ++p) {
      if (p != r) {
        ASSERT_TRUE(m.value()->sendConnection(p, 0).isOk());
      }
    }
    EXPECT_TRUE(boot->barrier().isOk());
    if (r == 0) during = openDescriptors();
    EXPECT_TRUE(boot->barrier().isOk());
  });
  // Per rank: its own inbox and one eventfd.
  EXPECT_LE(during.load() - before, 2 * kRanks);
  EXPECT_EQ(openDescriptors(), before);
}

TEST(ShmTransport, PrepareConnectsEagerly) {
  withManagers(3, [&](int r, TransportManager& m, bootstrap::Bootstrap&) {
    std::vector<int> peers;
    for (int p = 0; p < 3; ++p)
      if (p != r) peers.push_back(p);
    EXPECT_TRUE(m.prepare(peers, 1).isOk());
    for (int p : peers) {
      EXPECT_TRUE(m.sendConnection(p, 0).isOk());
      EXPECT_TRUE(m.recvConnection(p, 0).isOk());
    }
  }, {1, 1, 2});
}

TEST(TransportConfig, BadKnobsAreInvalidArguments) {
  auto world = FakeWorld::create(1);
  auto boot = world->bootstrap(0);
  {
    EnvGuard g("THESEUS_SHM_SLOTS", "1");
    auto m = makeManager(*boot);
    EXPECT_EQ(m.status().code(), ncclInvalidArgument);
    EXPECT_NE(m.status().message().find("THESEUS_SHM_SLOTS"), std::string::npos) << m.status().message();
  }
  {
    EnvGuard g("THESEUS_TRANSPORT", "carrier-pigeon");
    EXPECT_EQ(makeManager(*boot).status().code(), ncclInvalidArgument);
  }
  {
    EnvGuard g("NCCL_BUFFSIZE", "1024");
    EXPECT_EQ(makeManager(*boot).status().code(), ncclInvalidArgument);
  }
  {
    EnvGuard g("THESEUS_SOCKET_NSOCKS", "65");
    EXPECT_EQ(makeManager(*boot).status().code(), ncclInvalidArgument);
  }
  auto ok = makeManager(*boot);
  EXPECT_TRUE(ok.isOk());
}

TEST(TransportConfig, BuffSizeSetsSlotBytes) {
  EnvGuard g("NCCL_BUFFSIZE", "4M");
  EnvGuard s("THESEUS_SHM_SLOTS", "4");
  withManagers(2, [&](int r, TransportManager& m, bootstrap::Bootstrap&) {
    auto c = m.sendConnection(1 - r, 0);
    ASSERT_TRUE(c.isOk());
    EXPECT_EQ(c.value()->slotBytes(), size_t(1) << 20);
  });
}

}  // namespace
}  // namespace theseus::testing
