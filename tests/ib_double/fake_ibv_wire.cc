// The wire of the libibverbs test double.
//
// Addressing. Every QP listens on a unix socket <DIR>/q<device key>-<qpn>; binding
// it exclusively is what allocates the QP number, so two processes of one host
// never share one. When the QP's port is known (INIT) it gets an alias
// <DIR>/a<lid>-<qpn>, a symlink to that socket: every LID and GID of a port names
// the port's LID (fake_ibv_config.cc), so a requester in RTR turns (dlid or dgid,
// dest_qp_num) into the alias path without any directory service.
//
// Protocol. A requester connects to its peer's alias lazily (first WR in RTS) and
// sends one request frame per WR: a WireHeader, then the payload (the gathered
// data of a write or send). The responder applies it under State::mu, data
// before its receive completion, and answers with a response frame (an ACK, the
// data of a read, or a NAK). The requester completes the WR only then, so the
// target's memory holds the data before the requester's completion. One WR per QP
// is on the wire at a time: RC ordering, RNR and retry are then simple state.
//
// NAKs: kRetry means "not applied, try again" (the responder QP is not in
// RTR/RTS, its port is down or the address names another port); the requester
// retries until its retry budget is spent, then IBV_WC_RETRY_EXC_ERR, which is
// what real hardware reports when nothing answers. A lost connection (a peer that
// died) is retried the same way. kRnr carries the responder's min_rnr_timer.
//
// Threading. One wire thread per process polls every socket; it holds State::mu
// except inside poll(). All sockets are non-blocking, so a peer that stops
// reading never blocks the thread (its QPs time out instead).
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "fake_ibv_wire.h"

namespace theseus::fakeibv {
namespace {

constexpr uint32_t kRequestMagic = 0x46494251;   // "QBIF"
constexpr uint32_t kResponseMagic = 0x46494252;  // "RBIF"
constexpr size_t kReadChunk = 256 * 1024;
constexpr auto kPortCheckPeriod = std::chrono::milliseconds(10);
constexpr auto kConnectRetry = std::chrono::milliseconds(1);
// A request in flight fails when its connection moves no byte for max(retry budget, this): it only
// catches a peer that is alive but frozen (a dead one closes its socket), and a slow (sanitized)
// peer busy copying a large frame must not look frozen.
constexpr auto kMinIdle = std::chrono::milliseconds(2000);

enum WireOp : uint8_t { kOpWrite = 1, kOpSend = 2, kOpRead = 3 };
enum WireStatus : uint8_t { kAck = 1, kRetry, kRnr, kAccess, kInvalid, kOpError };

struct WireHeader {
  uint32_t magic;
  uint8_t kind;    // request: WireOp; response: WireStatus
  uint8_t hasImm;  // request
  uint16_t dstLid; // request: the port the requester addresses
  uint32_t seq;
  uint32_t dstQpn;
  uint32_t srcQpn;
  uint32_t imm;      // request: immediate; kRnr: the responder's min_rnr_timer
  uint32_t rkey;
  uint32_t length;   // request: the operation's length (a read: bytes wanted)
  uint32_t payload;  // bytes that follow the header
  uint32_t reserved;
  uint64_t raddr;
};
static_assert(sizeof(WireHeader) == 48);

std::string hex(uint64_t v, int digits) {
  char buf[24];
  snprintf(buf, sizeof(buf), "%0*llx", digits, static_cast<unsigned long long>(v));
  return buf;
}

bool makeAddress(const std::string& path, sockaddr_un* addr) {
  memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr->sun_path)) return false;
  memcpy(addr->sun_path, path.c_str(), path.size() + 1);
  return true;
}

const FakeDevice* devOf(const FakeQp* qp) { return qp->ctx->dev; }

uint16_t localLid(const State& s, const FakeQp* qp) {
  return portLid(s.cfg.host, devOf(qp)->cfg.name, qp->port);
}

// The RNR timer encoding of the IB spec, in microseconds (0 means 655.36 ms), bounded for tests.
Clock::duration rnrDelay(uint32_t code) {
  static const uint32_t kUs[32] = {655360, 10,    20,    30,    40,    60,     80,     120,
                                   160,    240,   320,   480,   640,   960,    1280,   1920,
                                   2560,   3840,  5120,  7680,  10240, 15360,  20480,  30720,
                                   40960,  61440, 81920, 122880, 163840, 245760, 327680, 491520};
  const uint32_t us = kUs[code & 31];
  return std::chrono::microseconds(std::clamp<uint32_t>(us, 200, 100000));
}

// ---- buffers and sockets ------------------------------------------------------------

enum class Io { kOk, kEof, kError };

// Reads what is there (bounded per call); progress is set when a byte arrived.
Io readSome(int fd, Buffer* b, bool* progress) {
  for (int i = 0; i < 64; ++i) {
    const size_t old = b->bytes.size();
    b->bytes.resize(old + kReadChunk);
    const ssize_t n = recv(fd, b->bytes.data() + old, kReadChunk, MSG_DONTWAIT);
    b->bytes.resize(old + (n > 0 ? static_cast<size_t>(n) : 0));
    if (n > 0) {
      *progress = true;
      continue;
    }
    if (n == 0) return Io::kEof;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK ? Io::kOk : Io::kError;
  }
  return Io::kOk;
}

Io flush(int fd, Buffer* b, bool* progress) {
  while (b->size() > 0) {
    const ssize_t n = send(fd, b->data(), b->size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      b->consume(static_cast<size_t>(n));
      *progress = true;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Io::kOk;
    return Io::kError;
  }
  return Io::kOk;
}

// Appends header + n bytes copied from src (the DMA engine's read of local memory).
void appendFrame(Buffer* out, const WireHeader& h, const char* src, size_t n) {
  out->append(&h, sizeof(h));
  if (n == 0) return;
  const size_t old = out->bytes.size();
  out->bytes.resize(old + n);
  dmaCopy(out->bytes.data() + old, src, n);
}

// ---- requester ----------------------------------------------------------------------

void beginEpisode(FakeQp* qp, Clock::time_point now) {
  if (qp->inEpisode) return;
  qp->inEpisode = true;
  qp->episodeEnd = now + retryBudget(qp);
}

Clock::duration idleBudget(const FakeQp* qp) { return std::max<Clock::duration>(retryBudget(qp), kMinIdle); }

void connectionLost(FakeQp* qp, Clock::time_point now) {
  closeRequesterLocked(qp);
  if (qp->sq.empty()) return;  // nothing to retry: the next WR connects again
  beginEpisode(qp, now);
  qp->nextAttempt = now + kConnectRetry;
}

bool connectPeer(FakeQp* qp) {
  sockaddr_un addr;
  if (!makeAddress(qp->peerPath, &addr)) return false;
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);  // ENOENT (no such QP yet), ECONNREFUSED (its process died), EAGAIN (backlog full)
    return false;
  }
  qp->outFd = fd;
  return true;
}

// Appends the request frame of the head WR; false with *err when a local SGE is not registered.
bool buildRequest(State& s, FakeQp* qp, SendWqe& w, ibv_wc_status* err) {
  WireHeader h;
  memset(&h, 0, sizeof(h));
  h.magic = kRequestMagic;
  h.kind = w.op == IBV_WR_RDMA_READ                                         ? kOpRead
           : w.op == IBV_WR_RDMA_WRITE || w.op == IBV_WR_RDMA_WRITE_WITH_IMM ? kOpWrite
                                                                             : kOpSend;
  h.hasImm = w.hasImm ? 1 : 0;
  h.dstLid = qp->ah.is_global ? lidFromGid(qp->ah.grh.dgid) : qp->ah.dlid;
  if (w.seq == 0) w.seq = qp->nextSeq++;
  h.seq = w.seq;
  h.dstQpn = qp->destQpn;
  h.srcQpn = qp->qp.qp_num;
  h.imm = w.imm;
  h.rkey = w.rkey;
  h.raddr = w.raddr;
  h.length = w.length;
  if (h.kind == kOpRead || w.isInline) {
    h.payload = h.kind == kOpRead ? 0 : w.length;
    appendFrame(&qp->out, h, w.inlineData.data(), h.payload);
    return true;
  }
  for (const ibv_sge& sge : w.sges) {
    if (sge.length != 0 && localRange(s, qp, sge.lkey, sge.addr, sge.length, false) == nullptr) {
      *err = IBV_WC_LOC_PROT_ERR;
      return false;
    }
  }
  h.payload = w.length;
  qp->out.append(&h, sizeof(h));
  for (const ibv_sge& sge : w.sges) {
    if (sge.length == 0) continue;
    const size_t old = qp->out.bytes.size();
    qp->out.bytes.resize(old + sge.length);
    dmaCopy(qp->out.bytes.data() + old, localRange(s, qp, sge.lkey, sge.addr, sge.length, false), sge.length);
  }
  return true;
}

// Scatters the data of a read response into the head WR's SGEs.
bool scatterRead(State& s, FakeQp* qp, const SendWqe& w, const char* data) {
  for (const ibv_sge& sge : w.sges)
    if (sge.length != 0 && localRange(s, qp, sge.lkey, sge.addr, sge.length, true) == nullptr) return false;
  for (const ibv_sge& sge : w.sges) {
    if (sge.length == 0) continue;
    dmaCopy(localRange(s, qp, sge.lkey, sge.addr, sge.length, true), data, sge.length);
    data += sge.length;
  }
  return true;
}

void onResponse(State& s, FakeQp* qp, const WireHeader& h, const char* payload, Clock::time_point now) {
  if (!qp->inFlight || qp->sq.empty() || h.seq != qp->sq.front().seq) {
    warn("QP %u: response for a request not in flight (seq %u); the QP goes to the error state", qp->qp.qp_num,
         h.seq);
    moveToError(s, qp, IBV_WC_BAD_RESP_ERR);
    return;
  }
  qp->inFlight = false;
  SendWqe& w = qp->sq.front();
  switch (h.kind) {
    case kAck:
      if (w.op == IBV_WR_RDMA_READ) {
        if (h.payload != w.length) {
          moveToError(s, qp, IBV_WC_BAD_RESP_ERR);
          return;
        }
        if (!scatterRead(s, qp, w, payload)) {
          moveToError(s, qp, IBV_WC_LOC_PROT_ERR);
          return;
        }
      }
      qp->inEpisode = false;
      qp->rnrCount = 0;
      qp->nextAttempt = now;
      completeSendHead(s, qp, IBV_WC_SUCCESS);
      return;
    case kRnr:
      qp->inEpisode = false;
      if (qp->rnrRetry != 7 && ++qp->rnrCount > qp->rnrRetry) {
        moveToError(s, qp, IBV_WC_RNR_RETRY_EXC_ERR);
        return;
      }
      qp->nextAttempt = now + rnrDelay(h.imm);
      return;
    case kRetry:
      beginEpisode(qp, now);
      qp->nextAttempt = now + kConnectRetry;
      return;
    case kAccess: moveToError(s, qp, IBV_WC_REM_ACCESS_ERR); return;
    case kInvalid: moveToError(s, qp, IBV_WC_REM_INV_REQ_ERR); return;
    case kOpError: moveToError(s, qp, IBV_WC_REM_OP_ERR); return;
    default: moveToError(s, qp, IBV_WC_BAD_RESP_ERR); return;
  }
}

// Parses and handles the responses in qp->in (a garbage stream moves the QP to error).
void parseResponses(State& s, FakeQp* qp, Clock::time_point now) {
  while (qp->outFd >= 0 && qp->in.size() >= sizeof(WireHeader)) {
    WireHeader h;
    memcpy(&h, qp->in.data(), sizeof(h));
    if (h.magic != kResponseMagic || h.payload > kMaxMsgSize) {
      warn("QP %u: garbage on its connection to QP %u; the QP goes to the error state", qp->qp.qp_num,
           qp->destQpn);
      moveToError(s, qp, IBV_WC_BAD_RESP_ERR);
      return;
    }
    if (qp->in.size() < sizeof(h) + h.payload) return;
    const size_t frame = sizeof(h) + h.payload;
    onResponse(s, qp, h, qp->in.data() + sizeof(h), now);
    if (qp->outFd >= 0) qp->in.consume(frame);  // moveToError cleared the buffer otherwise
  }
}

void progressRequester(State& s, FakeQp* qp, Clock::time_point now) {
  if (qp->state != IBV_QPS_RTS || qp->sq.empty()) return;
  SendWqe& w = qp->sq.front();
  if (w.injectError) {
    moveToError(s, qp, IBV_WC_GENERAL_ERR);
    return;
  }
  if (qp->inFlight) {
    if (now >= qp->idleEnd) moveToError(s, qp, IBV_WC_RETRY_EXC_ERR);
    return;
  }
  if (qp->inEpisode && now >= qp->episodeEnd) {
    moveToError(s, qp, IBV_WC_RETRY_EXC_ERR);
    return;
  }
  if (now < qp->nextAttempt) return;
  if (!portIsUp(s, devOf(qp), qp->port)) {
    beginEpisode(qp, now);
    qp->nextAttempt = now + kConnectRetry;
    return;
  }
  FakeDevice* dev = qp->ctx->dev;
  const int paced = dev->pacedMbps[qp->port];
  if (paced > 0 && now < dev->busyUntil[qp->port]) {  // a degraded port: its earlier requests still "on the wire"
    qp->nextAttempt = dev->busyUntil[qp->port];
    return;
  }
  if (qp->outFd < 0 && !connectPeer(qp)) {
    beginEpisode(qp, now);
    qp->nextAttempt = now + kConnectRetry;
    return;
  }
  ibv_wc_status err = IBV_WC_SUCCESS;
  if (!buildRequest(s, qp, w, &err)) {
    moveToError(s, qp, err);
    return;
  }
  if (paced > 0)  // bits over Mb/s = microseconds
    dev->busyUntil[qp->port] = std::max(now, dev->busyUntil[qp->port]) +
                               std::chrono::microseconds(uint64_t{w.length} * 8 / static_cast<uint64_t>(paced));
  qp->inFlight = true;
  qp->idleEnd = now + idleBudget(qp);
  bool progress = false;
  if (flush(qp->outFd, &qp->out, &progress) == Io::kError) connectionLost(qp, now);
}

void onRequesterEvent(State& s, FakeQp* qp, short revents, Clock::time_point now) {
  bool progress = false;
  if (revents & POLLOUT) {
    if (flush(qp->outFd, &qp->out, &progress) == Io::kError) {
      connectionLost(qp, now);
      return;
    }
  }
  if (revents & (POLLIN | POLLHUP | POLLERR)) {
    const Io io = readSome(qp->outFd, &qp->in, &progress);
    if (progress) qp->idleEnd = now + idleBudget(qp);
    parseResponses(s, qp, now);
    if (io != Io::kOk && qp->outFd >= 0) connectionLost(qp, now);
  }
  if (progress && qp->inFlight) qp->idleEnd = now + idleBudget(qp);
}

// ---- responder ----------------------------------------------------------------------

void respond(InConn* c, const WireHeader& req, uint8_t status, uint32_t imm, const char* data, size_t n) {
  WireHeader h;
  memset(&h, 0, sizeof(h));
  h.magic = kResponseMagic;
  h.kind = status;
  h.seq = req.seq;
  h.dstQpn = req.srcQpn;
  h.srcQpn = req.dstQpn;
  h.imm = imm;
  h.payload = static_cast<uint32_t>(n);
  appendFrame(&c->out, h, data, n);
}

void accessError(State& s, FakeQp* qp) {
  ibv_async_event ev;
  memset(&ev, 0, sizeof(ev));
  ev.event_type = IBV_EVENT_QP_ACCESS_ERR;
  ev.element.qp = &qp->qp;
  queueAsyncEvent(qp->ctx, ev);
  moveToError(s, qp, IBV_WC_WR_FLUSH_ERR);
}

ibv_wc recvCompletion(const FakeQp* qp, const RecvWqe& r, const WireHeader& h, ibv_wc_status status,
                      ibv_wc_opcode op) {
  ibv_wc wc;
  memset(&wc, 0, sizeof(wc));
  wc.wr_id = r.wrId;
  wc.status = status;
  wc.opcode = op;
  wc.byte_len = h.length;
  wc.qp_num = qp->qp.qp_num;
  wc.src_qp = h.srcQpn;
  if (h.hasImm) {
    wc.wc_flags = IBV_WC_WITH_IMM;
    wc.imm_data = h.imm;
  }
  return wc;
}

uint8_t applyWrite(State& s, FakeQp* qp, const WireHeader& h, const char* data) {
  if (h.hasImm && qp->rq.empty()) return kRnr;
  if (h.length != 0) {
    char* dst = remoteRange(s, qp, h.rkey, h.raddr, h.length, IBV_ACCESS_REMOTE_WRITE);
    if (dst == nullptr) {
      accessError(s, qp);
      return kAccess;
    }
    dmaCopy(dst, data, h.length);
  }
  if (h.hasImm) {
    RecvWqe r = std::move(qp->rq.front());
    qp->rq.pop_front();
    pushCompletion(s, qp->rcq, recvCompletion(qp, r, h, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM));
  }
  return kAck;
}

uint8_t applySend(State& s, FakeQp* qp, const WireHeader& h, const char* data) {
  if (qp->rq.empty()) return kRnr;
  RecvWqe r = std::move(qp->rq.front());
  qp->rq.pop_front();
  uint64_t room = 0;
  for (const ibv_sge& sge : r.sges) room += sge.length;
  ibv_wc_status status = room < h.length ? IBV_WC_LOC_LEN_ERR : IBV_WC_SUCCESS;
  uint32_t left = h.length;
  for (size_t i = 0; status == IBV_WC_SUCCESS && i < r.sges.size() && left > 0; ++i) {
    const uint32_t n = std::min(left, r.sges[i].length);
    char* dst = n == 0 ? nullptr : localRange(s, qp, r.sges[i].lkey, r.sges[i].addr, n, true);
    if (n != 0 && dst == nullptr) {
      status = IBV_WC_LOC_PROT_ERR;
      break;
    }
    dmaCopy(dst, data, n);
    data += n;
    left -= n;
  }
  pushCompletion(s, qp->rcq, recvCompletion(qp, r, h, status, IBV_WC_RECV));
  if (status == IBV_WC_SUCCESS) return kAck;
  moveToError(s, qp, IBV_WC_WR_FLUSH_ERR);
  return status == IBV_WC_LOC_LEN_ERR ? kInvalid : kOpError;
}

void closeInConn(State& s, InConn* c) {
  close(c->fd);
  s.inConns.erase(c->id);
  delete c;
}

void protocolError(State& s, InConn* c, FakeQp* qp, const char* what) {
  warn("QP %u: %s on an incoming connection; the QP goes to the error state", qp->qp.qp_num, what);
  ibv_async_event ev;
  memset(&ev, 0, sizeof(ev));
  ev.event_type = IBV_EVENT_QP_FATAL;
  ev.element.qp = &qp->qp;
  queueAsyncEvent(qp->ctx, ev);
  moveToError(s, qp, IBV_WC_WR_FLUSH_ERR);
  closeInConn(s, c);
}

void onRequest(State& s, InConn* c, FakeQp* qp, const WireHeader& h, const char* data) {
  const bool ready = (qp->state == IBV_QPS_RTR || qp->state == IBV_QPS_RTS) &&
                     portIsUp(s, devOf(qp), qp->port) && h.dstLid == localLid(s, qp);
  if (!ready) {
    respond(c, h, kRetry, 0, nullptr, 0);
    return;
  }
  if (h.kind == kOpRead) {
    const char* src = h.length == 0 ? nullptr : remoteRange(s, qp, h.rkey, h.raddr, h.length, IBV_ACCESS_REMOTE_READ);
    if (h.length != 0 && src == nullptr) {
      accessError(s, qp);
      respond(c, h, kAccess, 0, nullptr, 0);
    } else {
      respond(c, h, kAck, 0, src, h.length);
    }
    return;
  }
  if (qp->haveLast && h.seq == qp->lastSeq) {  // a resend after a lost connection: applied already
    respond(c, h, qp->lastStatus, 0, nullptr, 0);
    return;
  }
  const uint8_t status = h.kind == kOpWrite ? applyWrite(s, qp, h, data) : applySend(s, qp, h, data);
  if (status != kRnr) {
    qp->haveLast = true;
    qp->lastSeq = h.seq;
    qp->lastStatus = status;
  }
  respond(c, h, status, status == kRnr ? qp->minRnrTimer : 0, nullptr, 0);
}

// Parses and applies the requests in c->in; false when the connection was closed.
bool parseRequests(State& s, InConn* c, FakeQp* qp) {
  uint32_t magic = 0;
  if (c->in.size() >= sizeof(magic) && (memcpy(&magic, c->in.data(), sizeof(magic)), magic != kRequestMagic)) {
    protocolError(s, c, qp, "garbage frame");
    return false;
  }
  while (c->in.size() >= sizeof(WireHeader)) {
    WireHeader h;
    memcpy(&h, c->in.data(), sizeof(h));
    const bool lengthOk = h.kind == kOpRead ? h.payload == 0 : h.payload == h.length;
    if (h.magic != kRequestMagic || h.kind < kOpWrite || h.kind > kOpRead || h.length > kMaxMsgSize || !lengthOk ||
        h.dstQpn != qp->qp.qp_num) {
      protocolError(s, c, qp, "garbage frame");
      return false;
    }
    if (c->in.size() < sizeof(h) + h.payload) return true;
    onRequest(s, c, qp, h, c->in.data() + sizeof(h));
    c->in.consume(sizeof(h) + h.payload);
  }
  return true;
}

void onInConnEvent(State& s, InConn* c, short revents) {
  auto it = s.qps.find(c->qpId);
  if (it == s.qps.end()) {
    closeInConn(s, c);
    return;
  }
  FakeQp* qp = it->second;
  bool progress = false;
  if (revents & (POLLIN | POLLHUP | POLLERR)) {
    const Io io = readSome(c->fd, &c->in, &progress);
    if (!parseRequests(s, c, qp)) return;
    if (io != Io::kOk) {
      // The requester went away (its QP failed or was destroyed, or its process died). A request cut
      // short is dropped, as a responder never sees the missing packets: this QP is not affected.
      if (c->in.size() > 0)
        warn("QP %u: the requester closed its connection in the middle of a request (%zu bytes); dropped",
             qp->qp.qp_num, c->in.size());
      closeInConn(s, c);
      return;
    }
  }
  if (flush(c->fd, &c->out, &progress) == Io::kError) closeInConn(s, c);
}

void acceptAll(State& s, FakeQp* qp) {
  for (;;) {
    const int fd = accept4(qp->listenFd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    auto* c = new InConn();
    c->id = s.nextId++;
    c->fd = fd;
    c->qpId = qp->id;
    s.inConns[c->id] = c;
  }
}

// ---- ports ---------------------------------------------------------------------------

void checkPorts(State& s) {
  for (FakeDevice* d : s.devices) {
    for (int p = 1; p <= d->cfg.ports; ++p) d->pacedMbps[p] = degradedRateMbps(s, d, p);
    for (int p = 1; p <= d->cfg.ports; ++p) {
      const bool up = access(downFilePath(s, d, p).c_str(), F_OK) != 0;
      if (up == (d->portUp[p] != 0)) continue;
      d->portUp[p] = up ? 1 : 0;
      ibv_async_event ev;
      memset(&ev, 0, sizeof(ev));
      ev.event_type = up ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR;
      ev.element.port_num = p;
      for (FakeContext* c : s.contexts)
        if (c->dev == d) queueAsyncEvent(c, ev);
      if (up) continue;
      for (auto& [id, qp] : s.qps) {
        const ibv_qp_state st = qp->state;
        if (qp->ctx->dev == d && qp->port == p && (st == IBV_QPS_INIT || st == IBV_QPS_RTR || st == IBV_QPS_RTS))
          moveToError(s, qp, IBV_WC_RETRY_EXC_ERR);
      }
    }
  }
}

// ---- the thread ----------------------------------------------------------------------

enum class Kind { kWake, kListen, kRequester, kIn };
struct Ref {
  Kind kind;
  uint64_t id;
  int fd;
};

int pollTimeoutMs(const State& s, Clock::time_point now) {
  Clock::time_point next = now + kPortCheckPeriod;
  for (const auto& [id, qp] : s.qps) {
    if (qp->state != IBV_QPS_RTS || qp->sq.empty()) continue;
    if (qp->inFlight) {
      next = std::min(next, qp->idleEnd);
    } else {
      next = std::min(next, qp->nextAttempt);
      if (qp->inEpisode) next = std::min(next, qp->episodeEnd);
    }
  }
  if (next <= now) return 0;
  return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(next - now).count());
}

void wireMain(State* sp) {
  State& s = *sp;
  std::unique_lock<std::mutex> lock(s.mu);
  Clock::time_point lastPortCheck{};
  std::vector<pollfd> fds;
  std::vector<Ref> refs;
  for (;;) {
    fds.clear();
    refs.clear();
    auto add = [&](int fd, short events, Kind kind, uint64_t id) {
      fds.push_back(pollfd{fd, events, 0});
      refs.push_back(Ref{kind, id, fd});
    };
    add(s.wakeFd, POLLIN, Kind::kWake, 0);
    for (const auto& [id, qp] : s.qps) {
      if (qp->listenFd >= 0) add(qp->listenFd, POLLIN, Kind::kListen, id);
      if (qp->outFd >= 0) add(qp->outFd, static_cast<short>(POLLIN | (qp->out.size() ? POLLOUT : 0)), Kind::kRequester, id);
    }
    for (const auto& [id, c] : s.inConns)
      add(c->fd, static_cast<short>(POLLIN | (c->out.size() ? POLLOUT : 0)), Kind::kIn, id);
    const int timeout = pollTimeoutMs(s, Clock::now());
    lock.unlock();
    poll(fds.data(), fds.size(), timeout);
    lock.lock();
    const Clock::time_point now = Clock::now();
    for (size_t i = 0; i < fds.size(); ++i) {
      const short rev = fds[i].revents;
      if (rev == 0) continue;
      const Ref& r = refs[i];
      if (r.kind == Kind::kWake) {
        uint64_t v;
        while (read(s.wakeFd, &v, sizeof(v)) > 0) {
        }
        continue;
      }
      // The object may be gone (destroyed while this thread polled): look it up again.
      if (r.kind == Kind::kIn) {
        auto it = s.inConns.find(r.id);
        if (it != s.inConns.end() && it->second->fd == r.fd) onInConnEvent(s, it->second, rev);
        continue;
      }
      auto it = s.qps.find(r.id);
      if (it == s.qps.end()) continue;
      FakeQp* qp = it->second;
      if (r.kind == Kind::kListen && qp->listenFd == r.fd) acceptAll(s, qp);
      if (r.kind == Kind::kRequester && qp->outFd == r.fd) onRequesterEvent(s, qp, rev, now);
    }
    if (now - lastPortCheck >= kPortCheckPeriod) {
      lastPortCheck = now;
      checkPorts(s);
    }
    for (auto& [id, qp] : s.qps) progressRequester(s, qp, now);
  }
}

}  // namespace

void Buffer::consume(size_t n) {
  start += n;
  if (start == bytes.size()) {
    clear();
  } else if (start > (1u << 20) && start > size()) {
    bytes.erase(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(start));
    start = 0;
  }
}

void Buffer::append(const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  bytes.insert(bytes.end(), c, c + n);
}

void startWireLocked(State& s) {
  if (s.wireStarted) return;
  s.wireStarted = true;
  std::thread(wireMain, &s).detach();
}

void wakeWire(State& s) {
  const uint64_t one = 1;
  if (write(s.wakeFd, &one, sizeof(one)) < 0 && errno != EAGAIN) warn("wake: %s", strerror(errno));
}

void closeRequesterLocked(FakeQp* qp) {
  if (qp->outFd >= 0) close(qp->outFd);
  qp->outFd = -1;
  qp->out.clear();
  qp->in.clear();
  qp->inFlight = false;
}

int listenQp(State& s, FakeQp* qp) {
  const FakeDevice* d = devOf(qp);
  const std::string prefix = s.cfg.dir + "/q" + hex(d->guid >> 32, 8) + "-";
  // Start anywhere (processes of one host share the space) and take the first free number.
  uint32_t qpn = static_cast<uint32_t>((static_cast<uint64_t>(getpid()) * 2654435761u + qp->id * 40503u +
                                        static_cast<uint64_t>(Clock::now().time_since_epoch().count())) %
                                       0xfffff0) + 2;
  for (int attempt = 0; attempt < 4096; ++attempt, qpn = qpn >= 0xfffffe ? 2 : qpn + 1) {
    const std::string path = prefix + hex(qpn, 6);
    sockaddr_un addr;
    if (!makeAddress(path, &addr)) {
      warn("socket path '%s' does not fit in sun_path: use a shorter THESEUS_FAKE_IBV_DIR", path.c_str());
      return ENAMETOOLONG;
    }
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return errno;
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      const int err = errno;
      close(fd);
      if (err == EADDRINUSE) continue;
      warn("bind %s: %s", path.c_str(), strerror(err));
      return err;
    }
    if (listen(fd, 128) != 0) {
      const int err = errno;
      close(fd);
      unlink(path.c_str());
      return err;
    }
    qp->listenFd = fd;
    qp->listenPath = path;
    qp->qp.qp_num = qpn;
    return 0;
  }
  return ENOSPC;
}

void unlistenQp(State& s, FakeQp* qp) {
  for (auto it = s.inConns.begin(); it != s.inConns.end();) {
    InConn* c = it->second;
    ++it;
    if (c->qpId == qp->id) closeInConn(s, c);
  }
  removeAlias(qp);
  if (qp->listenFd >= 0) {
    close(qp->listenFd);
    unlink(qp->listenPath.c_str());
  }
  qp->listenFd = -1;
}

int setAlias(State& s, FakeQp* qp) {
  removeAlias(qp);
  const std::string alias = s.cfg.dir + "/a" + hex(localLid(s, qp), 4) + "-" + hex(qp->qp.qp_num, 6);
  const std::string target = qp->listenPath.substr(qp->listenPath.rfind('/') + 1);
  if (symlink(target.c_str(), alias.c_str()) != 0) {
    // A stale alias of a process that died without destroying its QP: this number is ours now.
    if (errno != EEXIST || unlink(alias.c_str()) != 0 || symlink(target.c_str(), alias.c_str()) != 0) {
      warn("alias %s: %s", alias.c_str(), strerror(errno));
      return errno;
    }
  }
  qp->aliasPath = alias;
  return 0;
}

void removeAlias(FakeQp* qp) {
  if (!qp->aliasPath.empty()) unlink(qp->aliasPath.c_str());
  qp->aliasPath.clear();
}

void setPeer(State& s, FakeQp* qp) {
  const uint16_t lid = qp->ah.is_global ? lidFromGid(qp->ah.grh.dgid) : qp->ah.dlid;
  qp->peerPath = s.cfg.dir + "/a" + hex(lid, 4) + "-" + hex(qp->destQpn, 6);
}

}  // namespace theseus::fakeibv
