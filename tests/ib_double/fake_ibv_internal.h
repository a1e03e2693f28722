// Internals of the libibverbs test double (see README.md in this folder).
//
// Every verbs object is a struct whose first member is the rdma-core struct the
// caller sees (ibv_context, ibv_qp, ...), so a pointer the caller hands back is
// cast to ours. All mutable state of the process's verbs objects is guarded by
// one mutex, State::mu: user threads (post, poll, modify) and the wire thread
// (fake_ibv_wire.cc) take it, and nothing blocks while holding it (sockets are
// non-blocking). That keeps the double simple and TSan-clean; it is a test
// double, not a fast path.
#pragma once

#include <infiniband/verbs.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace theseus::fakeibv {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kBadRkey = 0xffffffff;  // never allocated: THESEUS_FAKE_IBV_FAULT=rem_access_after
constexpr int kMaxQpWr = 8192;
constexpr int kMaxSge = 30;
constexpr int kMaxInline = 1024;
constexpr int kMaxRdAtomic = 16;
constexpr uint32_t kMaxMsgSize = 1u << 30;

// ---- configuration (fake_ibv_config.cc) ------------------------------------

struct DeviceConfig {
  std::string name;
  int ports = 1;
  bool roce = false;
  int speedMbps = 200000;
  ibv_mtu mtu = IBV_MTU_4096;
};

struct FaultConfig {
  uint64_t qpErrorAfter = 0;    // the Nth send WR posted completes with IBV_WC_GENERAL_ERR
  uint64_t remAccessAfter = 0;  // the Nth RDMA write/read posted carries a wrong rkey
  bool readFail = false;        // every RDMA read posted carries a wrong rkey (remote access error)
  uint64_t cqOverrunAfter = 0;  // the CQ receiving the Nth completion overruns
  bool regMrFail = false;       // every ibv_reg_mr fails with ENOMEM
  bool noDmaBuf = false;        // the provider has no dma-buf support: ibv_reg_dmabuf_mr fails with EOPNOTSUPP
  bool dmaBufFail = false;      // ibv_reg_dmabuf_mr of a descriptor fails with EFAULT (support probes still pass)
};

struct Config {
  std::vector<DeviceConfig> devices;
  std::string host;
  std::string dir;
  FaultConfig faults;
};

// Reads THESEUS_FAKE_IBV_* (errors in them are printed and the bad entry skipped).
Config readConfig();

// Identities derived from (host, device, port): see README.md.
uint64_t nodeGuid(const std::string& host, const std::string& device);
uint16_t portLid(const std::string& host, const std::string& device, int port);
int gidTableLen(bool roce);
// Fills gid and type for index; false when index is outside the table.
bool portGid(const std::string& host, const DeviceConfig& dev, int port, int index, ibv_gid* gid,
             ibv_gid_type* type);
// The LID a GID of ours encodes (0 when it is not one of ours).
uint16_t lidFromGid(const ibv_gid& gid);
void speedToIb(int mbps, uint8_t* activeSpeed, uint8_t* activeWidth);

// ---- objects -----------------------------------------------------------------

struct FakeDevice {
  ibv_device dev;  // first: the caller's ibv_device* is ours
  DeviceConfig cfg;
  uint64_t guid = 0;
  std::vector<char> portUp;  // [port], as the wire thread last saw the down-files
  // [port]: the rate the wire thread paces the port's requests at (Mb/s, from the rate-files;
  // 0: not paced), and when the port's last request is through at that rate.
  std::vector<int> pacedMbps;
  std::vector<Clock::time_point> busyUntil;
};

struct FakeContext {
  ibv_context ctx;  // first
  FakeDevice* dev = nullptr;
  std::deque<ibv_async_event> events;  // one eventfd count per entry
  int resources = 0;                   // PDs, CQs, channels alive
  bool closed = false;
};

struct FakePd {
  ibv_pd pd;  // first
  FakeContext* ctx = nullptr;
  int users = 0;  // MRs and QPs
};

struct FakeMr {
  ibv_mr mr;  // first
  FakePd* pd = nullptr;
  unsigned access = 0;
  uint64_t iova = 0;  // the address remote peers and SGEs use for mr.addr
  void* dmaBufMap = nullptr;  // a dma-buf registration: the double's mapping of the descriptor (unmapped at dereg)
  size_t dmaBufMapBytes = 0;
};

struct FakeCq;

struct FakeChannel {
  ibv_comp_channel ch;  // first
  std::deque<FakeCq*> events;
  int cqs = 0;
};

struct FakeCq {
  ibv_cq cq;  // first
  FakeContext* ctx = nullptr;
  FakeChannel* channel = nullptr;
  std::deque<ibv_wc> entries;
  size_t capacity = 0;
  bool overrun = false;
  bool armed = false;
  int qps = 0;
};

struct SendWqe {
  uint64_t wrId = 0;
  ibv_wr_opcode op = IBV_WR_SEND;
  bool signaled = false;
  bool hasImm = false;
  uint32_t imm = 0;
  uint64_t raddr = 0;
  uint32_t rkey = 0;
  uint32_t length = 0;
  std::vector<ibv_sge> sges;
  bool isInline = false;
  std::vector<char> inlineData;
  bool injectError = false;  // THESEUS_FAKE_IBV_FAULT=qp_error_after
  uint32_t seq = 0;          // assigned when first sent
};

struct RecvWqe {
  uint64_t wrId = 0;
  std::vector<ibv_sge> sges;
};

// A byte buffer consumed from the front (socket input and output).
struct Buffer {
  std::vector<char> bytes;
  size_t start = 0;
  size_t size() const { return bytes.size() - start; }
  const char* data() const { return bytes.data() + start; }
  void consume(size_t n);
  void append(const void* p, size_t n);
  void clear() {
    if (bytes.capacity() > (8u << 20)) {
      std::vector<char>().swap(bytes);  // a large frame's memory goes back
    } else {
      bytes.clear();
    }
    start = 0;
  }
};

struct FakeQp {
  ibv_qp qp;  // first
  uint64_t id = 0;
  FakeContext* ctx = nullptr;
  FakePd* pd = nullptr;
  FakeCq* scq = nullptr;
  FakeCq* rcq = nullptr;
  ibv_qp_cap cap{};
  bool sigAll = false;

  // The QP's state. The wire thread changes it (errors); qp.state, the caller's copy, is updated
  // only by the caller's own calls (modify, query), as in rdma-core, so reading it is no race.
  ibv_qp_state state = IBV_QPS_RESET;
  // Attributes set through ibv_modify_qp.
  uint8_t port = 0;
  uint16_t pkeyIndex = 0;
  unsigned accessFlags = 0;
  ibv_ah_attr ah{};
  ibv_mtu pathMtu = IBV_MTU_1024;
  uint32_t destQpn = 0, rqPsn = 0, sqPsn = 0;
  uint8_t minRnrTimer = 0, timeout = 0, retryCnt = 0, rnrRetry = 0, maxRdAtomic = 0, maxDestRdAtomic = 0;

  std::deque<SendWqe> sq;
  std::deque<RecvWqe> rq;

  // Routing: the socket this QP listens on, its LID alias and the peer's alias.
  int listenFd = -1;
  std::string listenPath, aliasPath, peerPath;

  // Requester side (fake_ibv_wire.cc): one connection to the peer, one WR in flight.
  int outFd = -1;
  Buffer out, in;
  bool inFlight = false;
  uint32_t nextSeq = 1;
  int rnrCount = 0;
  Clock::time_point nextAttempt{};
  bool inEpisode = false;           // retrying (no connection, NAK, port down) ...
  Clock::time_point episodeEnd{};   // ... until this, then IBV_WC_RETRY_EXC_ERR
  Clock::time_point idleEnd{};      // in flight: no byte moved until this, then IBV_WC_RETRY_EXC_ERR

  // Responder side: the last request applied (a resend after a lost connection is not applied twice).
  bool haveLast = false;
  uint32_t lastSeq = 0;
  uint8_t lastStatus = 0;
};

// An accepted connection: requests for qpId come in, responses go out.
struct InConn {
  uint64_t id = 0;
  int fd = -1;
  uint64_t qpId = 0;
  Buffer in, out;
};

struct State {
  std::mutex mu;
  Config cfg;
  std::vector<FakeDevice*> devices;
  std::vector<FakeContext*> contexts;
  std::unordered_map<uint64_t, FakeQp*> qps;  // by id
  std::map<uint64_t, InConn*> inConns;
  std::map<uint32_t, FakeMr*> mrs;  // by key (lkey == rkey)
  uint32_t nextKey = 0x100;
  uint64_t nextId = 1;
  uint64_t sendWrCount = 0, rdmaWrCount = 0, completionCount = 0;
  int wakeFd = -1;
  bool wireStarted = false;
};

// The process's state; the configuration is read on the first call.
State& state();
// The wire thread is started on the first ibv_open_device.
void startWireLocked(State& s);
void wakeWire(State& s);

// ---- QP logic shared by the verbs calls and the wire (fake_ibv_qp.cc) ----------

// Appends a completion (honours overrun and THESEUS_FAKE_IBV_FAULT=cq_overrun_after).
void pushCompletion(State& s, FakeCq* cq, const ibv_wc& wc);
// Moves qp to IBV_QPS_ERR: the first outstanding send WR completes with firstStatus
// (IBV_WC_WR_FLUSH_ERR for a plain flush), every other WR with IBV_WC_WR_FLUSH_ERR.
void moveToError(State& s, FakeQp* qp, ibv_wc_status firstStatus);
void queueAsyncEvent(FakeContext* ctx, const ibv_async_event& ev);
// Signals the CQ's completion channel when the CQ is armed.
void notifyCq(FakeCq* cq);
void closeRequesterLocked(FakeQp* qp);
bool portIsUp(const State& s, const FakeDevice* dev, int port);
std::string downFilePath(const State& s, const FakeDevice* dev, int port);
// <DIR>/rate-<host>-<device>-<port>: the port's degraded link rate in Mb/s while it exists.
std::string rateFilePath(const State& s, const FakeDevice* dev, int port);
// The rate in the port's rate-file, or 0 when there is none (or it does not hold a rate).
int degradedRateMbps(const State& s, const FakeDevice* dev, int port);
// The retry budget of a QP (README.md: 4.096 us * 2^timeout * (retry_cnt + 1), bounded).
Clock::duration retryBudget(const FakeQp* qp);
// Translates an SGE (lkey) or remote (rkey) address range to a pointer; nullptr when not allowed.
char* localRange(State& s, FakeQp* qp, uint32_t lkey, uint64_t addr, uint64_t len, bool write);
char* remoteRange(State& s, FakeQp* qp, uint32_t rkey, uint64_t addr, uint64_t len, unsigned needAccess);
// Copies as the adapter's DMA engine would: invisible to ThreadSanitizer (the peer polls flags in
// memory the "hardware" writes), still checked by AddressSanitizer.
void dmaCopy(void* dst, const void* src, size_t n);

[[noreturn]] void fatal(const char* what);
void warn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace theseus::fakeibv
