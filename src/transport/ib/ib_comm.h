// One IB connection (one direction, one plugin comm) and its protocol.
//
// Set-up (never blocking; the net API's rule: a null comm means "call
// again"). listen() opens a TCP socket on the bootstrap interface and puts its
// address in the handle; the sender's connect() keeps its progress in that
// same handle, as NVIDIA's plugins do. Over that socket:
//   sender   -> receiver  ConnInfo: QP numbers, LID/GID, MTU, its CTS FIFO (address, rkey)
//   receiver -> sender    ConnInfo: its QP numbers, LID/GID, MTU
//   sender   -> receiver  one "ready" byte once its QPs are in RTS and its
//                         CTS receives are posted
// Each side moves its QPs INIT -> RTR -> RTS with the other's numbers and posts
// its receives before it speaks next, so no write ever reaches a QP that cannot
// take it. The receiver's comm exists only after the ready byte.
//
// Data, RDMA write with immediate both ways, credits by clear-to-send (CTS):
//   * irecv(buf) writes a CTS entry {addr, rkey, size, tag, seq} into slot
//     seq % 32 of the sender's FIFO, with an immediate naming the slot: each
//     posted receive is one credit.
//   * isend(data) waits (request = NULL: "retry") until the CTS for its seq has
//     arrived, checks tag and size, then splits the message over the
//     connection's QPs (NCCL_IB_QPS_PER_CONNECTION) and RDMA-writes chunk i on
//     QP i straight into the receiver's buffer, each write carrying its length
//     as the immediate. Sends complete when every write is acknowledged.
//   * The receiver counts immediates per QP: a QP delivers in order, so the
//     k-th completion on every QP belongs to message k; the message is done
//     when each QP delivered its chunk, its size the sum of the immediates.
// Every completion re-posts the receive it consumed. One CQ per comm, polled
// under the comm's mutex by whichever thread calls isend/irecv/test.
//
// GPUDirect RDMA: a buffer registered from GPU memory (a dma-buf, or by address
// with nvidia-peermem) is written and read by the HCA like host memory. Once a
// receive into GPU memory completed, iflush makes its bytes visible to the GPU
// before anything tells the GPU they are there: an RDMA read of the buffer's
// first byte into a host word, on a QP of this comm connected to itself (made
// at the first flush, on the CQ of the comm). A read's response cannot pass
// the writes before it on PCIe, so once it completed the NIC's writes have
// landed. NCCL_GDR_FLUSH_DISABLE=1 makes iflush return no request. The CPU
// cannot read GPU memory, so neither direction of GPU memory takes the TCP
// fallback: such a message fails the connection with a clear error instead.
//
// Failover to TCP (THESEUS_IB_FAILOVER, on by default; ib_failover.cc): the
// set-up socket stays open. When the IB path fails under a connection — its
// port goes down, or a completion fails (retries exhausted, a QP in error,
// an access error) — the side that saw it moves its QPs to the error state,
// drains its CQ and tells the other side over the socket: the sender sends
// FAILOVER, the receiver RESUME(k), k = the first message it has not received
// in full (every QP delivered its chunk). The sender, which still holds every
// message it was not told is complete, completes those below k and sends k and
// later ones over the socket as [header{seq, size, tag}][bytes], in order; new
// messages follow them. So nothing is lost, duplicated or reordered. Each
// failover is a WARN and counts in rank.<r>.net_failovers.
//
// Moving back (ib_recovery.cc): once the sender has a port up (its home port,
// or with THESEUS_IB_FAILOVER_HCA another HCA port of this host with the same
// link layer) and everything it queued went out, the sender makes new QPs on
// it and sends RECOVER(seq, its QP numbers) in the stream, after its last TCP
// message. A move to the same port waits 0.5 s after the failover (then a
// backoff doubling to 10 s while the receiver refuses); a move to another port
// goes at once. The receiver, when it reads that far, makes new QPs too on a
// port of its own that is up (its home port first) and answers RECOVERED(its
// QP numbers) — or REFUSED when it has none. The sender connects its QPs,
// posts its CTS receives and sends READY; only then does the receiver announce
// its posted receives again (CTS), so no write reaches a QP not ready for it.
// From READY on the connection is on IB again. A connection that moves to
// another HCA re-registers its CTS FIFO there, and each user buffer the first
// time it uses it there (ib_memory.h): keys are per protection domain.
//
// Going home: a side whose connection runs on another HCA while its home port
// is up again (and 0.5 s passed since the move) starts a planned failover —
// the same FAILOVER/RESUME exchange, flagged planned so the peer does not
// count it as a failure — and the move back above then picks the home port.
// A receiver that fails over with a port up (another HCA) flags its RESUME
// so, and the sender starts the move back at once instead of after 0.5 s.
// So a port that fails and heals costs two short TCP interludes, and the
// traffic runs on the home port, the rail the topology chose, whenever it can.
//
// Moves the policy asks for (policy::NicChoice, at an epoch boundary): a
// policy may move a rank's traffic off its home port while the port is up —
// degraded, slow, erroring — to another HCA port of the host ("other_nic";
// with none up the connection stays: a slow port beats TCP), or to another
// port or else TCP ("any"). The communicator's engine sets the choice on the
// home port when the table that carries it takes effect (IbDevice::moveVotes),
// and each connection of the port, at its next poll on IB, sees that the port
// it should use (moveTarget) is another one and starts a planned failover:
// the same lossless FAILOVER/RESUME and move back as above, not counted as a
// failure. A later table without the choice brings the traffic home the same
// way. The receiver's side decides for its own port when it answers RECOVER;
// when its policy keeps it on TCP it flags its REFUSED so, and the sender asks
// again every 0.5 s instead of backing off to 10 s.
//
// Errors are sticky and name the device, the peer's address and the QP: a
// completion error (ibv_wc_status_str), a port that went down (with failover
// off, or when the socket fails too), a CTS or immediate that breaks the
// protocol (garbage from the peer), a message larger than the receive posted
// for it. Once a QP failed, the flushed completions after it are not reported
// again.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "transport/ib/ib_devices.h"
#include "transport/ib/ib_memory.h"

namespace theseus::transport::ib {

inline constexpr int kFifoDepth = 32;  // requests in flight per comm (NCCL_NET_MAX_REQUESTS)
inline constexpr int kMaxQps = 16;

namespace wire {
inline constexpr uint64_t kHandleMagic = 0x31444e4842495354ull;  // "TSIBHND1"
inline constexpr uint64_t kInfoMagic = 0x314f464e49424954ull;    // "TIBINFO1"
inline constexpr uint32_t kVersion = 1;
inline constexpr uint8_t kReadyByte = 0x5a;
inline constexpr uint32_t kTcpMagic = 0x50434954u;  // "TICP"
enum TcpType : uint32_t { kFailover = 1, kResume = 2, kData = 3, kRecover = 4, kRecovered = 5, kRefused = 6, kReady = 7 };
// FAILOVER/RESUME's tag: flags.
inline constexpr int32_t kPlanned = 1;   // a move back home, not a failure
inline constexpr int32_t kPortUp = 2;    // RESUME: the receiver has a port up; the move back may start at once
inline constexpr int32_t kPolicy = 4;    // REFUSED: the receiver's port is up, but the policy keeps it on TCP

// What travels on the set-up socket after the set-up (failover, ib_failover.cc).
struct TcpHeader {
  uint32_t magic;
  uint32_t type;
  uint64_t seq;
  int64_t size;
  int32_t tag;
  uint32_t reserved;
};
static_assert(sizeof(TcpHeader) == 32);

struct CtsEntry {
  uint64_t addr;
  uint32_t rkey;
  uint32_t seq;
  int64_t size;
  int32_t tag;
  uint32_t reserved;
};
static_assert(sizeof(CtsEntry) == 32);

struct ConnInfo {
  uint64_t magic;
  uint32_t version;
  uint32_t nqps;
  uint32_t qpn[kMaxQps];
  uint16_t lid;
  uint8_t roce;
  uint8_t mtu;
  uint32_t depth;
  uint8_t gid[16];
  uint64_t fifoAddr;  // sender only
  uint32_t fifoRkey;
  uint32_t reserved;
  char device[32];
};
static_assert(sizeof(ConnInfo) == 152);

// What listen() writes into NCCL's 128-byte handle; connect() keeps its state pointer in it.
struct Handle {
  uint64_t magic;
  uint32_t addrLen;
  uint32_t reserved;
  unsigned char addr[64];  // sockaddr_in / sockaddr_in6
  void* connecting;        // the sender's set-up in progress (null until its first connect())
};
static_assert(sizeof(Handle) <= 128);
}  // namespace wire

class IbComm;

// wr_id of a work request: its kind in the top byte, a request, slot or QP index below.
enum WrKind : uint64_t { kCtsWrite = 1, kCtsRecv = 2, kDataWrite = 3, kDataRecv = 4, kFlushRead = 5 };
inline uint64_t wrId(WrKind kind, uint64_t index) { return (static_cast<uint64_t>(kind) << 56) | index; }

struct IbRequest {
  enum Kind : uint8_t { kFree, kSend, kRecv, kFlush };
  Kind kind = kFree;
  IbComm* comm = nullptr;
  int pending = 0;  // completions still expected
  int64_t size = 0;
  uint64_t seq = 0;
  // Kept for the failover (a send is re-sent from them; a receive is filled through the socket).
  char* data = nullptr;
  int64_t capacity = 0;  // receives: the bytes posted
  int tag = 0;
  size_t moved = 0;      // bytes moved over the socket
  IbMemory* mem = nullptr;  // the buffer's registrations (the key depends on the HCA in use)
};

class IbComm {
 public:
  enum Side { kSender, kReceiver };
  IbComm(const IbVerbs* v, IbDevice* dev, Side side) : v_(v), dev_(dev), home_(dev), side_(side) {}
  ~IbComm();
  IbComm(const IbComm&) = delete;
  IbComm& operator=(const IbComm&) = delete;

  // Set-up steps (ib_setup.cc).
  Status createQps(int nqps);                      // CQ, QPs in INIT, this side's buffers
  Status createQueues(int nqps);                   // CQ and QPs in INIT (the set-up, and a move back to IB)
  void destroyQueues();
  wire::ConnInfo localInfo() const;
  Status connectQps(const wire::ConnInfo& remote);  // RTR, RTS, receives posted
  void setPeer(std::string peer) { peer_ = std::move(peer); }
  // The set-up socket, kept for the failover (closed with the comm).
  void adoptSocket(int fd);

  // Data (ib_data.cc): ncclResult_t as the net API returns them; errors also logged once.
  ncclResult_t isend(void* data, size_t size, int tag, void* mhandle, void** request);
  ncclResult_t irecv(void* data, size_t size, int tag, void* mhandle, void** request);
  ncclResult_t test(IbRequest* r, int* done, int* size);
  // GPUDirect RDMA receives (ib_flush.cc): the read-back that makes a completed receive into GPU
  // memory visible to the GPU; no request for host memory or with NCCL_GDR_FLUSH_DISABLE=1.
  ncclResult_t iflush(void* data, int size, IbMemory* mem, void** request);

  IbDevice* device() const { return dev_; }

 private:
  Status poll();                          // under mu_
  Status onCompletion(const ibv_wc& wc);  // under mu_
  Status postCtsReceive();
  Status postCts(IbRequest* r);           // receiver: announce a posted receive to the sender
  Status postDataReceive(int qp);
  Result<ibv_qp*> newQp(int depth);       // an RC QP on the comm's CQ, in INIT
  Status createFlushQp();                 // under mu_: the loopback QP and host word of iflush
  void destroyFlushQp();
  // The QP state changes to RTS towards `remote`'s QP `qpn` (connectQps, and the loopback QP).
  Status connectQp(ibv_qp* qp, uint32_t qpn, const wire::ConnInfo& remote, int index);
  ncclResult_t fail(Status s);            // under mu_: keeps the first error
  ncclResult_t failed() const;            // under mu_: the kept error (and this thread's ibLastError)
  IbRequest* freeRequest();
  // Failover (ib_failover.cc), under mu_. `why`: the IB failure; the result is an error only
  // when the connection cannot go on.
  Status failOver(const Status& why, bool planned = false);
  Status checkSocket();              // IB mode: a FAILOVER or RESUME from the peer
  Status onResume(uint64_t first, int32_t flags);  // sender: re-send from `first`
  Status progressTcp();              // TCP mode: move what the socket takes now
  Status readHeader(bool* complete);
  Status sendControl(wire::TcpType type, uint64_t seq, int32_t flags = 0);
  void quiesceQps();                 // QPs to the error state, CQ drained of what completed
  Status sendAll(const void* data, size_t bytes, const char* what);  // small control messages
  Result<bool> readInfo();           // the ConnInfo after a RECOVER/RECOVERED header (true: complete)
  Status maybeRecover();             // sender, TCP mode: start the move back when it may (ib_recovery.cc)
  void logBackOnIb(uint64_t at) const;  // WARN after a failure, INFO after a planned move
  Status onRecoverMessage();         // the RECOVER, RECOVERED, REFUSED or READY in hdr_
  IbDevice* usableDevice() const;    // the port a move back to IB would use (null: none is up)
  Status switchTo(IbDevice* to);     // queues destroyed: the comm's FIFO registered on `to` from now on
  IbDevice* moveTarget() const;      // IB mode: where the connection should run now (dev_: stay; null: TCP)
  std::string where(int qp) const;        // "mlx5_0:1 QP 3 (to 10.0.0.2:41234)"

  const IbVerbs* v_;
  IbDevice* dev_;   // the port the connection uses now
  IbDevice* home_;  // the port it was set up on (the topology's choice)
  Side side_;
  std::string peer_;
  std::mutex mu_;
  Status error_;
  ibv_cq* cq_ = nullptr;
  std::vector<ibv_qp*> qps_;
  wire::ConnInfo remote_{};
  IbRequest requests_[kFifoDepth];
  // Sender: the FIFO the receiver writes CTS entries into.
  wire::CtsEntry* fifo_ = nullptr;
  ibv_mr* fifoMr_ = nullptr;
  uint64_t ctsArrived_ = 0;
  uint64_t sent_ = 0;
  // Receiver: the CTS entries it writes from, and what arrived per QP.
  wire::CtsEntry* ctsLocal_ = nullptr;
  ibv_mr* ctsMr_ = nullptr;
  uint64_t posted_ = 0;
  uint64_t ctsWritten_ = 0;
  std::vector<uint64_t> arrived_;
  IbRequest* bySlot_[kFifoDepth] = {};
  // Receiver, GPUDirect RDMA: iflush's QP connected to itself and the host word it reads into.
  ibv_qp* flushQp_ = nullptr;
  alignas(64) uint64_t flushWord_ = 0;
  ibv_mr* flushMr_ = nullptr;
  // Failover.
  enum class Mode { kIb, kFailingOver, kTcp, kRecovering };
  Mode mode_ = Mode::kIb;
  int sock_ = -1;
  bool failoverEnabled_ = true;
  bool planned_ = false;  // the last move off IB was planned (not a failure)
  bool otherHcas_ = true;  // THESEUS_IB_FAILOVER_HCA
  uint64_t lastSocketCheckNs_ = 0;
  wire::TcpHeader hdr_{};
  size_t hdrDone_ = 0;
  uint64_t tcpNext_ = 0;               // receiver: the next message the socket brings
  std::vector<IbRequest*> tcpQueue_;   // sender: messages to write, in order
  size_t hdrSent_ = 0;                 // sender: bytes of the front message's header written
  IbRequest* sendBySlot_[kFifoDepth] = {};
  // Moving back.
  uint64_t nextRecoveryNs_ = 0;
  bool freshQueues_ = false;  // sender: its QPs were made for a RECOVER and never connected
  uint64_t freshDownEvents_ = 0;  // their port's downEvents when they were made
  int64_t recoveryBackoffMs_ = 500;
  wire::ConnInfo info_{};
  size_t infoDone_ = 0;
};

}  // namespace theseus::transport::ib
