// Single-process scenarios of the ib_double tests: devices, ports, GIDs, the QP
// state machine, resource errors, completion channels and malformed frames.
// Each runs in its own process because the configuration is read once per process.
#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "ib_double_endpoint.h"
#include "ib_double_scenarios.h"

namespace theseus::ibdouble {
namespace {

std::string host() {
  const char* h = getenv("THESEUS_FAKE_IBV_HOST");
  IBD_CHECK(h != nullptr);
  return h;
}

ibv_device* findDevice(ibv_device** list, const char* name) {
  for (int i = 0; list[i] != nullptr; ++i)
    if (strcmp(ibv_get_device_name(list[i]), name) == 0) return list[i];
  failCheck(__FILE__, __LINE__, std::string("no device ") + name);
}

bool sameGid(const ibv_gid& a, const ibv_gid& b) { return memcmp(a.raw, b.raw, 16) == 0; }

std::string gidText(const ibv_gid& g) {
  char buf[64];
  inet_ntop(AF_INET6, g.raw, buf, sizeof(buf));
  return buf;
}

// The QP numbers of a fresh endpoint's modify sequence, with one attribute bit removed or added.
int modifyInit(ibv_qp* qp, int mask, uint8_t port = 1) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = port;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  return ibv_modify_qp(qp, &a, mask);
}

constexpr int kInitMask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
constexpr int kRtrMask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
constexpr int kRtsMask =
    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;

ibv_qp_attr rtrAttr(uint16_t dlid, bool global, const ibv_gid& dgid) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = 1234;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.port_num = 1;
  a.ah_attr.dlid = dlid;
  a.ah_attr.is_global = global ? 1 : 0;
  a.ah_attr.grh.dgid = dgid;
  return a;
}

ibv_qp_attr rtsAttr() {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  return a;
}

// A raw connection to a QP's socket under the double's naming scheme (fake_ibv_wire.cc).
int connectRaw(uint16_t lid, uint32_t qpn) {
  char name[32];
  snprintf(name, sizeof(name), "/a%04x-%06x", lid, qpn);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  snprintf(addr.sun_path, sizeof(addr.sun_path), "%s%s", boardDir().c_str(), name);
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  IBD_CHECK(fd >= 0);
  IBD_CHECK_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  return fd;
}

}  // namespace

// THESEUS_FAKE_IBV_DEVICES="fa:ports=2:link=eth:speed=100000:mtu=2048,fb", host hostX.
void apiDevices(const std::string&) {
  int n = -1;
  ibv_device** list = ibv_get_device_list(&n);
  IBD_CHECK(list != nullptr);
  IBD_CHECK_EQ(n, 2);
  IBD_CHECK(list[2] == nullptr);
  ibv_device* fa = findDevice(list, "fa");
  ibv_device* fb = findDevice(list, "fb");
  IBD_CHECK_EQ(fa->node_type, IBV_NODE_CA);
  IBD_CHECK_EQ(fa->transport_type, IBV_TRANSPORT_IB);
  IBD_CHECK(std::string(fa->ibdev_path) == boardDir() + "/sys/" + host() + "/fa");
  IBD_CHECK(std::string(fa->name) == "fa" && fa->dev_name[0] != '\0');
  IBD_CHECK(ibv_get_device_guid(fa) != 0 && ibv_get_device_guid(fa) != ibv_get_device_guid(fb));

  ibv_context* ca = ibv_open_device(fa);
  ibv_context* cb = ibv_open_device(fb);
  IBD_CHECK(ca != nullptr && cb != nullptr);
  IBD_CHECK(ca->async_fd >= 0 && ca->ops.post_send != nullptr && ca->ops.poll_cq != nullptr);
  ibv_device_attr da;
  IBD_CHECK_EQ(ibv_query_device(ca, &da), 0);
  IBD_CHECK_EQ(da.phys_port_cnt, 2);
  IBD_CHECK_EQ(da.max_qp_wr, 8192);
  IBD_CHECK_EQ(da.max_sge, 30);
  IBD_CHECK_EQ(da.max_cqe, 65536);
  IBD_CHECK_EQ(da.max_qp, 4096);
  IBD_CHECK(da.max_mr_size == (1ULL << 40));
  IBD_CHECK(da.node_guid == ibv_get_device_guid(fa));

  ibv_port_attr pa;
  IBD_CHECK_EQ(ibv_query_port(ca, 1, &pa), 0);
  IBD_CHECK_EQ(pa.state, IBV_PORT_ACTIVE);
  IBD_CHECK_EQ(pa.link_layer, IBV_LINK_LAYER_ETHERNET);
  IBD_CHECK_EQ(pa.active_mtu, IBV_MTU_2048);
  IBD_CHECK_EQ(pa.active_speed, 32);  // EDR (25 Gb/s a lane) ...
  IBD_CHECK_EQ(pa.active_width, 2);   // ... times 4
  IBD_CHECK_EQ(pa.lid, 0);
  IBD_CHECK_EQ(pa.gid_tbl_len, 4);
  IBD_CHECK_EQ(ibv_query_port(ca, 3, &pa), EINVAL);
  IBD_CHECK_EQ(ibv_query_port(cb, 1, &pa), 0);
  IBD_CHECK_EQ(pa.link_layer, IBV_LINK_LAYER_INFINIBAND);
  IBD_CHECK(pa.lid != 0);
  IBD_CHECK_EQ(pa.active_mtu, IBV_MTU_4096);
  IBD_CHECK_EQ(pa.active_speed, 64);  // HDR x4 = 200 Gb/s, the default
  IBD_CHECK_EQ(pa.active_width, 2);
  // A degraded link (the rate-file): the port reports the lower rate while the file exists.
  const std::string rate = boardDir() + "/rate-" + host() + "-fb-1";
  FILE* f = fopen(rate.c_str(), "w");
  IBD_CHECK(f != nullptr);
  fprintf(f, "25000\n");
  fclose(f);
  IBD_CHECK_EQ(ibv_query_port(cb, 1, &pa), 0);
  IBD_CHECK_EQ(pa.state, IBV_PORT_ACTIVE);
  IBD_CHECK_EQ(pa.active_speed, 32);  // EDR ...
  IBD_CHECK_EQ(pa.active_width, 1);   // ... x1
  unlink(rate.c_str());
  IBD_CHECK_EQ(ibv_query_port(cb, 1, &pa), 0);
  IBD_CHECK_EQ(pa.active_speed, 64);
  IBD_CHECK_EQ(pa.active_width, 2);

  // RoCE: fe80::<guid> as v1 and v2, then ::ffff:10.x.y.<port> as v1 and v2.
  ibv_gid_entry e[4];
  for (uint32_t i = 0; i < 4; ++i) IBD_CHECK_EQ(ibv_query_gid_ex(ca, 1, i, &e[i], 0), 0);
  IBD_CHECK_EQ(e[0].gid_type, IBV_GID_TYPE_ROCE_V1);
  IBD_CHECK_EQ(e[1].gid_type, IBV_GID_TYPE_ROCE_V2);
  IBD_CHECK_EQ(e[2].gid_type, IBV_GID_TYPE_ROCE_V1);
  IBD_CHECK_EQ(e[3].gid_type, IBV_GID_TYPE_ROCE_V2);
  IBD_CHECK(sameGid(e[0].gid, e[1].gid) && sameGid(e[2].gid, e[3].gid));
  IBD_CHECK(e[0].gid.raw[0] == 0xfe && e[0].gid.raw[1] == 0x80);
  IBD_CHECK(gidText(e[2].gid).rfind("::ffff:10.", 0) == 0 && e[2].gid.raw[15] == 1);
  ibv_gid g;
  IBD_CHECK_EQ(ibv_query_gid(ca, 1, 2, &g), 0);
  IBD_CHECK(sameGid(g, e[2].gid));
  IBD_CHECK_EQ(ibv_query_gid(ca, 1, 4, &g), -1);
  ibv_gid_entry p2;
  IBD_CHECK_EQ(ibv_query_gid_ex(ca, 2, 0, &p2, 0), 0);
  IBD_CHECK(!sameGid(p2.gid, e[0].gid));
  IBD_CHECK_EQ(ibv_query_gid_ex(cb, 1, 0, &p2, 0), 0);
  IBD_CHECK_EQ(p2.gid_type, IBV_GID_TYPE_IB);
  IBD_CHECK_EQ(ibv_query_gid(cb, 1, 1, &g), -1);
  __be16 pkey = 0;
  IBD_CHECK_EQ(ibv_query_pkey(cb, 1, 0, &pkey), 0);
  IBD_CHECK_EQ(ntohs(pkey), 0xffff);
  IBD_CHECK(std::string(ibv_wc_status_str(IBV_WC_RETRY_EXC_ERR)) == "transport retry counter exceeded");
  IBD_CHECK(std::string(ibv_event_type_str(IBV_EVENT_PORT_ERR)) == "port error");
  IBD_CHECK_EQ(ibv_fork_init(), 0);
  IBD_CHECK_EQ(ibv_close_device(ca), 0);
  IBD_CHECK_EQ(ibv_close_device(cb), 0);
  ibv_free_device_list(list);
}

void apiDefaultDevices(const std::string&) {
  int n = -1;
  ibv_device** list = ibv_get_device_list(&n);
  IBD_CHECK_EQ(n, 1);
  IBD_CHECK(std::string(ibv_get_device_name(list[0])) == "fake_mlx5_0");
  ibv_context* c = ibv_open_device(list[0]);
  ibv_port_attr pa;
  IBD_CHECK_EQ(ibv_query_port(c, 1, &pa), 0);
  IBD_CHECK_EQ(pa.link_layer, IBV_LINK_LAYER_INFINIBAND);
  ibv_device_attr da;
  IBD_CHECK_EQ(ibv_query_device(c, &da), 0);
  IBD_CHECK_EQ(da.phys_port_cnt, 1);
  IBD_CHECK_EQ(ibv_close_device(c), 0);
  ibv_free_device_list(list);
}

void apiNoDevices(const std::string&) {
  int n = -1;
  ibv_device** list = ibv_get_device_list(&n);
  IBD_CHECK(list != nullptr && list[0] == nullptr);
  IBD_CHECK_EQ(n, 0);
  ibv_free_device_list(list);
}

// Roles A and C share a host, B is another: identities are equal within a host and differ across.
void apiIdentity(const std::string& role) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ibv_context* c = ibv_open_device(list[0]);
  ibv_port_attr pa;
  IBD_CHECK_EQ(ibv_query_port(c, 1, &pa), 0);
  ibv_gid g;
  IBD_CHECK_EQ(ibv_query_gid(c, 1, 0, &g), 0);
  const std::string mine = std::to_string(ibv_get_device_guid(list[0])) + " " + std::to_string(pa.lid) + " " + gidText(g);
  publish("id." + role, mine);
  if (role == "A") {
    IBD_CHECK(await("id.B") != mine);
    IBD_CHECK(await("id.C") == mine);
  }
  IBD_CHECK_EQ(ibv_close_device(c), 0);
  ibv_free_device_list(list);
}

// The attr_mask rules of the real drivers, on an IB port (IBD_DEVICE names it) and a RoCE one.
void apiModifyQp(const std::string&) {
  for (const char* dev : {"ib0", "roce0"}) {
    EndpointOptions eo;
    eo.device = dev;
    Endpoint ep(eo);
    IBD_CHECK_EQ(ep.state(), IBV_QPS_RESET);
    ibv_sge none{};
    IBD_CHECK_EQ(ep.postRecv(1, &none, 0), EINVAL);  // RESET: no receives
    IBD_CHECK_EQ(modifyInit(ep.qp, kInitMask & ~IBV_QP_ACCESS_FLAGS), EINVAL);
    IBD_CHECK_EQ(modifyInit(ep.qp, kInitMask & ~IBV_QP_PORT), EINVAL);
    IBD_CHECK_EQ(modifyInit(ep.qp, kInitMask | IBV_QP_DEST_QPN), EINVAL);
    IBD_CHECK_EQ(modifyInit(ep.qp, kInitMask, 2), EINVAL);  // no such port
    ibv_qp_attr rtr = rtrAttr(ep.lid, ep.roce, ep.gid);
    IBD_CHECK_EQ(ibv_modify_qp(ep.qp, &rtr, kRtrMask), EINVAL);  // RESET -> RTR
    IBD_CHECK_EQ(modifyInit(ep.qp, kInitMask), 0);
    IBD_CHECK_EQ(ep.state(), IBV_QPS_INIT);
    IBD_CHECK_EQ(ep.postSend(IBV_WR_SEND, 1, &none, 0), EINVAL);  // INIT: no sends
    IBD_CHECK_EQ(ep.postRecv(1, &none, 0), 0);
    IBD_CHECK_EQ(ibv_modify_qp(ep.qp, &rtr, kRtrMask & ~IBV_QP_MIN_RNR_TIMER), EINVAL);
    IBD_CHECK_EQ(ibv_modify_qp(ep.qp, &rtr, kRtrMask & ~IBV_QP_AV), EINVAL);
    IBD_CHECK_EQ(ibv_modify_qp(ep.qp, &rtr, kRtrMask | IBV_QP_SQ_PSN), EINVAL);
    ibv_qp_attr bad = rtr;
    if (ep.roce) {
      bad.ah_attr.is_global = 0;  // RoCE needs a GRH
    } else {
      bad.ah_attr.dlid = 0;  // IB needs a LID
    }
    IBD_CHECK_EQ(ibv_modify_qp(ep.qp, &bad, kRtrMask), EINVAL);
    bad = rtr;
    bad.max_dest_rd_atomic = 200;
    IBD_CHECK_EQ(ibv_modify_qp(ep.qp, &bad, kRtrMask), EINVAL);
    IBD_CHECK_EQ(ibv_modify_qp(ep.qp, &rtr, kRtrMask), 0);
    IBD_CHECK_EQ(ep.state(), IBV_QPS_RTR);
    IBD_CHECK_EQ(ep.postSend(IBV_WR_SEND, 1, &none, 0), EINVAL);  // RTR: no sends
    ibv_qp_attr rts = rtsAttr();
    IBD_CHECK_EQ(ibv_modify_qp(ep.qp, &rts, kRtsMask & ~IBV_QP_SQ_PSN), EINVAL);
    IBD_CHECK_EQ(ibv_modify_qp(ep.qp, &rts, kRtsMask | IBV_QP_DEST_QPN), EINVAL);
    rts.retry_cnt = 8;
    IBD_CHECK_EQ(ibv_modify_qp(ep.qp, &rts, kRtsMask), EINVAL);
    rts.retry_cnt = 7;
    IBD_CHECK_EQ(ibv_modify_qp(ep.qp, &rts, kRtsMask), 0);
    IBD_CHECK_EQ(ep.state(), IBV_QPS_RTS);
    ibv_qp_attr q{};
    ibv_qp_init_attr qi{};
    IBD_CHECK_EQ(ibv_query_qp(ep.qp, &q, IBV_QP_STATE | IBV_QP_DEST_QPN, &qi), 0);
    IBD_CHECK_EQ(q.dest_qp_num, 1234);
    IBD_CHECK_EQ(q.timeout, 14);
    IBD_CHECK_EQ(qi.qp_type, IBV_QPT_RC);
    ibv_qp_attr rtsToRtr{};
    rtsToRtr.qp_state = IBV_QPS_RTR;
    IBD_CHECK_EQ(ibv_modify_qp(ep.qp, &rtsToRtr, IBV_QP_STATE), EINVAL);
    ibv_qp_attr err{};
    err.qp_state = IBV_QPS_ERR;
    IBD_CHECK_EQ(ibv_modify_qp(ep.qp, &err, IBV_QP_STATE), 0);
    const ibv_wc wc = ep.wait(ep.rcq);  // the receive posted in INIT is flushed
    IBD_CHECK_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
    ibv_qp_attr reset{};
    reset.qp_state = IBV_QPS_RESET;
    IBD_CHECK_EQ(ibv_modify_qp(ep.qp, &reset, IBV_QP_STATE), 0);
    IBD_CHECK_EQ(modifyInit(ep.qp, kInitMask), 0);  // a reset QP starts over
  }
}

void apiResourceErrors(const std::string&) {
  Endpoint ep;
  ibv_qp_init_attr ud{};
  ud.send_cq = ep.scq;
  ud.recv_cq = ep.rcq;
  ud.qp_type = IBV_QPT_UD;
  ud.cap = ibv_qp_cap{4, 4, 1, 1, 0};
  errno = 0;
  IBD_CHECK(ibv_create_qp(ep.pd, &ud) == nullptr);
  IBD_CHECK_EQ(errno, EINVAL);
  ibv_qp_init_attr big = ud;
  big.qp_type = IBV_QPT_RC;
  big.cap.max_send_wr = 100000;
  IBD_CHECK(ibv_create_qp(ep.pd, &big) == nullptr);
  IBD_CHECK(ibv_create_cq(ep.ctx, 0, nullptr, nullptr, 0) == nullptr);
  IBD_CHECK(ibv_create_cq(ep.ctx, 70000, nullptr, nullptr, 0) == nullptr);

  std::vector<char> buf(8192);
  errno = 0;
  IBD_CHECK(ibv_reg_mr(ep.pd, buf.data(), buf.size(), IBV_ACCESS_REMOTE_WRITE) == nullptr);
  IBD_CHECK_EQ(errno, EINVAL);  // remote write needs local write
  // A page without access in the middle, a read-only page: EFAULT (what pinning them would say).
  char* pages = static_cast<char*>(mmap(nullptr, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  IBD_CHECK(pages != MAP_FAILED);
  IBD_CHECK_EQ(mprotect(pages + 4096, 4096, PROT_NONE), 0);
  errno = 0;
  IBD_CHECK(ibv_reg_mr(ep.pd, pages, 3 * 4096, IBV_ACCESS_LOCAL_WRITE) == nullptr);
  IBD_CHECK_EQ(errno, EFAULT);
  IBD_CHECK_EQ(mprotect(pages + 4096, 4096, PROT_READ), 0);
  errno = 0;
  IBD_CHECK(ibv_reg_mr(ep.pd, pages + 4096, 4096, IBV_ACCESS_LOCAL_WRITE) == nullptr);
  IBD_CHECK_EQ(errno, EFAULT);
  ibv_mr* readOnly = ibv_reg_mr(ep.pd, pages + 4096, 4096, 0);  // read-only memory, read-only access
  IBD_CHECK(readOnly != nullptr);
  IBD_CHECK_EQ(ibv_dereg_mr(readOnly), 0);
  ibv_mr* ok = ibv_reg_mr(ep.pd, pages, 4096, IBV_ACCESS_LOCAL_WRITE);
  IBD_CHECK(ok != nullptr);
  // Unmapped: a fresh reservation is released, then registered.
  void* gone = mmap(nullptr, 1 << 20, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  IBD_CHECK(gone != MAP_FAILED);
  IBD_CHECK_EQ(munmap(gone, 1 << 20), 0);
  errno = 0;
  ibv_mr* unmapped = ibv_reg_mr(ep.pd, gone, 1 << 20, IBV_ACCESS_LOCAL_WRITE);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // The sanitizer's allocator may have mapped the hole again in between.
  if (unmapped != nullptr) IBD_CHECK_EQ(ibv_dereg_mr(unmapped), 0);
#else
  IBD_CHECK(unmapped == nullptr);
#endif
  if (unmapped == nullptr) IBD_CHECK_EQ(errno, EFAULT);
  ibv_mr* iova = ibv_reg_mr_iova2(ep.pd, buf.data(), buf.size(), 0x10000, IBV_ACCESS_LOCAL_WRITE);
  IBD_CHECK(iova != nullptr && iova->lkey != ok->lkey);

  IBD_CHECK_EQ(ibv_dealloc_pd(ep.pd), EBUSY);  // MRs and a QP use it
  IBD_CHECK_EQ(ibv_destroy_cq(ep.scq), EBUSY);  // the QP uses it
  IBD_CHECK_EQ(ibv_dereg_mr(ok), 0);
  IBD_CHECK_EQ(ibv_dereg_mr(iova), 0);
  munmap(pages, 3 * 4096);

  // No event queued: a non-blocking async fd says EAGAIN.
  fcntl(ep.ctx->async_fd, F_SETFL, fcntl(ep.ctx->async_fd, F_GETFL) | O_NONBLOCK);
  ibv_async_event ev;
  errno = 0;
  IBD_CHECK_EQ(ibv_get_async_event(ep.ctx, &ev), -1);
  IBD_CHECK_EQ(errno, EAGAIN);
  fcntl(ep.ctx->async_fd, F_SETFL, fcntl(ep.ctx->async_fd, F_GETFL) & ~O_NONBLOCK);
}

void apiRegMrFault(const std::string&) {
  Endpoint ep;
  std::vector<char> buf(4096);
  errno = 0;
  IBD_CHECK(ibv_reg_mr(ep.pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE) == nullptr);
  IBD_CHECK_EQ(errno, ENOMEM);
}

// Two QPs of one process connected to each other; the receiver blocks in ibv_get_cq_event.
void apiCompletionChannel(const std::string&) {
  EndpointOptions eo;
  eo.channel = true;
  Endpoint rx(eo);
  Endpoint tx;
  rx.connect(tx.address());
  tx.connect(rx.address());
  std::vector<char> buf(4096, 'x');
  ibv_mr* rmr = rx.reg(buf.data(), 2048, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* tmr = tx.reg(buf.data() + 2048, 2048, IBV_ACCESS_LOCAL_WRITE);
  ibv_sge r = sge(buf.data(), 2048, rmr);
  IBD_CHECK_EQ(rx.postRecv(1, &r, 1), 0);
  IBD_CHECK_EQ(ibv_req_notify_cq(rx.rcq, 0), 0);
  std::thread sender([&] {
    sleepMs(50);
    ibv_sge s = sge(buf.data() + 2048, 100, tmr);
    IBD_CHECK_EQ(tx.postSend(IBV_WR_SEND, 2, &s, 1), 0);
  });
  ibv_cq* cq = nullptr;
  void* cqContext = nullptr;
  IBD_CHECK_EQ(ibv_get_cq_event(rx.channel, &cq, &cqContext), 0);  // blocks until the send lands
  IBD_CHECK(cq == rx.rcq && cqContext == &rx);
  ibv_ack_cq_events(cq, 1);
  const ibv_wc wc = rx.wait(rx.rcq, 1000);
  IBD_CHECK_EQ(wc.status, IBV_WC_SUCCESS);
  IBD_CHECK_EQ(wc.byte_len, 100);
  sender.join();
  IBD_CHECK_EQ(tx.wait(tx.scq).status, IBV_WC_SUCCESS);
  // Not re-armed: no event; a non-blocking channel says EAGAIN.
  fcntl(rx.channel->fd, F_SETFL, fcntl(rx.channel->fd, F_GETFL) | O_NONBLOCK);
  IBD_CHECK_EQ(ibv_get_cq_event(rx.channel, &cq, &cqContext), -1);
  IBD_CHECK_EQ(errno, EAGAIN);
}

// Garbage on a QP's socket is an error on that QP (IBV_EVENT_QP_FATAL); a request cut short by its
// requester closing is dropped and leaves the QP alone (a responder never sees missing packets);
// garbage answering a requester fails its WR. Never a crash.
void apiGarbageFrames(const std::string&) {
  for (const size_t bytes : {size_t{20}, size_t{4096}}) {
    Endpoint ep;
    ep.connect(ep.address());  // to itself: RTS, listening
    const int fd = connectRaw(ep.lid, ep.qp->qp_num);
    std::vector<char> junk(bytes, '\x5a');
    IBD_CHECK_EQ(write(fd, junk.data(), junk.size()), static_cast<ssize_t>(junk.size()));
    close(fd);
    ibv_async_event ev{};
    IBD_CHECK(ep.waitAsync(IBV_EVENT_QP_FATAL, 5000, &ev));
    IBD_CHECK(ev.element.qp == ep.qp);
    IBD_CHECK_EQ(ep.state(), IBV_QPS_ERR);
  }
  {
    Endpoint ep;
    ep.connect(ep.address());
    const int fd = connectRaw(ep.lid, ep.qp->qp_num);
    const uint32_t magic = 0x46494251;  // a request header's start (fake_ibv_wire.cc), then the end
    char partial[24] = {};
    memcpy(partial, &magic, sizeof(magic));
    IBD_CHECK_EQ(write(fd, partial, sizeof(partial)), static_cast<ssize_t>(sizeof(partial)));
    close(fd);
    IBD_CHECK(!ep.waitAsync(IBV_EVENT_QP_FATAL, 100));
    IBD_CHECK_EQ(ep.state(), IBV_QPS_RTS);
  }
  // A "peer" that answers a request with garbage: the WR fails with IBV_WC_BAD_RESP_ERR.
  Endpoint ep;
  const uint32_t fakeQpn = 0xabcde;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  snprintf(addr.sun_path, sizeof(addr.sun_path), "%s/a%04x-%06x", boardDir().c_str(), ep.lid, fakeQpn);
  const std::string path = addr.sun_path;
  const int lfd = socket(AF_UNIX, SOCK_STREAM, 0);
  IBD_CHECK_EQ(bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  IBD_CHECK_EQ(listen(lfd, 4), 0);
  std::string peer = ep.address();
  peer.replace(0, peer.find(' '), std::to_string(fakeQpn));
  ep.connect(peer);
  std::vector<char> buf(4096);
  ibv_mr* mr = ep.reg(buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ibv_sge s = sge(buf.data(), 64, mr);
  IBD_CHECK_EQ(ep.postSend(IBV_WR_RDMA_WRITE, 1, &s, 1, IBV_SEND_SIGNALED, RemoteMem{0x1000, 1}), 0);
  const int cfd = accept(lfd, nullptr, nullptr);
  IBD_CHECK(cfd >= 0);
  std::vector<char> junk(256, '\x33');
  IBD_CHECK_EQ(write(cfd, junk.data(), junk.size()), 256);
  const ibv_wc wc = ep.wait(ep.scq);
  IBD_CHECK_EQ(wc.status, IBV_WC_BAD_RESP_ERR);
  IBD_CHECK_EQ(ep.state(), IBV_QPS_ERR);
  close(cfd);
  close(lfd);
  unlink(path.c_str());
}

}  // namespace theseus::ibdouble
