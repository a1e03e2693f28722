// Two-process data-path scenarios of the ib_double tests: role A is usually the
// requester, role B the target; they meet on the board (ib_double_endpoint.h).
#include "ib_double_scenarios.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "ib_double_endpoint.h"

namespace theseus::ibdouble {
namespace {

constexpr unsigned kLocal = IBV_ACCESS_LOCAL_WRITE;
constexpr unsigned kRemoteWrite = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
constexpr unsigned kRemoteRead = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;

char pattern(size_t i) { return static_cast<char>((i * 131 + 7) & 0xff); }

void fill(std::vector<char>& b, size_t offset = 0) {
  for (size_t i = 0; i < b.size(); ++i) b[i] = pattern(i + offset);
}

bool matches(const char* p, size_t n, size_t offset = 0) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != pattern(i + offset)) return false;
  return true;
}

std::string variant() {
  const char* v = getenv("IBD_VARIANT");
  return v != nullptr ? v : "";
}

std::string fromEnv(const char* name, const char* fallback) {
  const char* v = getenv(name);
  return v != nullptr ? v : fallback;
}

uint32_t qpnOf(const std::string& address) { return static_cast<uint32_t>(strtoul(address.c_str(), nullptr, 10)); }

void checkWc(const ibv_wc& wc, uint64_t wrId, ibv_wc_status status) {
  if (wc.status != status)
    failCheck(__FILE__, __LINE__,
              "wr " + std::to_string(wc.wr_id) + ": status " + ibv_wc_status_str(wc.status) + ", wanted " +
                  ibv_wc_status_str(status));
  IBD_CHECK_EQ(wc.wr_id, wrId);
}

// A WRITE without and a WRITE_WITH_IMM with two SGEs; the target sees the data with its receive completion.
void writeWithImm(const std::string& role) {
  constexpr size_t kSize = 1 << 20;
  EndpointOptions eo;
  eo.port = static_cast<uint8_t>(std::stoi(fromEnv("IBD_PORT", "1")));
  Endpoint ep(eo);
  ConnectOptions co;
  co.useGid = variant() == "gid";
  ep.exchange("qp", role, co);
  std::vector<char> buf(kSize, 0);
  if (role == "B") {
    ibv_mr* mr = ep.reg(buf.data(), kSize, kRemoteWrite);
    IBD_CHECK_EQ(ep.postRecv(77, nullptr, 0), 0);
    publish("mem.B", RemoteMem{reinterpret_cast<uintptr_t>(buf.data()), mr->rkey}.text());
    const ibv_wc wc = ep.wait(ep.rcq);
    checkWc(wc, 77, IBV_WC_SUCCESS);
    IBD_CHECK_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    IBD_CHECK(wc.wc_flags & IBV_WC_WITH_IMM);
    IBD_CHECK_EQ(ntohl(wc.imm_data), 0x1234);
    IBD_CHECK_EQ(wc.byte_len, kSize / 2);
    IBD_CHECK_EQ(wc.qp_num, ep.qp->qp_num);
    IBD_CHECK_EQ(wc.src_qp, qpnOf(await("qp.A")));
    IBD_CHECK(matches(buf.data(), kSize));
    IBD_CHECK(ep.quiet(ep.rcq, 20));
    publish("done.B");
    await("done.A");
    return;
  }
  fill(buf);
  ibv_mr* mr = ep.reg(buf.data(), kSize, kLocal);
  const RemoteMem remote = RemoteMem::parse(await("mem.B"));
  if (variant() == "same_host") IBD_CHECK(qpnOf(await("qp.B")) != ep.qp->qp_num);  // unique per (host, device)
  ibv_sge first = sge(buf.data(), kSize / 2, mr);
  IBD_CHECK_EQ(ep.postSend(IBV_WR_RDMA_WRITE, 1, &first, 1, 0, remote), 0);
  ibv_sge second[2] = {sge(buf.data() + kSize / 2, kSize / 4, mr), sge(buf.data() + 3 * kSize / 4, kSize / 4, mr)};
  const RemoteMem half{remote.addr + kSize / 2, remote.rkey};
  IBD_CHECK_EQ(ep.postSend(IBV_WR_RDMA_WRITE_WITH_IMM, 2, second, 2, IBV_SEND_SIGNALED, half, htonl(0x1234)), 0);
  const ibv_wc wc = ep.wait(ep.scq);  // the unsignaled write completes silently, before it
  checkWc(wc, 2, IBV_WC_SUCCESS);
  IBD_CHECK_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
  IBD_CHECK(ep.quiet(ep.scq, 20));
  publish("done.A");
  await("done.B");
}

// SENDs scattered into multi-SGE receives, in arrival order; then a send too long for its receive.
void sendRecv(const std::string& role) {
  Endpoint ep;
  ep.exchange("qp", role);
  std::vector<char> buf(8192, 0);
  if (role == "B") {
    ibv_mr* mr = ep.reg(buf.data(), buf.size(), kRemoteWrite);
    ibv_sge r1[2] = {sge(buf.data(), 100, mr), sge(buf.data() + 1000, 200, mr)};
    ibv_sge r2 = sge(buf.data() + 2000, 4096, mr);
    IBD_CHECK_EQ(ep.postRecv(11, r1, 2), 0);
    IBD_CHECK_EQ(ep.postRecv(12, &r2, 1), 0);
    publish("recvs.B");
    ibv_wc wc = ep.wait(ep.rcq);
    checkWc(wc, 11, IBV_WC_SUCCESS);
    IBD_CHECK_EQ(wc.opcode, IBV_WC_RECV);
    IBD_CHECK_EQ(wc.byte_len, 300);
    IBD_CHECK((wc.wc_flags & IBV_WC_WITH_IMM) == 0);
    IBD_CHECK(matches(buf.data(), 100) && matches(buf.data() + 1000, 200, 100));
    wc = ep.wait(ep.rcq);
    checkWc(wc, 12, IBV_WC_SUCCESS);
    IBD_CHECK_EQ(wc.opcode, IBV_WC_RECV);
    IBD_CHECK_EQ(wc.byte_len, 1000);
    IBD_CHECK(wc.wc_flags & IBV_WC_WITH_IMM);
    IBD_CHECK_EQ(ntohl(wc.imm_data), 0xabcd);
    IBD_CHECK(matches(buf.data() + 2000, 1000, 300));
    // Too small: IBV_WC_LOC_LEN_ERR here, IBV_WC_REM_INV_REQ_ERR there, both QPs in error.
    ibv_sge small = sge(buf.data(), 64, mr);
    IBD_CHECK_EQ(ep.postRecv(13, &small, 1), 0);
    IBD_CHECK_EQ(ep.postRecv(14, &small, 1), 0);
    publish("small.B");
    checkWc(ep.wait(ep.rcq), 13, IBV_WC_LOC_LEN_ERR);
    checkWc(ep.wait(ep.rcq), 14, IBV_WC_WR_FLUSH_ERR);
    IBD_CHECK_EQ(ep.state(), IBV_QPS_ERR);
    publish("done.B");
    await("done.A");
    return;
  }
  fill(buf);
  ibv_mr* mr = ep.reg(buf.data(), buf.size(), kLocal);
  await("recvs.B");
  ibv_sge s1[3] = {sge(buf.data(), 50, mr), sge(buf.data() + 50, 150, mr), sge(buf.data() + 200, 100, mr)};
  IBD_CHECK_EQ(ep.postSend(IBV_WR_SEND, 21, s1, 3), 0);
  ibv_sge s2 = sge(buf.data() + 300, 1000, mr);
  IBD_CHECK_EQ(ep.postSend(IBV_WR_SEND_WITH_IMM, 22, &s2, 1, IBV_SEND_SIGNALED, {}, htonl(0xabcd)), 0);
  ibv_wc wc = ep.wait(ep.scq);
  checkWc(wc, 21, IBV_WC_SUCCESS);
  IBD_CHECK_EQ(wc.opcode, IBV_WC_SEND);
  checkWc(ep.wait(ep.scq), 22, IBV_WC_SUCCESS);
  await("small.B");
  ibv_sge s3 = sge(buf.data(), 100, mr);
  IBD_CHECK_EQ(ep.postSend(IBV_WR_SEND, 23, &s3, 1), 0);
  checkWc(ep.wait(ep.scq), 23, IBV_WC_REM_INV_REQ_ERR);
  IBD_CHECK_EQ(ep.state(), IBV_QPS_ERR);
  IBD_CHECK_EQ(ep.postSend(IBV_WR_SEND, 24, &s3, 1), 0);  // posting in the error state flushes
  checkWc(ep.wait(ep.scq), 24, IBV_WC_WR_FLUSH_ERR);
  publish("done.A");
  await("done.B");
}

// IBV_SEND_INLINE: the data is taken at post time (the buffer is reused at once, unregistered).
void inlineSend(const std::string& role) {
  EndpointOptions eo;
  eo.maxInline = 256;
  Endpoint ep(eo);
  ep.exchange("qp", role);
  std::vector<char> buf(4096, 0);
  if (role == "B") {
    ibv_mr* mr = ep.reg(buf.data(), buf.size(), kRemoteWrite);
    ibv_sge r = sge(buf.data(), 1024, mr);
    IBD_CHECK_EQ(ep.postRecv(5, &r, 1), 0);
    publish("mem.B", RemoteMem{reinterpret_cast<uintptr_t>(buf.data()), mr->rkey}.text());
    const ibv_wc wc = ep.wait(ep.rcq);
    checkWc(wc, 5, IBV_WC_SUCCESS);
    IBD_CHECK_EQ(wc.byte_len, 200);
    IBD_CHECK(matches(buf.data(), 200));
    // The inline RDMA write lands at offset 2048 without a receive completion.
    const int64_t end = nowMs() + 10000;
    while (!matches(buf.data() + 2048, 64) && nowMs() < end) usleep(100);
    IBD_CHECK(matches(buf.data() + 2048, 64));
    publish("done.B");
    await("done.A");
    return;
  }
  const RemoteMem remote = RemoteMem::parse(await("mem.B"));
  char data[300];
  for (size_t i = 0; i < sizeof(data); ++i) data[i] = pattern(i);
  ibv_sge s = sge(data, 200, nullptr);
  IBD_CHECK_EQ(ep.postSend(IBV_WR_SEND, 31, &s, 1, IBV_SEND_SIGNALED | IBV_SEND_INLINE), 0);
  memset(data, 0, sizeof(data));
  checkWc(ep.wait(ep.scq), 31, IBV_WC_SUCCESS);
  ibv_sge tooLong = sge(data, 300, nullptr);
  IBD_CHECK_EQ(ep.postSend(IBV_WR_SEND, 32, &tooLong, 1, IBV_SEND_SIGNALED | IBV_SEND_INLINE), EINVAL);
  for (size_t i = 0; i < 64; ++i) data[i] = pattern(i);
  ibv_sge w = sge(data, 64, nullptr);
  const RemoteMem at{remote.addr + 2048, remote.rkey};
  IBD_CHECK_EQ(ep.postSend(IBV_WR_RDMA_WRITE, 33, &w, 1, IBV_SEND_SIGNALED | IBV_SEND_INLINE, at), 0);
  memset(data, 0, sizeof(data));
  checkWc(ep.wait(ep.scq), 33, IBV_WC_SUCCESS);
  publish("done.A");
  await("done.B");
}

// RDMA READ into two local SGEs.
void rdmaRead(const std::string& role) {
  constexpr size_t kSize = 256 * 1024;
  Endpoint ep;
  ep.exchange("qp", role);
  std::vector<char> buf(kSize, 0);
  if (role == "B") {
    fill(buf);
    ibv_mr* mr = ep.reg(buf.data(), kSize, kRemoteRead);
    publish("mem.B", RemoteMem{reinterpret_cast<uintptr_t>(buf.data()), mr->rkey}.text());
    await("done.A");
    IBD_CHECK(ep.quiet(ep.rcq, 10));
    return;
  }
  ibv_mr* mr = ep.reg(buf.data(), kSize, kLocal | IBV_ACCESS_LOCAL_WRITE);
  const RemoteMem remote = RemoteMem::parse(await("mem.B"));
  ibv_sge s[2] = {sge(buf.data() + kSize / 2, kSize / 2, mr), sge(buf.data(), kSize / 2, mr)};
  IBD_CHECK_EQ(ep.postSend(IBV_WR_RDMA_READ, 41, s, 2, IBV_SEND_SIGNALED, remote), 0);
  const ibv_wc wc = ep.wait(ep.scq);
  checkWc(wc, 41, IBV_WC_SUCCESS);
  IBD_CHECK_EQ(wc.opcode, IBV_WC_RDMA_READ);
  IBD_CHECK(matches(buf.data() + kSize / 2, kSize / 2) && matches(buf.data(), kSize / 2, kSize / 2));
  publish("done.A");
}

// The target refuses: IBV_WC_REM_ACCESS_ERR for the requester, both QPs in error (IBD_VARIANT picks how).
void accessError(const std::string& role) {
  const std::string v = variant();
  Endpoint ep;
  ep.exchange("qp", role);
  std::vector<char> buf(8192, 0);
  if (role == "B") {
    const unsigned access = v == "no_remote_write" ? kLocal : v == "read_no_remote_read" ? kRemoteWrite : kRemoteWrite;
    ibv_mr* mr = ibv_reg_mr(ep.pd, buf.data(), 4096, access);
    IBD_CHECK(mr != nullptr);
    IBD_CHECK_EQ(ep.postRecv(99, nullptr, 0), 0);
    publish("mem.B", RemoteMem{reinterpret_cast<uintptr_t>(buf.data()), mr->rkey}.text());
    if (v == "deregistered") {
      IBD_CHECK_EQ(ibv_dereg_mr(mr), 0);
      mr = nullptr;
    }
    publish("ready.B");
    ibv_async_event ev{};
    IBD_CHECK(ep.waitAsync(IBV_EVENT_QP_ACCESS_ERR, 10000, &ev));
    IBD_CHECK(ev.element.qp == ep.qp);
    checkWc(ep.wait(ep.rcq), 99, IBV_WC_WR_FLUSH_ERR);
    IBD_CHECK_EQ(ep.state(), IBV_QPS_ERR);
    if (v != "fault") IBD_CHECK(std::all_of(buf.begin(), buf.end(), [](char c) { return c == 0; }));
    if (mr != nullptr) IBD_CHECK_EQ(ibv_dereg_mr(mr), 0);
    publish("done.B");
    await("done.A");
    return;
  }
  fill(buf);
  ibv_mr* mr = ep.reg(buf.data(), buf.size(), kLocal);
  const RemoteMem remote = RemoteMem::parse(await("mem.B"));
  await("ready.B");
  ibv_sge s = sge(buf.data(), 4096, mr);
  uint64_t failing = 1;
  if (v == "fault") {  // THESEUS_FAKE_IBV_FAULT=rem_access_after=2: the first write goes through
    IBD_CHECK_EQ(ep.postSend(IBV_WR_RDMA_WRITE, 1, &s, 1, IBV_SEND_SIGNALED, remote), 0);
    checkWc(ep.wait(ep.scq), 1, IBV_WC_SUCCESS);
    failing = 2;
  }
  const RemoteMem target = v == "out_of_range" ? RemoteMem{remote.addr + 1, remote.rkey} : remote;
  const ibv_wr_opcode op = v == "read_no_remote_read" ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
  IBD_CHECK_EQ(ep.postSend(op, failing, &s, 1, IBV_SEND_SIGNALED, target), 0);
  IBD_CHECK_EQ(ep.postSend(IBV_WR_RDMA_WRITE, failing + 1, &s, 1, 0, remote), 0);
  checkWc(ep.wait(ep.scq), failing, IBV_WC_REM_ACCESS_ERR);
  checkWc(ep.wait(ep.scq), failing + 1, IBV_WC_WR_FLUSH_ERR);  // even though unsignaled
  IBD_CHECK_EQ(ep.state(), IBV_QPS_ERR);
  publish("done.A");
  await("done.B");
}

// THESEUS_FAKE_IBV_FAULT=qp_error_after=2 in A: its second send WR fails, the third is flushed.
void qpErrorFault(const std::string& role) {
  Endpoint ep;
  ep.exchange("qp", role);
  std::vector<char> buf(4096, 0);
  if (role == "B") {
    ibv_mr* mr = ep.reg(buf.data(), buf.size(), kRemoteWrite);
    publish("mem.B", RemoteMem{reinterpret_cast<uintptr_t>(buf.data()), mr->rkey}.text());
    await("done.A");
    IBD_CHECK_EQ(ep.state(), IBV_QPS_RTS);
    return;
  }
  ibv_mr* mr = ep.reg(buf.data(), buf.size(), kLocal);
  const RemoteMem remote = RemoteMem::parse(await("mem.B"));
  ibv_sge s = sge(buf.data(), 128, mr);
  for (uint64_t wr = 1; wr <= 3; ++wr) IBD_CHECK_EQ(ep.postSend(IBV_WR_RDMA_WRITE, wr, &s, 1, IBV_SEND_SIGNALED, remote), 0);
  checkWc(ep.wait(ep.scq), 1, IBV_WC_SUCCESS);
  const ibv_wc wc = ep.wait(ep.scq);
  IBD_CHECK(wc.status == IBV_WC_GENERAL_ERR);
  IBD_CHECK_EQ(wc.wr_id, 2);
  checkWc(ep.wait(ep.scq), 3, IBV_WC_WR_FLUSH_ERR);
  IBD_CHECK_EQ(ep.state(), IBV_QPS_ERR);
  publish("done.A");
}

// Port down and up through <DIR>/down-<host>-<device>-<port> (A's port; B is another host).
void portDownUp(const std::string& role) {
  const std::string downFile =
      boardDir() + "/down-" + fromEnv("THESEUS_FAKE_IBV_HOST", "") + "-" + fromEnv("IBD_DEVICE", "fake_mlx5_0") + "-1";
  std::vector<char> buf(4096, 0);
  auto ep = std::make_unique<Endpoint>();
  ConnectOptions quick;
  quick.timeout = 10;
  quick.retryCnt = 3;
  ep->exchange("qp", role, quick);
  ibv_mr* mr = ep->reg(buf.data(), buf.size(), kRemoteWrite);
  publish("mem." + role, RemoteMem{reinterpret_cast<uintptr_t>(buf.data()), mr->rkey}.text());
  const RemoteMem remote = RemoteMem::parse(await("mem." + peerRole(role)));
  if (role == "B") {
    await("down.A");
    // A's QP is in error and its port down: nothing is applied, this write times out.
    fill(buf);
    ibv_sge s = sge(buf.data(), 256, mr);
    IBD_CHECK_EQ(ep->postSend(IBV_WR_RDMA_WRITE, 1, &s, 1, IBV_SEND_SIGNALED, remote), 0);
    checkWc(ep->wait(ep->scq), 1, IBV_WC_RETRY_EXC_ERR);
    publish("failed.B");
    await("up.A");
    memset(buf.data(), 0, buf.size());
    Endpoint ep2;
    ep2.exchange("qp2", role);
    ibv_mr* mr2 = ep2.reg(buf.data(), buf.size(), kRemoteWrite);
    publish("mem2.B", RemoteMem{reinterpret_cast<uintptr_t>(buf.data()), mr2->rkey}.text());
    await("done.A");
    IBD_CHECK(matches(buf.data(), 512));
    return;
  }
  fill(buf);
  ibv_sge s = sge(buf.data(), 512, mr);
  IBD_CHECK_EQ(ep->postSend(IBV_WR_RDMA_WRITE, 1, &s, 1, IBV_SEND_SIGNALED, remote), 0);
  checkWc(ep->wait(ep->scq), 1, IBV_WC_SUCCESS);
  // B posted no receive: this send waits (RNR, forever), the write queues behind it.
  IBD_CHECK_EQ(ep->postSend(IBV_WR_SEND, 2, &s, 1, IBV_SEND_SIGNALED), 0);
  IBD_CHECK_EQ(ep->postSend(IBV_WR_RDMA_WRITE, 3, &s, 1, 0, remote), 0);
  IBD_CHECK(ep->quiet(ep->scq, 50));
  memset(buf.data(), 0, buf.size());
  FILE* f = fopen(downFile.c_str(), "w");
  IBD_CHECK(f != nullptr);
  fclose(f);
  ibv_async_event ev{};
  IBD_CHECK(ep->waitAsync(IBV_EVENT_PORT_ERR, 5000, &ev));
  IBD_CHECK_EQ(ev.element.port_num, 1);
  checkWc(ep->wait(ep->scq), 2, IBV_WC_RETRY_EXC_ERR);
  checkWc(ep->wait(ep->scq), 3, IBV_WC_WR_FLUSH_ERR);
  IBD_CHECK_EQ(ep->state(), IBV_QPS_ERR);
  ibv_port_attr pa;
  IBD_CHECK_EQ(ibv_query_port(ep->ctx, 1, &pa), 0);
  IBD_CHECK_EQ(pa.state, IBV_PORT_DOWN);
  publish("down.A");
  await("failed.B");
  IBD_CHECK(std::all_of(buf.begin(), buf.end(), [](char c) { return c == 0; }));
  IBD_CHECK_EQ(unlink(downFile.c_str()), 0);
  IBD_CHECK(ep->waitAsync(IBV_EVENT_PORT_ACTIVE, 5000, &ev));
  IBD_CHECK_EQ(ev.element.port_num, 1);
  IBD_CHECK_EQ(ibv_query_port(ep->ctx, 1, &pa), 0);
  IBD_CHECK_EQ(pa.state, IBV_PORT_ACTIVE);
  IBD_CHECK_EQ(ep->state(), IBV_QPS_ERR);  // old QPs stay in error
  publish("up.A");
  // A new QP on the port works.
  Endpoint ep2;
  ep2.exchange("qp2", role);
  fill(buf);
  ibv_mr* mr2 = ep2.reg(buf.data(), buf.size(), kLocal);
  ibv_sge s2 = sge(buf.data(), 512, mr2);
  IBD_CHECK_EQ(ep2.postSend(IBV_WR_RDMA_WRITE, 9, &s2, 1, IBV_SEND_SIGNALED, RemoteMem::parse(await("mem2.B"))), 0);
  checkWc(ep2.wait(ep2.scq), 9, IBV_WC_SUCCESS);
  publish("done.A");
}

// B dies (the test's parent publishes exited.B once it has reaped it, or B dies with A's WR in flight).
void peerDeath(const std::string& role) {
  const bool inFlight = variant() == "in_flight";
  Endpoint ep;
  ep.exchange("qp", role);
  std::vector<char> buf(4096, 0);
  ibv_mr* mr = ep.reg(buf.data(), buf.size(), kRemoteWrite);
  if (role == "B") {
    publish("mem.B", RemoteMem{reinterpret_cast<uintptr_t>(buf.data()), mr->rkey}.text());
    if (inFlight) await("sent.A");
    _exit(0);  // no clean-up: sockets close as the process goes
  }
  const RemoteMem remote = RemoteMem::parse(await("mem.B"));
  ibv_sge s = sge(buf.data(), 256, mr);
  const int64_t t0 = nowMs();
  if (inFlight) {
    IBD_CHECK_EQ(ep.postSend(IBV_WR_SEND, 1, &s, 1), 0);  // no receive there: RNR until B dies
    publish("sent.A");
  } else {
    await("exited.B");
    IBD_CHECK_EQ(ep.postSend(IBV_WR_RDMA_WRITE, 1, &s, 1, IBV_SEND_SIGNALED, remote), 0);
  }
  IBD_CHECK_EQ(ep.postSend(IBV_WR_RDMA_WRITE, 2, &s, 1, IBV_SEND_SIGNALED, remote), 0);
  checkWc(ep.wait(ep.scq, 10000), 1, IBV_WC_RETRY_EXC_ERR);
  checkWc(ep.wait(ep.scq), 2, IBV_WC_WR_FLUSH_ERR);
  IBD_CHECK(nowMs() - t0 < 5000);
  IBD_CHECK_EQ(ep.state(), IBV_QPS_ERR);
}

// RNR: a send before the receive is posted waits (rnr_retry 7) or fails (IBD_VARIANT=exceeded).
void rnr(const std::string& role) {
  const bool exceeded = variant() == "exceeded";
  Endpoint ep;
  ConnectOptions co;
  if (exceeded) {
    co.rnrRetry = 2;
    co.minRnrTimer = 1;
  }
  ep.exchange("qp", role, co);
  std::vector<char> buf(4096, 0);
  if (role == "B") {
    ibv_mr* mr = ep.reg(buf.data(), buf.size(), kRemoteWrite);
    await("sent.A");
    if (exceeded) {
      await("done.A");
      IBD_CHECK_EQ(ep.state(), IBV_QPS_RTS);  // an RNR NAK is no error for the responder
      return;
    }
    sleepMs(300);
    ibv_sge r = sge(buf.data(), 4096, mr);
    IBD_CHECK_EQ(ep.postRecv(7, &r, 1), 0);
    const ibv_wc wc = ep.wait(ep.rcq);
    checkWc(wc, 7, IBV_WC_SUCCESS);
    IBD_CHECK_EQ(wc.byte_len, 1000);
    IBD_CHECK(matches(buf.data(), 1000));
    await("done.A");
    return;
  }
  fill(buf);
  ibv_mr* mr = ep.reg(buf.data(), buf.size(), kLocal);
  ibv_sge s = sge(buf.data(), 1000, mr);
  const int64_t t0 = nowMs();
  IBD_CHECK_EQ(ep.postSend(IBV_WR_SEND, 1, &s, 1), 0);
  publish("sent.A");
  if (exceeded) {
    checkWc(ep.wait(ep.scq, 5000), 1, IBV_WC_RNR_RETRY_EXC_ERR);
    IBD_CHECK_EQ(ep.state(), IBV_QPS_ERR);
  } else {
    checkWc(ep.wait(ep.scq), 1, IBV_WC_SUCCESS);
    IBD_CHECK(nowMs() - t0 >= 250);
  }
  publish("done.A");
}

// A CQ that would hold more than its cqe entries overruns (IBD_VARIANT=fault: cq_overrun_after in B).
void cqOverrun(const std::string& role) {
  const bool fault = variant() == "fault";
  EndpointOptions eo;
  if (role == "B" && !fault) eo.recvCqe = 2;
  Endpoint ep(eo);
  ep.exchange("qp", role);
  std::vector<char> buf(4096, 0);
  ibv_mr* mr = ep.reg(buf.data(), buf.size(), kRemoteWrite);
  const int sends = fault ? 2 : 3;
  if (role == "B") {
    ibv_sge r = sge(buf.data(), 64, mr);
    for (int i = 0; i < 4; ++i) IBD_CHECK_EQ(ep.postRecv(100 + i, &r, 1), 0);
    publish("recvs.B");
    await("sent.A");
    ibv_async_event ev{};
    IBD_CHECK(ep.waitAsync(IBV_EVENT_CQ_ERR, 5000, &ev));
    IBD_CHECK(ev.element.cq == ep.rcq);
    ibv_wc wc[4];
    IBD_CHECK_EQ(ibv_poll_cq(ep.rcq, 4, wc), -1);
    IBD_CHECK_EQ(ep.state(), IBV_QPS_ERR);
    publish("done.B");
    return;
  }
  await("recvs.B");
  ibv_sge s = sge(buf.data(), 64, mr);
  for (int i = 0; i < sends; ++i) {
    IBD_CHECK_EQ(ep.postSend(IBV_WR_SEND, 1 + i, &s, 1), 0);
    checkWc(ep.wait(ep.scq), 1 + i, IBV_WC_SUCCESS);
  }
  publish("sent.A");
  await("done.B");
}

// Both directions at once, as a collective does: each side RDMA-writes 32 MiB to the other, then
// posts many small SEND_WITH_IMMs from one thread while another thread polls the completions.
void bidirectional(const std::string& role) {
  constexpr size_t kBig = 32u << 20;
  constexpr int kSmall = 2000;
  EndpointOptions eo;
  eo.maxSendWr = 256;
  eo.maxRecvWr = 256;
  eo.sendCqe = 4096;
  eo.recvCqe = 4096;
  Endpoint ep(eo);
  ep.exchange("qp", role);
  std::vector<char> out(kBig), in(kBig, 0), small(kSmall * 64, 0);
  fill(out, role == "A" ? 0 : 1);
  ibv_mr* outMr = ep.reg(out.data(), kBig, kLocal);
  ibv_mr* inMr = ep.reg(in.data(), kBig, kRemoteWrite);
  ibv_mr* smallMr = ep.reg(small.data(), small.size(), kRemoteWrite);
  // Receives are reposted by the poller; the first 256 go up front.
  for (int i = 0; i < 256; ++i) {
    ibv_sge r = sge(small.data() + 64 * i, 64, smallMr);
    IBD_CHECK_EQ(ep.postRecv(i, &r, 1), 0);
  }
  publish("mem." + role, RemoteMem{reinterpret_cast<uintptr_t>(in.data()), inMr->rkey}.text());
  const RemoteMem remote = RemoteMem::parse(await("mem." + peerRole(role)));
  ibv_sge big[2] = {sge(out.data(), kBig / 2, outMr), sge(out.data() + kBig / 2, kBig / 2, outMr)};
  IBD_CHECK_EQ(ep.postSend(IBV_WR_RDMA_WRITE_WITH_IMM, 1000000, big, 2, IBV_SEND_SIGNALED, remote, htonl(7)), 0);
  // One thread polls both CQs (reposting receives); this one posts, bounded by completions seen.
  std::atomic<int> sendsDone{0};
  std::atomic<bool> bigSent{false};
  std::thread poller([&] {
    int recvs = 0;
    bool bigSeen = false;
    const int64_t end = nowMs() + 60000;
    while ((recvs < kSmall + 1 || sendsDone.load() < kSmall || !bigSent.load()) && nowMs() < end) {
      ibv_wc wc[16];
      int n = ibv_poll_cq(ep.scq, 16, wc);
      IBD_CHECK(n >= 0);
      for (int i = 0; i < n; ++i) {
        IBD_CHECK_EQ(wc[i].status, IBV_WC_SUCCESS);
        if (wc[i].wr_id == 1000000) {
          bigSent = true;
        } else {
          IBD_CHECK_EQ(wc[i].wr_id, sendsDone.load());  // post order
          sendsDone.fetch_add(1);
        }
      }
      n = ibv_poll_cq(ep.rcq, 16, wc);
      IBD_CHECK(n >= 0);
      for (int i = 0; i < n; ++i) {
        IBD_CHECK_EQ(wc[i].status, IBV_WC_SUCCESS);
        IBD_CHECK(wc[i].wc_flags & IBV_WC_WITH_IMM);
        if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
          IBD_CHECK(!bigSeen);
          bigSeen = true;
          IBD_CHECK_EQ(wc[i].byte_len, kBig);
          IBD_CHECK(matches(in.data(), kBig, role == "A" ? 1 : 0));
        } else {
          IBD_CHECK_EQ(wc[i].opcode, IBV_WC_RECV);
          IBD_CHECK(bigSeen);  // arrival order: the big write was first
          IBD_CHECK_EQ(ntohl(wc[i].imm_data), recvs - 1);  // arrival order
        }
        const int slot = static_cast<int>(wc[i].wr_id % 256);
        ibv_sge r = sge(small.data() + 64 * slot, 64, smallMr);
        IBD_CHECK_EQ(ep.postRecv(wc[i].wr_id + 256, &r, 1), 0);
        ++recvs;
      }
    }
    IBD_CHECK_EQ(recvs, kSmall + 1);
  });
  for (int i = 0; i < kSmall; ++i) {
    while (i - sendsDone.load() >= 200) usleep(10);  // stay under max_send_wr
    ibv_sge s = sge(out.data() + 64 * i, 64, outMr);
    IBD_CHECK_EQ(ep.postSend(IBV_WR_SEND_WITH_IMM, i, &s, 1, IBV_SEND_SIGNALED, {}, htonl(i)), 0);
  }
  poller.join();
  publish("done." + role);
  await("done." + peerRole(role));
}

// One process, two QPs connected to each other. Sends stuck in RNR (no receive on the peer) and
// posted receives are all flushed, in order, when the QP is moved to the error state; so is what
// is posted afterwards.
void flushOnError(const std::string&) {
  Endpoint x, y;
  x.connect(y.address());
  y.connect(x.address());
  std::vector<char> buf(4096, 0);
  ibv_mr* mr = x.reg(buf.data(), buf.size(), kRemoteWrite);
  ibv_sge s = sge(buf.data(), 64, mr);
  IBD_CHECK_EQ(x.postSend(IBV_WR_SEND, 1, &s, 1), 0);
  IBD_CHECK_EQ(x.postSend(IBV_WR_SEND, 2, &s, 1, 0), 0);  // unsignaled: flushed all the same
  IBD_CHECK_EQ(x.postSend(IBV_WR_RDMA_WRITE, 3, &s, 1, IBV_SEND_SIGNALED, {}), 0);
  IBD_CHECK_EQ(x.postRecv(10, &s, 1), 0);
  IBD_CHECK_EQ(x.postRecv(11, &s, 1), 0);
  IBD_CHECK(x.quiet(x.scq, 50));
  ibv_qp_attr err{};
  err.qp_state = IBV_QPS_ERR;
  IBD_CHECK_EQ(ibv_modify_qp(x.qp, &err, IBV_QP_STATE), 0);
  for (uint64_t wr = 1; wr <= 3; ++wr) checkWc(x.wait(x.scq), wr, IBV_WC_WR_FLUSH_ERR);
  checkWc(x.wait(x.rcq), 10, IBV_WC_WR_FLUSH_ERR);
  checkWc(x.wait(x.rcq), 11, IBV_WC_WR_FLUSH_ERR);
  IBD_CHECK_EQ(x.postSend(IBV_WR_SEND, 4, &s, 1, 0), 0);
  checkWc(x.wait(x.scq), 4, IBV_WC_WR_FLUSH_ERR);
  IBD_CHECK_EQ(x.postRecv(12, &s, 1), 0);
  checkWc(x.wait(x.rcq), 12, IBV_WC_WR_FLUSH_ERR);
  IBD_CHECK(x.quiet(x.scq, 20) && x.quiet(x.rcq, 1));
  IBD_CHECK(y.quiet(y.rcq, 1));
}

const struct {
  const char* name;
  ScenarioFn fn;
} kScenarios[] = {
    {"write_imm", writeWithImm},
    {"send_recv", sendRecv},
    {"inline", inlineSend},
    {"read", rdmaRead},
    {"access_error", accessError},
    {"qp_error_fault", qpErrorFault},
    {"flush_on_error", flushOnError},
    {"bidirectional", bidirectional},
    {"port_down_up", portDownUp},
    {"peer_death", peerDeath},
    {"rnr", rnr},
    {"cq_overrun", cqOverrun},
    {"api_devices", apiDevices},
    {"api_default_devices", apiDefaultDevices},
    {"api_no_devices", apiNoDevices},
    {"api_identity", apiIdentity},
    {"api_modify_qp", apiModifyQp},
    {"api_resource_errors", apiResourceErrors},
    {"api_reg_mr_fault", apiRegMrFault},
    {"api_completion_channel", apiCompletionChannel},
    {"api_garbage_frames", apiGarbageFrames},
};

}  // namespace

ScenarioFn findScenario(const std::string& name) {
  for (const auto& s : kScenarios)
    if (name == s.name) return s.fn;
  return nullptr;
}

}  // namespace theseus::ibdouble
