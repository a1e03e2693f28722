#include "ib_double_endpoint.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace theseus::ibdouble {

void failCheck(const char* file, int line, const std::string& what) {
  fprintf(stderr, "[child %d] %s:%d: check failed: %s\n", static_cast<int>(getpid()), file, line, what.c_str());
  fflush(stderr);
  _exit(1);
}

std::string boardDir() {
  const char* dir = getenv("THESEUS_FAKE_IBV_DIR");
  IBD_CHECK(dir != nullptr);
  return dir;
}

void publish(const std::string& key, const std::string& value) {
  const std::string path = boardDir() + "/b-" + key;
  const std::string tmp = path + ".tmp" + std::to_string(getpid());
  {
    std::ofstream out(tmp);
    out << value;
    IBD_CHECK(out.good());
  }
  IBD_CHECK(rename(tmp.c_str(), path.c_str()) == 0);
}

bool published(const std::string& key) { return access((boardDir() + "/b-" + key).c_str(), F_OK) == 0; }

std::string await(const std::string& key, int timeoutMs) {
  const int64_t end = nowMs() + timeoutMs;
  while (!published(key)) {
    if (nowMs() > end) failCheck(__FILE__, __LINE__, "timed out waiting for board entry " + key);
    sleepMs(1);
  }
  std::ifstream in(boardDir() + "/b-" + key);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string peerRole(const std::string& role) { return role == "A" ? "B" : "A"; }

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void sleepMs(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

std::string RemoteMem::text() const {
  char buf[64];
  snprintf(buf, sizeof(buf), "%llx %x", static_cast<unsigned long long>(addr), rkey);
  return buf;
}

RemoteMem RemoteMem::parse(const std::string& text) {
  RemoteMem m;
  unsigned long long a = 0;
  unsigned k = 0;
  IBD_CHECK(sscanf(text.c_str(), "%llx %x", &a, &k) == 2);
  m.addr = a;
  m.rkey = k;
  return m;
}

ibv_sge sge(const void* addr, uint32_t length, const ibv_mr* mr) {
  return ibv_sge{reinterpret_cast<uintptr_t>(addr), length, mr != nullptr ? mr->lkey : 0};
}

Endpoint::Endpoint(const EndpointOptions& o) : port(o.port) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  IBD_CHECK(list != nullptr && n > 0);
  ibv_device* dev = list[0];
  for (int i = 0; o.device != nullptr && i < n; ++i)
    if (strcmp(ibv_get_device_name(list[i]), o.device) == 0) dev = list[i];
  ctx = ibv_open_device(dev);
  ibv_free_device_list(list);
  IBD_CHECK(ctx != nullptr);
  ibv_port_attr pa;
  IBD_CHECK_EQ(ibv_query_port(ctx, port, &pa), 0);
  roce = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
  lid = pa.lid;
  gidIndex = roce ? 3 : 0;
  IBD_CHECK_EQ(ibv_query_gid(ctx, port, gidIndex, &gid), 0);
  pd = ibv_alloc_pd(ctx);
  IBD_CHECK(pd != nullptr);
  if (o.channel) {
    channel = ibv_create_comp_channel(ctx);
    IBD_CHECK(channel != nullptr);
  }
  scq = ibv_create_cq(ctx, o.sendCqe, this, nullptr, 0);
  rcq = ibv_create_cq(ctx, o.recvCqe, this, channel, 0);
  IBD_CHECK(scq != nullptr && rcq != nullptr);
  ibv_qp_init_attr init{};
  init.send_cq = scq;
  init.recv_cq = rcq;
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = o.sigAll ? 1 : 0;
  init.cap = ibv_qp_cap{o.maxSendWr, o.maxRecvWr, o.maxSendSge, o.maxRecvSge, o.maxInline};
  qp = ibv_create_qp(pd, &init);
  IBD_CHECK(qp != nullptr);
  IBD_CHECK(qp->qp_num != 0);
}

Endpoint::~Endpoint() {
  if (qp != nullptr) IBD_CHECK_EQ(ibv_destroy_qp(qp), 0);
  for (int i = 0; i < nmrs_; ++i) IBD_CHECK_EQ(ibv_dereg_mr(mrs_[i]), 0);
  IBD_CHECK_EQ(ibv_destroy_cq(scq), 0);
  IBD_CHECK_EQ(ibv_destroy_cq(rcq), 0);
  if (channel != nullptr) IBD_CHECK_EQ(ibv_destroy_comp_channel(channel), 0);
  IBD_CHECK_EQ(ibv_dealloc_pd(pd), 0);
  IBD_CHECK_EQ(ibv_close_device(ctx), 0);
}

std::string Endpoint::address() const {
  std::string text = std::to_string(qp->qp_num) + " " + std::to_string(lid) + " " + (roce ? "1 " : "0 ");
  char byte[3];
  for (unsigned char b : gid.raw) {
    snprintf(byte, sizeof(byte), "%02x", b);
    text += byte;
  }
  return text;
}

void Endpoint::connect(const std::string& peer, const ConnectOptions& o) {
  unsigned qpn = 0, plid = 0, proce = 0;
  char gidHex[33] = {};
  IBD_CHECK(sscanf(peer.c_str(), "%u %u %u %32s", &qpn, &plid, &proce, gidHex) == 4);
  ibv_gid pgid{};
  for (int i = 0; i < 16; ++i) {
    unsigned b = 0;
    IBD_CHECK(sscanf(gidHex + 2 * i, "%2x", &b) == 1);
    pgid.raw[i] = static_cast<uint8_t>(b);
  }
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = port;
  a.qp_access_flags = o.access;
  IBD_CHECK_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_4096;
  a.dest_qp_num = qpn;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = o.minRnrTimer;
  a.ah_attr.port_num = port;
  a.ah_attr.dlid = static_cast<uint16_t>(plid);
  if (roce || o.useGid) {
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = pgid;
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(gidIndex);
    a.ah_attr.grh.hop_limit = 64;
  }
  IBD_CHECK_EQ(ibv_modify_qp(qp, &a,
                             IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
               0);
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = o.timeout;
  a.retry_cnt = o.retryCnt;
  a.rnr_retry = o.rnrRetry;
  a.sq_psn = 0;
  a.max_rd_atomic = 1;
  IBD_CHECK_EQ(ibv_modify_qp(qp, &a,
                             IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                 IBV_QP_MAX_QP_RD_ATOMIC),
               0);
}

void Endpoint::exchange(const std::string& tag, const std::string& role, const ConnectOptions& o) {
  publish(tag + "." + role, address());
  connect(await(tag + "." + peerRole(role)), o);
}

ibv_mr* Endpoint::reg(void* addr, size_t length, unsigned access) {
  IBD_CHECK(nmrs_ < 16);
  ibv_mr* mr = ibv_reg_mr(pd, addr, length, static_cast<int>(access));
  IBD_CHECK(mr != nullptr);
  mrs_[nmrs_++] = mr;
  return mr;
}

int Endpoint::postSend(ibv_wr_opcode op, uint64_t wrId, ibv_sge* sges, int n, unsigned flags,
                       const RemoteMem& remote, uint32_t imm) {
  ibv_send_wr wr{};
  wr.wr_id = wrId;
  wr.sg_list = sges;
  wr.num_sge = n;
  wr.opcode = op;
  wr.send_flags = flags;
  wr.imm_data = imm;
  wr.wr.rdma.remote_addr = remote.addr;
  wr.wr.rdma.rkey = remote.rkey;
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(qp, &wr, &bad);
  if (rc != 0) IBD_CHECK(bad == &wr);
  return rc;
}

int Endpoint::postRecv(uint64_t wrId, ibv_sge* sges, int n) {
  ibv_recv_wr wr{};
  wr.wr_id = wrId;
  wr.sg_list = sges;
  wr.num_sge = n;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(qp, &wr, &bad);
}

ibv_wc Endpoint::wait(ibv_cq* cq, int timeoutMs) {
  const int64_t end = nowMs() + timeoutMs;
  for (;;) {
    ibv_wc wc{};
    const int n = ibv_poll_cq(cq, 1, &wc);
    IBD_CHECK(n >= 0);
    if (n == 1) return wc;
    if (nowMs() > end) failCheck(__FILE__, __LINE__, "no completion within " + std::to_string(timeoutMs) + " ms");
    usleep(100);
  }
}

bool Endpoint::quiet(ibv_cq* cq, int ms) {
  const int64_t end = nowMs() + ms;
  while (nowMs() < end) {
    ibv_wc wc{};
    const int n = ibv_poll_cq(cq, 1, &wc);
    if (n != 0) return false;
    usleep(200);
  }
  return true;
}

ibv_qp_state Endpoint::state() {
  ibv_qp_attr a{};
  ibv_qp_init_attr init{};
  IBD_CHECK_EQ(ibv_query_qp(qp, &a, IBV_QP_STATE, &init), 0);
  IBD_CHECK_EQ(a.qp_state, qp->state);
  return a.qp_state;
}

bool Endpoint::waitAsync(ibv_event_type type, int timeoutMs, ibv_async_event* out) {
  const int flags = fcntl(ctx->async_fd, F_GETFL);
  fcntl(ctx->async_fd, F_SETFL, flags | O_NONBLOCK);
  const int64_t end = nowMs() + timeoutMs;
  bool found = false;
  while (!found && nowMs() < end) {
    pollfd p{ctx->async_fd, POLLIN, 0};
    if (poll(&p, 1, 10) <= 0) continue;
    ibv_async_event ev{};
    while (!found && ibv_get_async_event(ctx, &ev) == 0) {
      ibv_ack_async_event(&ev);
      if (ev.event_type != type) continue;
      if (out != nullptr) *out = ev;
      found = true;
    }
  }
  fcntl(ctx->async_fd, F_SETFL, flags);
  return found;
}

}  // namespace theseus::ibdouble
