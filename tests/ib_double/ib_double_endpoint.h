// Helpers for the processes the ib_double tests spawn (ib_double_scenarios.cc):
// checks that end the child process, a file "board" under THESEUS_FAKE_IBV_DIR
// through which the processes of one test exchange addresses, and Endpoint, one
// QP with its device, PD and CQs, driven through the verbs API exactly as a
// user of libibverbs would.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>

namespace theseus::ibdouble {

// A failed check prints where and what, then ends the child with status 1.
[[noreturn]] void failCheck(const char* file, int line, const std::string& what);

#define IBD_CHECK(cond)                                                   \
  do {                                                                    \
    if (!(cond)) ::theseus::ibdouble::failCheck(__FILE__, __LINE__, #cond); \
  } while (0)

#define IBD_CHECK_EQ(a, b)                                                                           \
  do {                                                                                               \
    const long long ibdA = static_cast<long long>(a), ibdB = static_cast<long long>(b);              \
    if (ibdA != ibdB)                                                                                \
      ::theseus::ibdouble::failCheck(__FILE__, __LINE__,                                             \
                                     std::string(#a " == " #b ": ") + std::to_string(ibdA) + " vs " + \
                                         std::to_string(ibdB));                                      \
  } while (0)

// The board: publish writes <DIR>/b-<key> atomically; await waits for it (failing after timeoutMs).
void publish(const std::string& key, const std::string& value = "1");
std::string await(const std::string& key, int timeoutMs = 30000);
bool published(const std::string& key);
std::string boardDir();
// The role of the other process of a two-process scenario ("A" <-> "B").
std::string peerRole(const std::string& role);
int64_t nowMs();
void sleepMs(int ms);

struct RemoteMem {
  uint64_t addr = 0;
  uint32_t rkey = 0;
  std::string text() const;
  static RemoteMem parse(const std::string& text);
};

struct EndpointOptions {
  const char* device = nullptr;  // the first device when null
  uint8_t port = 1;
  int sendCqe = 256;
  int recvCqe = 256;
  uint32_t maxSendWr = 64, maxRecvWr = 64, maxSendSge = 4, maxRecvSge = 4, maxInline = 0;
  bool sigAll = false;
  bool channel = false;  // a completion channel on the receive CQ
};

struct ConnectOptions {
  uint8_t timeout = 14, retryCnt = 7, rnrRetry = 7, minRnrTimer = 12;
  unsigned access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  bool useGid = false;  // address an IB peer by GID too (RoCE peers always are)
};

class Endpoint {
 public:
  explicit Endpoint(const EndpointOptions& options = {});
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  // "qpn lid roce gid-hex": what the peer needs to connect.
  std::string address() const;
  // RESET -> INIT -> RTR -> RTS towards the peer's address().
  void connect(const std::string& peerAddress, const ConnectOptions& options = {});
  // Publishes our address as <tag>.<role>, waits for the peer's and connects.
  void exchange(const std::string& tag, const std::string& role, const ConnectOptions& options = {});
  ibv_mr* reg(void* addr, size_t length, unsigned access);

  int postSend(ibv_wr_opcode op, uint64_t wrId, ibv_sge* sges, int n, unsigned flags = IBV_SEND_SIGNALED,
               const RemoteMem& remote = {}, uint32_t imm = 0);
  int postRecv(uint64_t wrId, ibv_sge* sges, int n);
  // The next completion of cq (failing the child after timeoutMs).
  ibv_wc wait(ibv_cq* cq, int timeoutMs = 10000);
  // True when cq yields nothing for ms.
  bool quiet(ibv_cq* cq, int ms);
  ibv_qp_state state();
  // Waits for an asynchronous event of this type (others are skipped); false after timeoutMs.
  bool waitAsync(ibv_event_type type, int timeoutMs, ibv_async_event* out = nullptr);

  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_comp_channel* channel = nullptr;
  ibv_cq* scq = nullptr;
  ibv_cq* rcq = nullptr;
  ibv_qp* qp = nullptr;
  uint8_t port = 1;
  bool roce = false;
  uint16_t lid = 0;
  ibv_gid gid{};
  int gidIndex = 0;

 private:
  ibv_mr* mrs_[16] = {};
  int nmrs_ = 0;
};

ibv_sge sge(const void* addr, uint32_t length, const ibv_mr* mr);

}  // namespace theseus::ibdouble
