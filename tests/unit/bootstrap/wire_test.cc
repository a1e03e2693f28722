// Wire format codecs, the incremental parser, unique ids and the ranks-per-root rule.
#include <sys/socket.h>
#include <unistd.h>

#include <numeric>
#include <set>
#include <thread>

#include "boot_test_util.h"
#include "bootstrap/host_identity.h"
#include "bootstrap/unique_id.h"
#include "bootstrap/wire.h"

namespace theseus::bootstrap {
namespace {

using testing::ScopedEnv;

std::string frameBytes(uint32_t marker, uint32_t type, uint32_t length, const std::string& payload) {
  std::string s(12, '\0');
  memcpy(s.data(), &marker, 4);
  memcpy(s.data() + 4, &type, 4);
  memcpy(s.data() + 8, &length, 4);
  return s + payload;
}

TEST(Wire, ReaderNeverReadsPastTheEnd) {
  wire::Writer w;
  w.put<uint32_t>(7).putStr("abc");
  std::string data = w.take();
  wire::Reader r(data);
  uint32_t v;
  std::string s;
  ASSERT_TRUE(r.get(&v));
  EXPECT_EQ(v, 7u);
  EXPECT_FALSE(r.getStr(&s, 2)) << "respects the string bound";
  wire::Reader r2(data);
  ASSERT_TRUE(r2.get(&v) && r2.getStr(&s, 10));
  EXPECT_EQ(s, "abc");
  EXPECT_TRUE(r2.done());
  uint64_t big;
  EXPECT_FALSE(r2.get(&big));
  // A string length larger than what is left.
  std::string lying = data.substr(0, 4) + std::string("\xff\xff\xff\x7f", 4) + "ab";
  wire::Reader r3(lying);
  ASSERT_TRUE(r3.get(&v));
  EXPECT_FALSE(r3.getStr(&s, SIZE_MAX));
}

TEST(Wire, CodecsRoundTripAndValidate) {
  PeerInfo p{3, 1234, 1, 0xabcdefull, 0x1234ull, "hostA", "10.0.0.1:5555", true};
  wire::RootJoin j;
  j.rank = 3;
  j.nranks = 8;
  j.nRoots = 2;
  j.rootIndex = 0;
  j.idsHash = 99;
  j.root0Id.assign(128, 'x');
  j.peer = p;
  wire::RootJoin back;
  ASSERT_TRUE(wire::decodeRootJoin(wire::encodeRootJoin(j), &back).isOk());
  EXPECT_EQ(back.peer.listenAddress, p.listenAddress);
  EXPECT_EQ(back.peer.hostHash, p.hostHash);
  EXPECT_EQ(back.peer.machineHash, p.machineHash);
  EXPECT_TRUE(back.peer.usesCuda);
  EXPECT_EQ(back.peer.gpuHash, 0u);
  j.peer.gpuHash = 0x5eed5eed5eedull;
  ASSERT_TRUE(wire::decodeRootJoin(wire::encodeRootJoin(j), &back).isOk());
  EXPECT_EQ(back.peer.gpuHash, 0x5eed5eed5eedull);
  j.peer.usesCuda = false;
  ASSERT_TRUE(wire::decodeRootJoin(wire::encodeRootJoin(j), &back).isOk());
  EXPECT_FALSE(back.peer.usesCuda);
  // The flag is one byte, 0 or 1, after the join's four ints, its ids hash, its 128-byte id with its length, and
  // the peer's rank, pid and device: anything else is garbage.
  std::string bad = wire::encodeRootJoin(j);
  const size_t flagAt = 4 * 4 + 8 + 4 + 128 + 3 * 4;
  ASSERT_EQ(bad[flagAt], '\0');
  bad[flagAt] = 2;
  EXPECT_EQ(wire::decodeRootJoin(bad, &back).code(), ncclRemoteError);
  j.rank = 9;  // out of range
  j.peer.rank = 9;
  EXPECT_EQ(wire::decodeRootJoin(wire::encodeRootJoin(j), &back).code(), ncclRemoteError);
  EXPECT_EQ(wire::decodeRootJoin("garbage", &back).code(), ncclRemoteError);

  wire::Table t;
  t.nonce = 5;
  for (int r = 0; r < 3; ++r) t.peers.push_back(PeerInfo{r, 10 + r, 0, 1, 40u + r, "h", "a:1"});
  wire::Table tb;
  ASSERT_TRUE(wire::decodeTable(wire::encodeTable(t), 3, &tb).isOk());
  EXPECT_EQ(tb.nonce, 5u);
  EXPECT_EQ(tb.peers[2].pid, 12);
  EXPECT_EQ(tb.peers[2].machineHash, 42u);
  EXPECT_FALSE(wire::decodeTable(wire::encodeTable(t), 4, &tb).isOk()) << "wrong rank count";
  t.peers[1].rank = 2;
  EXPECT_FALSE(wire::decodeTable(wire::encodeTable(t), 3, &tb).isOk()) << "entries out of order";
  std::string truncated = wire::encodeTable(t).substr(0, 20);
  EXPECT_FALSE(wire::decodeTable(truncated, 3, &tb).isOk());

  wire::LinkJoin lj{1, 2, 77, PeerInfo{1, 1, 0, 1, 2, "h", "a:1"}};
  wire::LinkJoin ljb;
  ASSERT_TRUE(wire::decodeLinkJoin(wire::encodeLinkJoin(lj), &ljb).isOk());
  EXPECT_EQ(ljb.commHash, 77u);
  EXPECT_FALSE(wire::decodeLinkJoin(wire::encodeLinkJoin(lj) + "x", &ljb).isOk()) << "trailing bytes";
}

TEST(Wire, FrameParserHandlesSplitsGarbageAndOversizedLengths) {
  wire::FrameParser p(100);
  std::string two = frameBytes(wire::kFrameMarker, 16, 3, "abc") + frameBytes(wire::kFrameMarker, 17, 0, "");
  wire::Frame f;
  int frames = 0;
  for (char c : two.substr(0, two.size() - 1)) {
    p.append(&c, 1);
    if (p.next(&f) == 1) {
      ++frames;
      EXPECT_EQ(f.payload, "abc");
    }
  }
  EXPECT_EQ(frames, 1);
  EXPECT_EQ(p.next(&f), 0) << "second frame incomplete";
  p.append(&two.back(), 1);
  ASSERT_EQ(p.next(&f), 1);
  EXPECT_EQ(f.type, 17u);
  EXPECT_TRUE(f.payload.empty());

  wire::FrameParser bad(100);
  std::string garbage = "GET / HTTP/1.1\r\n\r\n";
  bad.append(garbage.data(), garbage.size());
  EXPECT_EQ(bad.next(&f), -1);
  EXPECT_NE(bad.error().find("marker"), std::string::npos);

  wire::FrameParser huge(100);
  std::string h = frameBytes(wire::kFrameMarker, 16, 0xfffffff0u, "");
  huge.append(h.data(), h.size());
  EXPECT_EQ(huge.next(&f), -1) << "rejected before the payload arrives";
  EXPECT_NE(huge.error().find("exceeds the limit"), std::string::npos);
}

TEST(UniqueId, EncodesAddressAndRejectsGarbage) {
  RootId id;
  id.magic = 0x1122334455667788ull;
  id.addr = SockAddr::parse("192.0.2.7:4321").value();
  ncclUniqueId u;
  encodeRootId(id, &u);
  auto back = decodeRootId(u);
  ASSERT_TRUE(back.isOk()) << back.status().message();
  EXPECT_EQ(back.value().magic, id.magic);
  EXPECT_EQ(back.value().addr.toString(), "192.0.2.7:4321");
  EXPECT_FALSE(back.value().fromEnv());
  // NCCL's layout: magic first, then the sockaddr (family AF_INET = 2, port in network order).
  EXPECT_EQ(static_cast<unsigned char>(u.internal[8]), AF_INET);
  EXPECT_EQ(static_cast<unsigned char>(u.internal[10]), 4321 >> 8);
  for (size_t i = 48; i < sizeof(u.internal); ++i) EXPECT_EQ(u.internal[i], 0);

  ncclUniqueId corrupted = u;
  corrupted.internal[12] ^= 1;
  EXPECT_EQ(decodeRootId(corrupted).status().code(), ncclInvalidArgument);
  ncclUniqueId zero{};
  EXPECT_EQ(decodeRootId(zero).status().code(), ncclInvalidArgument);

  RootId v6;
  v6.magic = 5;
  v6.addr = SockAddr::parse("[fd00::7]:99").value();
  encodeRootId(v6, &u);
  EXPECT_EQ(decodeRootId(u).value().addr.toString(), "[fd00::7]:99");
}

TEST(UniqueId, CreateStartsARootOrUsesNcclCommId) {
  ncclUniqueId a, b;
  ASSERT_TRUE(createUniqueId(&a).isOk());
  ASSERT_TRUE(createUniqueId(&b).isOk());
  auto ra = decodeRootId(a).value(), rb = decodeRootId(b).value();
  EXPECT_NE(ra.magic, rb.magic) << "random magic per id";
  EXPECT_NE(ra.addr.port(), rb.addr.port()) << "one root listener per id";
  // The root is really listening.
  int fd = testing::rawConnect(ra.addr.toString());
  EXPECT_GE(fd, 0);
  if (fd >= 0) ::close(fd);

  ScopedEnv env("NCCL_COMM_ID", "127.0.0.1:23456");
  ncclUniqueId e1, e2;
  ASSERT_TRUE(createUniqueId(&e1).isOk());
  ASSERT_TRUE(createUniqueId(&e2).isOk());
  EXPECT_EQ(memcmp(&e1, &e2, sizeof(e1)), 0) << "every rank computes the same id without networking";
  auto re = decodeRootId(e1).value();
  EXPECT_TRUE(re.fromEnv());
  EXPECT_EQ(re.addr.toString(), "127.0.0.1:23456");
  {
    ScopedEnv bad("NCCL_COMM_ID", "127.0.0.1");
    EXPECT_EQ(createUniqueId(&e1).code(), ncclInvalidArgument);
  }
  {
    ScopedEnv bad("NCCL_COMM_ID", "[::1]:0");
    EXPECT_EQ(createUniqueId(&e1).code(), ncclInvalidArgument);
  }
  EXPECT_EQ(createUniqueId(nullptr).code(), ncclInvalidArgument);
}

TEST(UniqueId, RanksPerRootFollowNcclsRule) {
  for (int nranks = 1; nranks <= 40; ++nranks) {
    for (int nRoots = 1; nRoots <= nranks; ++nRoots) {
      int total = 0;
      for (int root = 0; root < nRoots; ++root) {
        int first = firstRankOfRoot(root, nranks, nRoots);
        int count = ranksOfRoot(root, nranks, nRoots);
        EXPECT_EQ(first, total);
        EXPECT_EQ(count, nranks / nRoots + (root < nranks % nRoots ? 1 : 0));
        for (int r = first; r < first + count; ++r) EXPECT_EQ(rootOfRank(r, nranks, nRoots), root);
        total += count;
      }
      EXPECT_EQ(total, nranks);
    }
  }
}

TEST(HostIdentity, HashCoversNamespaceAndHostId) {
  EXPECT_NE(hostHashOf("host|boot|net:[1]"), hostHashOf("host|boot|net:[2]"));
  EXPECT_EQ(hostHashOf("x"), hostHashOf("x"));
  const HostIdentity& me = hostIdentity();
  EXPECT_FALSE(me.hostname.empty());
  EXPECT_NE(me.description.find("net:["), std::string::npos) << me.description;
  EXPECT_EQ(me.hash, hostHashOf(me.description));
}

// Frames of every size around the stack-built small frames' limit and a large one arrive whole, in order.
TEST(Wire, FramesOfAnySizeArriveWhole) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  std::vector<std::string> payloads;
  for (size_t n = 0; n <= 300; ++n) payloads.push_back(std::string(n, static_cast<char>('a' + n % 26)));
  payloads.push_back(std::string(1 << 20, 'z'));
  std::thread sender([&] {
    for (size_t i = 0; i < payloads.size(); ++i)
      EXPECT_TRUE(wire::sendFrame(fds[0], wire::kFirstUserType + i % 4, payloads[i], Wait::forMs(10000), "peer").isOk());
  });
  for (size_t i = 0; i < payloads.size(); ++i) {
    auto f = wire::recvFrame(fds[1], 2 << 20, Wait::forMs(10000), "peer");
    ASSERT_TRUE(f.isOk()) << f.status().message();
    EXPECT_EQ(f.value().type, wire::kFirstUserType + i % 4);
    EXPECT_EQ(f.value().payload, payloads[i]) << "frame " << i;
  }
  sender.join();
  close(fds[0]);
  close(fds[1]);
}

}  // namespace
}  // namespace theseus::bootstrap
