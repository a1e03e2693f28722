// Queue pairs of the libibverbs test double: creation, the modify state machine
// with the attribute-mask rules of the real drivers, posting, completions and
// the error state. What happens on the wire is in fake_ibv_wire.cc.
//
// Invariants (all under State::mu):
//  - qp->sq holds every posted send WR not yet completed, in post order; only its
//    head is ever on the wire (one WR in flight per QP keeps RC ordering trivial:
//    completions come in post order and an RNR NAK never overtakes a later WR).
//  - A QP in IBV_QPS_ERR holds no WRs: moveToError completes them all, and WRs
//    posted later complete at once with IBV_WC_WR_FLUSH_ERR.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "fake_ibv_api.h"
#include "fake_ibv_internal.h"
#include "fake_ibv_wire.h"

namespace theseus::fakeibv {
namespace {

ibv_wc sendCompletion(const FakeQp* qp, const SendWqe& w, ibv_wc_status status) {
  ibv_wc wc;
  memset(&wc, 0, sizeof(wc));
  wc.wr_id = w.wrId;
  wc.status = status;
  switch (w.op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM: wc.opcode = IBV_WC_RDMA_WRITE; break;
    case IBV_WR_RDMA_READ: wc.opcode = IBV_WC_RDMA_READ; break;
    default: wc.opcode = IBV_WC_SEND; break;
  }
  wc.byte_len = w.length;
  wc.qp_num = qp->qp.qp_num;
  wc.src_qp = qp->destQpn;
  return wc;
}

ibv_wc recvFlush(const FakeQp* qp, const RecvWqe& r) {
  ibv_wc wc;
  memset(&wc, 0, sizeof(wc));
  wc.wr_id = r.wrId;
  wc.status = IBV_WC_WR_FLUSH_ERR;
  wc.opcode = IBV_WC_RECV;
  wc.qp_num = qp->qp.qp_num;
  return wc;
}

void overrunCq(State& s, FakeCq* cq) {
  cq->overrun = true;
  cq->entries.clear();
  ibv_async_event ev;
  memset(&ev, 0, sizeof(ev));
  ev.event_type = IBV_EVENT_CQ_ERR;
  ev.element.cq = &cq->cq;
  queueAsyncEvent(cq->ctx, ev);
  for (auto& [id, qp] : s.qps)
    if (qp->scq == cq || qp->rcq == cq) moveToError(s, qp, IBV_WC_WR_FLUSH_ERR);
}

// ---- ibv_modify_qp ------------------------------------------------------------

struct Transition {
  ibv_qp_state from, to;
  int required, optional;
};

constexpr int kAltPathMask = IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE;

// RC rows of the kernel's qp_state_table (ib_modify_qp_is_ok); IBV_QP_STATE aside.
const Transition kTransitions[] = {
    {IBV_QPS_RESET, IBV_QPS_RESET, 0, 0},
    {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0},
    {IBV_QPS_INIT, IBV_QPS_INIT, 0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS},
    {IBV_QPS_INIT, IBV_QPS_RTR,
     IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
         IBV_QP_MIN_RNR_TIMER,
     IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX},
    {IBV_QPS_RTR, IBV_QPS_RTS,
     IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC,
     IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | kAltPathMask},
    {IBV_QPS_RTS, IBV_QPS_RTS, 0,
     IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | kAltPathMask},
};

bool maskAllowed(ibv_qp_state from, ibv_qp_state to, int mask) {
  mask &= ~IBV_QP_STATE;
  if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) return (mask & ~IBV_QP_CUR_STATE) == 0;
  for (const Transition& t : kTransitions) {
    if (t.from != from || t.to != to) continue;
    return (mask & t.required) == t.required && (mask & ~(t.required | t.optional)) == 0;
  }
  return false;
}

bool gidIsZero(const ibv_gid& g) {
  for (unsigned char b : g.raw)
    if (b != 0) return false;
  return true;
}

// Checks the attribute values of a modify before anything changes; EINVAL or 0.
int checkValues(const FakeQp* qp, const ibv_qp_attr* a, int mask) {
  const DeviceConfig& dev = qp->ctx->dev->cfg;
  if ((mask & IBV_QP_PORT) && (a->port_num < 1 || a->port_num > dev.ports)) return EINVAL;
  if ((mask & IBV_QP_PKEY_INDEX) && a->pkey_index != 0) return EINVAL;
  if ((mask & IBV_QP_PATH_MTU) && (a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_4096)) return EINVAL;
  if ((mask & IBV_QP_DEST_QPN) && a->dest_qp_num > 0xffffff) return EINVAL;
  if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a->max_dest_rd_atomic > kMaxRdAtomic) return EINVAL;
  if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a->max_rd_atomic > kMaxRdAtomic) return EINVAL;
  if ((mask & IBV_QP_MIN_RNR_TIMER) && a->min_rnr_timer > 31) return EINVAL;
  if ((mask & IBV_QP_TIMEOUT) && a->timeout > 31) return EINVAL;
  if ((mask & IBV_QP_RETRY_CNT) && a->retry_cnt > 7) return EINVAL;
  if ((mask & IBV_QP_RNR_RETRY) && a->rnr_retry > 7) return EINVAL;
  if (mask & IBV_QP_AV) {
    const ibv_ah_attr& ah = a->ah_attr;
    const int port = ah.port_num != 0 ? ah.port_num : qp->port;
    if (port < 1 || port > dev.ports) return EINVAL;
    if (dev.roce) {
      // RoCE has no LIDs: the address is the GRH's destination GID.
      if (!ah.is_global || gidIsZero(ah.grh.dgid) || ah.grh.sgid_index >= gidTableLen(true)) return EINVAL;
    } else {
      if (ah.dlid == 0) return EINVAL;
      if (ah.is_global && ah.grh.sgid_index >= gidTableLen(false)) return EINVAL;
    }
  }
  return 0;
}

void applyValues(State& s, FakeQp* qp, const ibv_qp_attr* a, int mask) {
  if (mask & IBV_QP_PORT) qp->port = a->port_num;
  if (mask & IBV_QP_PKEY_INDEX) qp->pkeyIndex = a->pkey_index;
  if (mask & IBV_QP_ACCESS_FLAGS) qp->accessFlags = a->qp_access_flags;
  if (mask & IBV_QP_PATH_MTU) qp->pathMtu = a->path_mtu;
  if (mask & IBV_QP_DEST_QPN) qp->destQpn = a->dest_qp_num;
  if (mask & IBV_QP_RQ_PSN) qp->rqPsn = a->rq_psn & 0xffffff;
  if (mask & IBV_QP_SQ_PSN) qp->sqPsn = a->sq_psn & 0xffffff;
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) qp->maxDestRdAtomic = a->max_dest_rd_atomic;
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) qp->maxRdAtomic = a->max_rd_atomic;
  if (mask & IBV_QP_MIN_RNR_TIMER) qp->minRnrTimer = a->min_rnr_timer;
  if (mask & IBV_QP_TIMEOUT) qp->timeout = a->timeout;
  if (mask & IBV_QP_RETRY_CNT) qp->retryCnt = a->retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) qp->rnrRetry = a->rnr_retry;
  if (mask & IBV_QP_AV) {
    qp->ah = a->ah_attr;
    if (qp->ah.port_num == 0) qp->ah.port_num = qp->port;
  }
}

void resetQp(State& s, FakeQp* qp) {
  closeRequesterLocked(qp);
  qp->sq.clear();
  qp->rq.clear();
  qp->port = 0;
  qp->accessFlags = 0;
  qp->ah = ibv_ah_attr{};
  qp->destQpn = 0;
  qp->haveLast = false;
  qp->rnrCount = 0;
  removeAlias(qp);
  qp->peerPath.clear();
}

int modifyQp(State& s, FakeQp* qp, ibv_qp_attr* attr, int mask) {
  const ibv_qp_state cur = qp->state;
  if ((mask & IBV_QP_CUR_STATE) && attr->cur_qp_state != cur) return EINVAL;
  const ibv_qp_state to = (mask & IBV_QP_STATE) ? attr->qp_state : cur;
  if (to == IBV_QPS_ERR || to == IBV_QPS_RESET) {
    if ((mask & ~(IBV_QP_STATE | IBV_QP_CUR_STATE)) != 0) return EINVAL;
    if (to == IBV_QPS_ERR) {
      moveToError(s, qp, IBV_WC_WR_FLUSH_ERR);
    } else {
      resetQp(s, qp);
      qp->state = IBV_QPS_RESET;
    }
    return 0;
  }
  if (!maskAllowed(cur, to, mask)) return EINVAL;
  if (int rc = checkValues(qp, attr, mask); rc != 0) return rc;
  const uint8_t oldPort = qp->port;
  applyValues(s, qp, attr, mask);
  if (to == IBV_QPS_INIT && (cur == IBV_QPS_RESET || qp->port != oldPort)) {
    if (int rc = setAlias(s, qp); rc != 0) return rc;
  }
  if (to == IBV_QPS_RTR) setPeer(s, qp);
  qp->state = to;
  if (to == IBV_QPS_RTS) wakeWire(s);
  return 0;
}

int checkCaps(const ibv_qp_cap& cap) {
  if (cap.max_send_wr > kMaxQpWr || cap.max_recv_wr > kMaxQpWr || cap.max_send_sge > kMaxSge ||
      cap.max_recv_sge > kMaxSge || cap.max_inline_data > kMaxInline)
    return EINVAL;
  return 0;
}

// Validates one send WR and makes its queue entry (inline data copied now); 0 or an errno value.
int makeSendWqe(State& s, FakeQp* qp, const ibv_send_wr* wr, SendWqe* w) {
  if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > qp->cap.max_send_sge) return EINVAL;
  const bool rdma = wr->opcode == IBV_WR_RDMA_WRITE || wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM ||
                    wr->opcode == IBV_WR_RDMA_READ;
  if (!rdma && wr->opcode != IBV_WR_SEND && wr->opcode != IBV_WR_SEND_WITH_IMM) return EINVAL;
  uint64_t total = 0;
  for (int i = 0; i < wr->num_sge; ++i) total += wr->sg_list[i].length;
  if (total > kMaxMsgSize) return EINVAL;
  w->isInline = (wr->send_flags & IBV_SEND_INLINE) != 0;
  if (w->isInline) {
    if (wr->opcode == IBV_WR_RDMA_READ || total > qp->cap.max_inline_data) return EINVAL;
    w->inlineData.resize(total);
    size_t off = 0;
    for (int i = 0; i < wr->num_sge; ++i) {
      memcpy(w->inlineData.data() + off, reinterpret_cast<const void*>(wr->sg_list[i].addr), wr->sg_list[i].length);
      off += wr->sg_list[i].length;
    }
  } else {
    w->sges.assign(wr->sg_list, wr->sg_list + wr->num_sge);
  }
  if (qp->state == IBV_QPS_RTS && qp->sq.size() >= qp->cap.max_send_wr) return ENOMEM;
  w->wrId = wr->wr_id;
  w->op = wr->opcode;
  w->signaled = qp->sigAll || (wr->send_flags & IBV_SEND_SIGNALED) != 0;
  w->hasImm = wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM || wr->opcode == IBV_WR_SEND_WITH_IMM;
  w->imm = w->hasImm ? wr->imm_data : 0;
  w->length = static_cast<uint32_t>(total);
  if (rdma) {
    w->raddr = wr->wr.rdma.remote_addr;
    w->rkey = wr->wr.rdma.rkey;
  }
  // Faults count every WR the process posts successfully (README.md).
  if (++s.sendWrCount == s.cfg.faults.qpErrorAfter) w->injectError = true;
  if (rdma && ++s.rdmaWrCount == s.cfg.faults.remAccessAfter) w->rkey = kBadRkey;
  if (wr->opcode == IBV_WR_RDMA_READ && s.cfg.faults.readFail) w->rkey = kBadRkey;
  return 0;
}

}  // namespace

void pushCompletion(State& s, FakeCq* cq, const ibv_wc& wc) {
  if (cq->overrun) return;
  ++s.completionCount;
  if (s.completionCount == s.cfg.faults.cqOverrunAfter || cq->entries.size() >= cq->capacity) {
    overrunCq(s, cq);
    return;
  }
  cq->entries.push_back(wc);
  notifyCq(cq);
}

void moveToError(State& s, FakeQp* qp, ibv_wc_status firstStatus) {
  if (qp->state == IBV_QPS_ERR) return;
  qp->state = IBV_QPS_ERR;
  closeRequesterLocked(qp);
  std::deque<SendWqe> sq;
  std::deque<RecvWqe> rq;
  sq.swap(qp->sq);
  rq.swap(qp->rq);
  bool first = true;
  for (const SendWqe& w : sq) {
    pushCompletion(s, qp->scq, sendCompletion(qp, w, first ? firstStatus : IBV_WC_WR_FLUSH_ERR));
    first = false;
  }
  for (const RecvWqe& r : rq) pushCompletion(s, qp->rcq, recvFlush(qp, r));
}

void completeSendHead(State& s, FakeQp* qp, ibv_wc_status status) {
  if (status != IBV_WC_SUCCESS) {
    moveToError(s, qp, status);
    return;
  }
  SendWqe w = std::move(qp->sq.front());
  qp->sq.pop_front();
  if (w.signaled) pushCompletion(s, qp->scq, sendCompletion(qp, w, IBV_WC_SUCCESS));
}

Clock::duration retryBudget(const FakeQp* qp) {
  using std::chrono::microseconds;
  const microseconds kMin(20000), kMax(2000000);
  if (qp->timeout == 0) return kMax;  // 0 means "infinite" in the IB spec
  const double us = 4.096 * std::ldexp(1.0, qp->timeout) * (qp->retryCnt + 1);
  return std::clamp(microseconds(static_cast<int64_t>(std::min(us, 1e9))), kMin, kMax);
}

char* localRange(State& s, FakeQp* qp, uint32_t lkey, uint64_t addr, uint64_t len, bool write) {
  auto it = s.mrs.find(lkey);
  if (it == s.mrs.end()) return nullptr;
  const FakeMr* mr = it->second;
  if (mr->pd != qp->pd || (write && (mr->access & IBV_ACCESS_LOCAL_WRITE) == 0)) return nullptr;
  if (addr < mr->iova || len > mr->mr.length || addr - mr->iova > mr->mr.length - len) return nullptr;
  return static_cast<char*>(mr->mr.addr) + (addr - mr->iova);
}

char* remoteRange(State& s, FakeQp* qp, uint32_t rkey, uint64_t addr, uint64_t len, unsigned needAccess) {
  if ((qp->accessFlags & needAccess) == 0) return nullptr;
  auto it = s.mrs.find(rkey);
  if (it == s.mrs.end()) return nullptr;
  const FakeMr* mr = it->second;
  if (mr->pd != qp->pd || (mr->access & needAccess) == 0) return nullptr;
  if (addr < mr->iova || len > mr->mr.length || addr - mr->iova > mr->mr.length - len) return nullptr;
  return static_cast<char*>(mr->mr.addr) + (addr - mr->iova);
}

#if defined(__SANITIZE_THREAD__)
#define FAKE_IBV_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FAKE_IBV_TSAN 1
#endif
#endif

#if defined(FAKE_IBV_TSAN)
// Through volatile words so the compiler makes no memcpy call (TSan intercepts those).
typedef uint64_t __attribute__((aligned(1), may_alias)) UnalignedWord;

__attribute__((no_sanitize("thread"))) void dmaCopy(void* dst, const void* src, size_t n) {
  auto* d = static_cast<volatile unsigned char*>(dst);
  const auto* p = static_cast<const volatile unsigned char*>(src);
  for (; n >= 8; n -= 8, d += 8, p += 8)
    *reinterpret_cast<volatile UnalignedWord*>(d) = *reinterpret_cast<const volatile UnalignedWord*>(p);
  for (; n > 0; --n) *d++ = *p++;
}
#else
void dmaCopy(void* dst, const void* src, size_t n) {
  if (n != 0) memcpy(dst, src, n);
}
#endif

int postSend(ibv_qp* ibqp, ibv_send_wr* wr, ibv_send_wr** bad) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto* qp = reinterpret_cast<FakeQp*>(ibqp);
  for (; wr != nullptr; wr = wr->next) {
    int rc = qp->state == IBV_QPS_RTS || qp->state == IBV_QPS_ERR ? 0 : EINVAL;
    SendWqe w;
    if (rc == 0) rc = guard<int>(ENOMEM, [&] { return makeSendWqe(s, qp, wr, &w); });
    if (rc != 0) {
      if (bad != nullptr) *bad = wr;
      wakeWire(s);
      return rc;
    }
    if (qp->state == IBV_QPS_ERR) {
      pushCompletion(s, qp->scq, sendCompletion(qp, w, IBV_WC_WR_FLUSH_ERR));
    } else {
      qp->sq.push_back(std::move(w));
    }
  }
  wakeWire(s);
  return 0;
}

int postRecv(ibv_qp* ibqp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto* qp = reinterpret_cast<FakeQp*>(ibqp);
  for (; wr != nullptr; wr = wr->next) {
    int rc = 0;
    if (qp->state == IBV_QPS_RESET || wr->num_sge < 0 ||
        static_cast<uint32_t>(wr->num_sge) > qp->cap.max_recv_sge) {
      rc = EINVAL;
    } else if (qp->state != IBV_QPS_ERR && qp->rq.size() >= qp->cap.max_recv_wr) {
      rc = ENOMEM;
    }
    if (rc != 0) {
      if (bad != nullptr) *bad = wr;
      return rc;
    }
    RecvWqe r;
    r.wrId = wr->wr_id;
    r.sges.assign(wr->sg_list, wr->sg_list + wr->num_sge);
    if (qp->state == IBV_QPS_ERR) {
      pushCompletion(s, qp->rcq, recvFlush(qp, r));
    } else {
      qp->rq.push_back(std::move(r));
    }
  }
  return 0;
}

}  // namespace theseus::fakeibv

using namespace theseus::fakeibv;

FAKE_IBV_EXPORT ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  return guard<ibv_qp*>(nullptr, [&]() -> ibv_qp* {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    if (pd == nullptr || attr == nullptr || attr->qp_type != IBV_QPT_RC || attr->send_cq == nullptr ||
        attr->recv_cq == nullptr || attr->srq != nullptr || checkCaps(attr->cap) != 0 ||
        attr->send_cq->context != pd->context || attr->recv_cq->context != pd->context) {
      errno = EINVAL;
      return nullptr;
    }
    auto* qp = new FakeQp();
    memset(&qp->qp, 0, sizeof(qp->qp));
    qp->id = s.nextId++;
    qp->pd = reinterpret_cast<FakePd*>(pd);
    qp->ctx = qp->pd->ctx;
    qp->scq = reinterpret_cast<FakeCq*>(attr->send_cq);
    qp->rcq = reinterpret_cast<FakeCq*>(attr->recv_cq);
    qp->cap = attr->cap;
    qp->sigAll = attr->sq_sig_all != 0;
    qp->qp.context = pd->context;
    qp->qp.qp_context = attr->qp_context;
    qp->qp.pd = pd;
    qp->qp.send_cq = attr->send_cq;
    qp->qp.recv_cq = attr->recv_cq;
    qp->qp.handle = static_cast<uint32_t>(qp->id);
    qp->qp.state = IBV_QPS_RESET;
    qp->qp.qp_type = IBV_QPT_RC;
    if (int rc = listenQp(s, qp); rc != 0) {
      delete qp;
      errno = rc;
      return nullptr;
    }
    pthread_mutex_init(&qp->qp.mutex, nullptr);
    pthread_cond_init(&qp->qp.cond, nullptr);
    ++qp->pd->users;
    ++qp->scq->qps;
    ++qp->rcq->qps;
    s.qps[qp->id] = qp;
    startWireLocked(s);
    wakeWire(s);
    return &qp->qp;
  });
}

FAKE_IBV_EXPORT int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
  if (qp == nullptr || attr == nullptr) return EINVAL;
  return guard<int>(ENOMEM, [&] {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    auto* q = reinterpret_cast<FakeQp*>(qp);
    const int rc = modifyQp(s, q, attr, mask);
    q->qp.state = q->state;
    return rc;
  });
}

FAKE_IBV_EXPORT int ibv_query_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int mask, ibv_qp_init_attr* init) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto* qp = reinterpret_cast<FakeQp*>(ibqp);
  memset(attr, 0, sizeof(*attr));
  qp->qp.state = qp->state;
  attr->qp_state = qp->state;
  attr->cur_qp_state = qp->state;
  attr->path_mtu = qp->pathMtu;
  attr->qp_access_flags = qp->accessFlags;
  attr->qkey = 0;
  attr->rq_psn = qp->rqPsn;
  attr->sq_psn = qp->sqPsn;
  attr->dest_qp_num = qp->destQpn;
  attr->cap = qp->cap;
  attr->ah_attr = qp->ah;
  attr->pkey_index = qp->pkeyIndex;
  attr->max_rd_atomic = qp->maxRdAtomic;
  attr->max_dest_rd_atomic = qp->maxDestRdAtomic;
  attr->min_rnr_timer = qp->minRnrTimer;
  attr->port_num = qp->port;
  attr->timeout = qp->timeout;
  attr->retry_cnt = qp->retryCnt;
  attr->rnr_retry = qp->rnrRetry;
  if (init != nullptr) {
    memset(init, 0, sizeof(*init));
    init->qp_context = qp->qp.qp_context;
    init->send_cq = qp->qp.send_cq;
    init->recv_cq = qp->qp.recv_cq;
    init->cap = qp->cap;
    init->qp_type = IBV_QPT_RC;
    init->sq_sig_all = qp->sigAll ? 1 : 0;
  }
  return 0;
}

FAKE_IBV_EXPORT int ibv_destroy_qp(ibv_qp* ibqp) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto* qp = reinterpret_cast<FakeQp*>(ibqp);
  s.qps.erase(qp->id);
  closeRequesterLocked(qp);
  unlistenQp(s, qp);
  --qp->pd->users;
  --qp->scq->qps;
  --qp->rcq->qps;
  pthread_mutex_destroy(&qp->qp.mutex);
  pthread_cond_destroy(&qp->qp.cond);
  delete qp;
  return 0;
}
