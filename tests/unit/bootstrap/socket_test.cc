// Addresses, NCCL_SOCKET_IFNAME rules, interface choice, and the I/O helpers' deadlines and aborts.
#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "boot_test_util.h"
#include "bootstrap/socket.h"

namespace theseus::bootstrap {
namespace {

using testing::ScopedEnv;

NetInterface iface(const char* name, const char* addr, const char* mask, bool loopback = false) {
  NetInterface i;
  i.name = name;
  i.addr = SockAddr::parse(std::string(strchr(addr, ':') ? "[" : "") + addr + (strchr(addr, ':') ? "]" : "") + ":0").value();
  i.netmask = SockAddr::parse(std::string(strchr(mask, ':') ? "[" : "") + mask + (strchr(mask, ':') ? "]" : "") + ":0").value();
  i.loopback = loopback;
  return i;
}

TEST(SockAddr, ParsesIpv4Ipv6AndHostnames) {
  auto a = SockAddr::parse("10.1.2.3:4567");
  ASSERT_TRUE(a.isOk());
  EXPECT_EQ(a.value().family(), AF_INET);
  EXPECT_EQ(a.value().port(), 4567);
  EXPECT_EQ(a.value().toString(), "10.1.2.3:4567");
  EXPECT_FALSE(a.value().isLoopback());

  auto b = SockAddr::parse("[::1]:80");
  ASSERT_TRUE(b.isOk());
  EXPECT_EQ(b.value().family(), AF_INET6);
  EXPECT_EQ(b.value().toString(), "[::1]:80");
  EXPECT_TRUE(b.value().isLoopback());

  auto c = SockAddr::parse("localhost:9");
  ASSERT_TRUE(c.isOk()) << c.status().message();
  EXPECT_TRUE(c.value().isLoopback());
  EXPECT_EQ(c.value().port(), 9);

  auto d = SockAddr::parse("[fe80::1]:7");
  ASSERT_TRUE(d.isOk());
  EXPECT_TRUE(d.value().isLinkLocal());
}

TEST(SockAddr, RejectsMalformedAddresses) {
  for (const char* bad : {"", "10.1.2.3", "10.1.2.3:", ":80", "10.1.2.3:99999", "10.1.2.3:8x", "::1:80", "[::1]80",
                          "[::1", "no-such-host.invalid:80"}) {
    auto r = SockAddr::parse(bad);
    EXPECT_FALSE(r.isOk()) << bad;
    EXPECT_EQ(r.status().code(), ncclInvalidArgument) << bad;
    EXPECT_FALSE(r.status().message().empty());
  }
}

TEST(SockAddr, SubnetComparison) {
  auto a = SockAddr::parse("10.0.0.5:1").value();
  auto b = SockAddr::parse("10.0.0.200:2").value();
  auto c = SockAddr::parse("10.0.1.5:1").value();
  auto mask = SockAddr::parse("255.255.255.0:0").value();
  EXPECT_TRUE(a.sameSubnet(b, mask));
  EXPECT_FALSE(a.sameSubnet(c, mask));
  EXPECT_FALSE(a.sameSubnet(SockAddr::parse("[::1]:1").value(), mask));
}

TEST(IfNameFilter, PrefixExcludeExact) {
  auto f = IfNameFilter::parse("eth,ib");
  EXPECT_TRUE(f.matches("eth0"));
  EXPECT_TRUE(f.matches("ib1"));
  EXPECT_FALSE(f.matches("lo"));

  auto ex = IfNameFilter::parse("^docker,lo");
  EXPECT_FALSE(ex.matches("docker0"));
  EXPECT_FALSE(ex.matches("lo"));
  EXPECT_TRUE(ex.matches("eth0"));

  auto exact = IfNameFilter::parse("=eth0");
  EXPECT_TRUE(exact.matches("eth0"));
  EXPECT_FALSE(exact.matches("eth01"));

  auto exExact = IfNameFilter::parse("^=eth0");
  EXPECT_FALSE(exExact.matches("eth0"));
  EXPECT_TRUE(exExact.matches("eth01"));
}

std::vector<NetInterface> machine() {
  return {iface("lo", "127.0.0.1", "255.0.0.0", true), iface("docker0", "172.17.0.1", "255.255.0.0"),
          iface("eth0", "10.0.0.5", "255.255.255.0"), iface("eth0", "fd00::5", "ffff:ffff:ffff:ffff::"),
          iface("eth1", "fe80::2", "ffff:ffff:ffff:ffff::"), iface("virbr0", "192.168.122.1", "255.255.255.0")};
}

std::string chosen(const std::vector<NetInterface>& ifs, InterfacePolicy p) {
  auto r = selectInterface(ifs, p);
  return r.isOk() ? r.value().name + "/" + r.value().addr.host() : "error: " + r.status().message();
}

TEST(SelectInterface, DefaultOrderPrefersRealInterfacesThenDockerThenLoopback) {
  EXPECT_EQ(chosen(machine(), {}), "eth0/10.0.0.5");
  auto withIb = machine();
  withIb.push_back(iface("ib0", "192.168.7.2", "255.255.255.0"));
  EXPECT_EQ(chosen(withIb, {}), "ib0/192.168.7.2");
  std::vector<NetInterface> noEth = {machine()[0], machine()[1]};
  EXPECT_EQ(chosen(noEth, {}), "docker0/172.17.0.1");
  std::vector<NetInterface> onlyLo = {machine()[0]};
  EXPECT_EQ(chosen(onlyLo, {}), "lo/127.0.0.1");
}

TEST(SelectInterface, HonoursIfnameFamilyAndCommIdSubnet) {
  InterfacePolicy p;
  p.ifname = "docker";
  EXPECT_EQ(chosen(machine(), p), "docker0/172.17.0.1");
  p.ifname = "^eth,docker";
  EXPECT_EQ(chosen(machine(), p), "virbr0/192.168.122.1");
  p.ifname = "=lo";
  EXPECT_EQ(chosen(machine(), p), "lo/127.0.0.1");
  p = {};
  p.family = AF_INET6;
  EXPECT_EQ(chosen(machine(), p), "eth0/fd00::5");  // the link-local eth1 address never qualifies
  p = {};
  p.commId = SockAddr::parse("127.0.0.1:9999").value();
  EXPECT_EQ(chosen(machine(), p), "lo/127.0.0.1");
  p.commId = SockAddr::parse("172.17.3.4:9999").value();
  EXPECT_EQ(chosen(machine(), p), "docker0/172.17.0.1");
}

TEST(SelectInterface, NoMatchIsAClearError) {
  InterfacePolicy p;
  p.ifname = "=nonexistent0";
  auto r = selectInterface(machine(), p);
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), ncclSystemError);
  EXPECT_NE(r.status().message().find("nonexistent0"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("eth0"), std::string::npos) << "lists what exists: " << r.status().message();
}

TEST(SocketFamily, ParsesEnv) {
  {
    ScopedEnv e("NCCL_SOCKET_FAMILY", "AF_INET6");
    EXPECT_EQ(socketFamilyFromEnv().value(), AF_INET6);
  }
  {
    ScopedEnv e("NCCL_SOCKET_FAMILY", "af_inet");
    EXPECT_EQ(socketFamilyFromEnv().value(), AF_INET);
  }
  {
    ScopedEnv e("NCCL_SOCKET_FAMILY", "AF_UNIX");
    EXPECT_EQ(socketFamilyFromEnv().status().code(), ncclInvalidArgument);
  }
}

TEST(SocketIo, RoundTripEofTimeoutAndAbort) {
  SockAddr bound;
  auto lfd = listenOn(SockAddr::parse("127.0.0.1:0").value(), &bound);
  ASSERT_TRUE(lfd.isOk());
  auto cfd = connectTo(bound, Wait::forMs(2000), "listener");
  ASSERT_TRUE(cfd.isOk()) << cfd.status().message();
  int sfd = -1;
  ASSERT_TRUE(testing::eventually([&] { return (sfd = acceptNonBlocking(lfd.value())) >= 0; }));
  setNonBlocking(sfd, false);

  const char msg[] = "hello bootstrap";
  ASSERT_TRUE(sendAll(cfd.value(), msg, sizeof(msg), Wait::forMs(1000), "peer").isOk());
  char got[sizeof(msg)];
  ASSERT_TRUE(recvAll(sfd, got, sizeof(got), Wait::forMs(1000), "peer").isOk());
  EXPECT_STREQ(got, msg);

  // Timeout: nothing arrives.
  auto start = Clock::now();
  Status t = recvAll(sfd, got, 1, Wait::forMs(150), "the silent peer");
  double waited = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(t.code(), ncclTimeout);
  EXPECT_NE(t.message().find("timed out after 150 ms waiting for data from the silent peer"), std::string::npos)
      << t.message();
  EXPECT_GE(waited, 0.14);
  EXPECT_LT(waited, 1.0);

  // Abort from another thread ends the wait promptly.
  AbortFlag abort;
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    abort.set();
  });
  start = Clock::now();
  Status a = recvAll(sfd, got, 1, Wait::forMs(10000, &abort), "peer");
  aborter.join();
  EXPECT_EQ(a.code(), ncclInvalidUsage);
  EXPECT_NE(a.message().find("aborted"), std::string::npos);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 2.0);

  // EOF: the peer closes.
  ::close(cfd.value());
  Status eof = recvAll(sfd, got, 1, Wait::forMs(1000), "rank 7");
  EXPECT_EQ(eof.code(), ncclRemoteError);
  EXPECT_NE(eof.message().find("rank 7 closed the connection"), std::string::npos) << eof.message();
  // Writing to a closed peer is an error, never SIGPIPE.
  std::vector<char> big(1 << 20);
  Status w;
  for (int i = 0; i < 20 && w.isOk(); ++i) w = sendAll(sfd, big.data(), big.size(), Wait::forMs(1000), "rank 7");
  EXPECT_EQ(w.code(), ncclRemoteError);
  ::close(sfd);
  ::close(lfd.value());
}

TEST(SocketIo, ConnectRetriesAreBoundedByCountAndDeadline) {
  // A port nobody listens on: refused at once, retried NCCL_SOCKET_RETRY_CNT times.
  SockAddr bound;
  auto lfd = listenOn(SockAddr::parse("127.0.0.1:0").value(), &bound);
  ASSERT_TRUE(lfd.isOk());
  ::close(lfd.value());
  ScopedEnv cnt("NCCL_SOCKET_RETRY_CNT", "3");
  ScopedEnv sleep("NCCL_SOCKET_RETRY_SLEEP_MSEC", "10");
  auto start = Clock::now();
  auto r = connectTo(bound, Wait::forMs(5000), "nobody");
  EXPECT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), ncclRemoteError);
  EXPECT_NE(r.status().message().find("after 4 attempt(s)"), std::string::npos) << r.status().message();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 2.0);

  // The stillWanted check ends the retries with its own error.
  ScopedEnv cnt2("NCCL_SOCKET_RETRY_CNT", "1000");
  auto r2 = connectTo(bound, Wait::forMs(5000), "nobody", [] { return remoteError("peer is gone"); });
  EXPECT_EQ(r2.status().message(), "peer is gone");
  // And the deadline bounds them too.
  start = Clock::now();
  auto r3 = connectTo(bound, Wait::forMs(300), "nobody");
  EXPECT_FALSE(r3.isOk());
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 2.0);
}

}  // namespace
}  // namespace theseus::bootstrap
