// A test double for NCCL: an in-process, host-memory implementation of the
// 28 functions the *_perf binaries import, preloaded (LD_PRELOAD, tests only)
// so the harness driver can be tested end to end -- threads (-t), several
// ranks per thread (-g), grouped init (-p 0), aggregation (-m), mulsum,
// registration, -T aborts -- without depending on Theseus' collectives.
//
// Model: all ranks of a communicator live in this process. Every operation of
// a group is posted when the outermost ncclGroupEnd runs: collective
// contributions go to a rendezvous keyed by the communicator's sequence
// number, and the thread that posts the last contribution computes every
// rank's output; sends snapshot their data into a per-(src, dst) mailbox and
// receives wait for it. Reductions run in rank order, rounding to the type at
// every step like a real library (floating avg pre-multiplies by 1/n, integer
// avg divides the sum). Every wait is bounded (60 s) and abortable.
//
// FAKE_NCCL_HANG_AT=k makes the k-th collective call of the process block until
// ncclCommAbort (to test -T).
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "nccl.h"
#include "perf_types.h"

namespace {

// memcpy that accepts empty ranges (count 0 has NULL buffers and empty vectors).
void copyBytes(void* dst, const void* src, size_t n) {
  if (n > 0) memcpy(dst, src, n);
}


using theseus::perf::decodeFloat;
using theseus::perf::encodeFloat;
using theseus::perf::loadBits;
using theseus::perf::storeBits;
using theseus::perf::typeInfo;

constexpr auto kWaitLimit = std::chrono::seconds(60);

enum class Kind { kAllReduce, kAllGather, kBroadcast, kReduce, kReduceScatter, kAlltoAll, kGather, kScatter };

struct Contribution {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  double scalar = 1.0;  // PreMulSum scalar (or 1/n for floating avg)
  int root = 0;
  Kind kind = Kind::kAllReduce;
};

struct Rendezvous {
  std::vector<Contribution> parts;
  int posted = 0;
  bool done = false;
  std::string error;
};

struct Message {
  std::vector<char> data;
};

struct Clique {
  int nranks = 0;
  int joined = 0;
  bool aborted = false;
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, Rendezvous> pending;
  std::map<std::pair<int, int>, std::deque<Message>> mail;
};

struct FakeComm {
  Clique* clique = nullptr;
  int rank = 0;
  uint64_t seq = 0;
  int nextOp = ncclNumOps;
  std::map<int, double> preMul;
};

std::mutex gMu;
std::map<std::string, Clique*> gCliques;  // by unique id bytes; never freed (tests)
std::atomic<uint64_t> gIdCounter{0};
std::atomic<uint64_t> gCollCalls{0};
thread_local std::string tLastError;

struct PendingOp {
  enum class Type { kWaitJoined, kCollective, kSend, kRecv } type;
  FakeComm* comm = nullptr;
  Contribution c;
  int peer = -1;
  uint64_t seq = 0;
};
thread_local int tDepth = 0;
thread_local std::vector<PendingOp> tOps;

ncclResult_t fail(ncclResult_t r, const std::string& msg) {
  tLastError = "fake NCCL: " + msg;
  return r;
}

template <typename Pred>
bool waitFor(Clique* q, std::unique_lock<std::mutex>& lock, Pred pred) {
  return q->cv.wait_for(lock, kWaitLimit, [&] { return pred() || q->aborted; }) && !q->aborted;
}

double loadValue(ncclDataType_t t, const void* p, size_t i) {
  uint64_t b = loadBits(p, i, typeInfo(t).size);
  if (typeInfo(t).isFloat) return decodeFloat(t, b);
  return 0;  // integers go through loadInt
}

int64_t loadInt(ncclDataType_t t, const void* p, size_t i) {
  const auto& ti = typeInfo(t);
  uint64_t b = loadBits(p, i, ti.size);
  int bits = static_cast<int>(ti.size * 8);
  if (ti.isSigned && bits < 64) return static_cast<int64_t>(b << (64 - bits)) >> (64 - bits);
  return static_cast<int64_t>(b);
}

// acc[i] = acc[i] (op) x[i], both in the element type; `first` initialises.
void reduceElement(const Contribution& c, const void* src, void* dst, size_t i, bool first, int nranks) {
  const auto& ti = typeInfo(c.type);
  const bool preMul = c.op >= ncclNumOps || (c.op == ncclAvg && ti.isFloat);
  if (ti.isFloat) {
    double x = loadValue(c.type, src, i);
    if (preMul) x = decodeFloat(c.type, encodeFloat(c.type, x * c.scalar));
    double a = first ? x : loadValue(c.type, dst, i);
    double r = x;
    if (!first) {
      switch (c.op) {
        case ncclProd: r = a * x; break;
        case ncclMax: r = std::max(a, x); break;
        case ncclMin: r = std::min(a, x); break;
        default: r = a + x; break;
      }
    }
    storeBits(dst, i, ti.size, encodeFloat(c.type, r));
    return;
  }
  const bool isSigned = ti.isSigned;
  int64_t x = loadInt(c.type, src, i);
  if (c.op >= ncclNumOps) x = static_cast<int64_t>(static_cast<uint64_t>(x) * static_cast<uint64_t>(c.scalar));
  int64_t a = first ? x : loadInt(c.type, dst, i);
  uint64_t r = static_cast<uint64_t>(x);
  if (!first) {
    switch (c.op) {
      case ncclProd: r = static_cast<uint64_t>(a) * static_cast<uint64_t>(x); break;
      case ncclMax:
        r = isSigned ? static_cast<uint64_t>(std::max(a, x))
                     : std::max(static_cast<uint64_t>(a), static_cast<uint64_t>(x));
        break;
      case ncclMin:
        r = isSigned ? static_cast<uint64_t>(std::min(a, x))
                     : std::min(static_cast<uint64_t>(a), static_cast<uint64_t>(x));
        break;
      default: r = static_cast<uint64_t>(a) + static_cast<uint64_t>(x); break;
    }
  }
  storeBits(dst, i, ti.size, r);
  (void)nranks;
}

void finishAvg(const Contribution& c, void* dst, size_t n, int nranks) {
  const auto& ti = typeInfo(c.type);
  if (c.op != ncclAvg || ti.isFloat) return;
  for (size_t i = 0; i < n; ++i) {
    int64_t v = loadInt(c.type, dst, i);
    uint64_t r = ti.isSigned ? static_cast<uint64_t>(v / nranks) : static_cast<uint64_t>(v) / nranks;
    storeBits(dst, i, ti.size, r);
  }
}

// Reduces element range [first, first+n) of every rank's send buffer into dst.
void reduceInto(const std::vector<Contribution>& parts, size_t first, size_t n, void* dst) {
  const size_t es = typeInfo(parts[0].type).size;
  const int nranks = static_cast<int>(parts.size());
  std::vector<char> acc(n * es);
  for (int r = 0; r < nranks; ++r) {
    const char* src = static_cast<const char*>(parts[r].send) + first * es;
    for (size_t i = 0; i < n; ++i) reduceElement(parts[r], src, acc.data(), i, r == 0, nranks);
  }
  finishAvg(parts[0], acc.data(), n, nranks);
  copyBytes(dst, acc.data(), acc.size());
}

// Computes every rank's output; inputs are read before any output is written.
void execute(std::vector<Contribution>& parts) {
  const int n = static_cast<int>(parts.size());
  const Contribution& c0 = parts[0];
  const size_t es = typeInfo(c0.type).size;
  const size_t cnt = c0.count;
  std::vector<std::vector<char>> out(n);
  switch (c0.kind) {
    case Kind::kAllReduce:
    case Kind::kReduce:
      out[0].resize(cnt * es);
      reduceInto(parts, 0, cnt, out[0].data());
      for (int r = 0; r < n; ++r)
        if (c0.kind == Kind::kAllReduce || r == c0.root) copyBytes(parts[r].recv, out[0].data(), cnt * es);
      return;
    case Kind::kReduceScatter:
      for (int r = 0; r < n; ++r) {
        out[r].resize(cnt * es);
        reduceInto(parts, r * cnt, cnt, out[r].data());
      }
      break;
    case Kind::kBroadcast:
      for (int r = 0; r < n; ++r) out[r].assign(static_cast<const char*>(parts[c0.root].send),
                                                static_cast<const char*>(parts[c0.root].send) + cnt * es);
      break;
    case Kind::kAllGather:
    case Kind::kGather:
      for (int r = 0; r < n; ++r) {
        if (c0.kind == Kind::kGather && r != c0.root) continue;
        out[r].resize(n * cnt * es);
        for (int s = 0; s < n; ++s) copyBytes(out[r].data() + s * cnt * es, parts[s].send, cnt * es);
      }
      break;
    case Kind::kScatter:
      for (int r = 0; r < n; ++r)
        out[r].assign(static_cast<const char*>(parts[c0.root].send) + r * cnt * es,
                      static_cast<const char*>(parts[c0.root].send) + (r + 1) * cnt * es);
      break;
    case Kind::kAlltoAll:
      for (int r = 0; r < n; ++r) {
        out[r].resize(n * cnt * es);
        for (int s = 0; s < n; ++s)
          copyBytes(out[r].data() + s * cnt * es, static_cast<const char*>(parts[s].send) + r * cnt * es, cnt * es);
      }
      break;
  }
  for (int r = 0; r < n; ++r)
    if (!out[r].empty()) copyBytes(parts[r].recv, out[r].data(), out[r].size());
}

ncclResult_t runOps(std::vector<PendingOp>& ops) {
  // 1. joins, 2. post collectives and sends, 3. receive, 4. wait for collectives.
  for (PendingOp& op : ops) {
    if (op.type != PendingOp::Type::kWaitJoined) continue;
    Clique* q = op.comm->clique;
    std::unique_lock<std::mutex> lock(q->mu);
    if (!waitFor(q, lock, [&] { return q->joined == q->nranks; }))
      return fail(ncclSystemError, "communicator initialisation: ranks missing or aborted");
  }
  for (PendingOp& op : ops) {
    Clique* q = op.comm->clique;
    if (op.type == PendingOp::Type::kCollective) {
      std::lock_guard<std::mutex> lock(q->mu);
      Rendezvous& rv = q->pending[op.seq];
      rv.parts.resize(q->nranks);
      rv.parts[op.comm->rank] = op.c;
      if (++rv.posted == q->nranks) {
        execute(rv.parts);
        rv.done = true;
        q->cv.notify_all();
      }
    } else if (op.type == PendingOp::Type::kSend) {
      std::lock_guard<std::mutex> lock(q->mu);
      const char* p = static_cast<const char*>(op.c.send);
      q->mail[{op.comm->rank, op.peer}].push_back({std::vector<char>(p, p + op.c.count * typeInfo(op.c.type).size)});
      q->cv.notify_all();
    }
  }
  for (PendingOp& op : ops) {
    if (op.type != PendingOp::Type::kRecv) continue;
    Clique* q = op.comm->clique;
    std::unique_lock<std::mutex> lock(q->mu);
    auto& box = q->mail[{op.peer, op.comm->rank}];
    if (!waitFor(q, lock, [&] { return !box.empty(); })) return fail(ncclRemoteError, "recv: no matching send or aborted");
    Message m = std::move(box.front());
    box.pop_front();
    if (m.data.size() != op.c.count * typeInfo(op.c.type).size) return fail(ncclInvalidUsage, "send/recv size mismatch");
    copyBytes(op.c.recv, m.data.data(), m.data.size());
  }
  for (PendingOp& op : ops) {
    if (op.type != PendingOp::Type::kCollective) continue;
    Clique* q = op.comm->clique;
    std::unique_lock<std::mutex> lock(q->mu);
    if (!waitFor(q, lock, [&] { return q->pending[op.seq].done; }))
      return fail(ncclRemoteError, "collective: peers missing or communicator aborted");
  }
  return ncclSuccess;
}

ncclResult_t submit(PendingOp op) {
  tOps.push_back(std::move(op));
  if (tDepth > 0) return ncclSuccess;
  std::vector<PendingOp> ops;
  ops.swap(tOps);
  return runOps(ops);
}

ncclResult_t collective(Kind kind, const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                        int root, ncclComm_t handle) {
  FakeComm* comm = reinterpret_cast<FakeComm*>(handle);
  if (comm == nullptr) return fail(ncclInvalidArgument, "NULL communicator");
  if (static_cast<int>(type) < 0 || type >= ncclNumTypes) return fail(ncclInvalidArgument, "bad datatype");
  uint64_t call = ++gCollCalls;
  if (const char* h = getenv("FAKE_NCCL_HANG_AT"); h != nullptr && call == strtoull(h, nullptr, 10)) {
    std::unique_lock<std::mutex> lock(comm->clique->mu);
    comm->clique->cv.wait_for(lock, kWaitLimit, [&] { return comm->clique->aborted; });
    return fail(ncclRemoteError, "hung on purpose (FAKE_NCCL_HANG_AT) until aborted");
  }
  PendingOp p;
  p.type = PendingOp::Type::kCollective;
  p.comm = comm;
  p.seq = comm->seq++;
  p.c = {send, recv, count, type, op, 1.0, root, kind};
  if (op == ncclAvg) p.c.scalar = 1.0 / comm->clique->nranks;
  if (op >= ncclNumOps) {
    auto it = comm->preMul.find(static_cast<int>(op));
    if (it == comm->preMul.end()) return fail(ncclInvalidArgument, "unknown reduction op");
    p.c.scalar = it->second;
  }
  return submit(std::move(p));
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* v) {
  *v = NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t r) {
  static const char* const kNames[] = {"no error", "unhandled cuda error", "unhandled system error",
                                       "internal error", "invalid argument", "invalid usage",
                                       "remote process exited or there was a network error",
                                       "NCCL operation in progress"};
  return (r >= 0 && r < ncclNumResults) ? kNames[r] : "unknown result code";
}

const char* ncclGetLastError(ncclComm_t) { return tLastError.c_str(); }

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  memset(id, 0, sizeof(*id));
  std::string s = "fake-" + std::to_string(getpid()) + "-" + std::to_string(++gIdCounter);
  memcpy(id->internal, s.data(), std::min(s.size(), sizeof(id->internal)));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* out, int nranks, ncclUniqueId id, int rank, ncclConfig_t*) {
  if (out == nullptr || nranks < 1 || rank < 0 || rank >= nranks) return fail(ncclInvalidArgument, "bad init arguments");
  std::string key(id.internal, sizeof(id.internal));
  Clique* q;
  {
    std::lock_guard<std::mutex> lock(gMu);
    Clique*& slot = gCliques[key];
    if (slot == nullptr) {
      slot = new Clique();
      slot->nranks = nranks;
    }
    q = slot;
  }
  auto* c = new FakeComm();
  c->clique = q;
  c->rank = rank;
  {
    std::lock_guard<std::mutex> lock(q->mu);
    if (q->nranks != nranks) return fail(ncclInvalidUsage, "nranks mismatch");
    q->joined++;
    q->cv.notify_all();
  }
  *out = reinterpret_cast<ncclComm_t>(c);
  PendingOp p;
  p.type = PendingOp::Type::kWaitJoined;
  p.comm = c;
  return submit(std::move(p));
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t* r) {
  *r = ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t handle) {
  if (handle == nullptr) return ncclSuccess;
  Clique* q = reinterpret_cast<FakeComm*>(handle)->clique;
  std::lock_guard<std::mutex> lock(q->mu);
  q->aborted = true;  // the FakeComm is leaked on purpose: other threads may still hold it
  q->cv.notify_all();
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t handle) {
  delete reinterpret_cast<FakeComm*>(handle);
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++tDepth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (tDepth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--tDepth > 0) return ncclSuccess;
  std::vector<PendingOp> ops;
  ops.swap(tOps);
  return runOps(ops);
}

ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  *ptr = aligned_alloc(4096, (size + 4095) / 4096 * 4096);
  return *ptr ? ncclSuccess : fail(ncclSystemError, "out of memory");
}

ncclResult_t ncclMemFree(void* ptr) {
  free(ptr);
  return ncclSuccess;
}

ncclResult_t ncclCommRegister(const ncclComm_t, void* buff, size_t, void** handle) {
  *handle = buff;
  return ncclSuccess;
}
ncclResult_t ncclCommDeregister(const ncclComm_t, void*) { return ncclSuccess; }
ncclResult_t ncclCommWindowRegister(ncclComm_t, void* buff, size_t, ncclWindow_t* win, int) {
  *win = reinterpret_cast<ncclWindow_t>(buff);
  return ncclSuccess;
}
ncclResult_t ncclCommWindowDeregister(ncclComm_t, ncclWindow_t) { return ncclSuccess; }

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t type, ncclScalarResidence_t,
                                      ncclComm_t handle) {
  FakeComm* c = reinterpret_cast<FakeComm*>(handle);
  const auto& ti = typeInfo(type);
  uint64_t bits = loadBits(scalar, 0, ti.size);
  double v = ti.isFloat ? decodeFloat(type, bits) : static_cast<double>(bits & ((ti.size == 8) ? ~0ull : ((1ull << (8 * ti.size)) - 1)));
  int id = c->nextOp++;
  c->preMul[id] = v;
  *op = static_cast<ncclRedOp_t>(id);
  return ncclSuccess;
}

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t handle) {
  FakeComm* c = reinterpret_cast<FakeComm*>(handle);
  if (c->preMul.erase(static_cast<int>(op)) == 0) return fail(ncclInvalidArgument, "ncclRedOpDestroy: unknown op");
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t) {
  return collective(Kind::kAllReduce, s, r, n, t, op, 0, c);
}
ncclResult_t ncclAllGather(const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t) {
  return collective(Kind::kAllGather, s, r, n, t, ncclSum, 0, c);
}
ncclResult_t ncclBroadcast(const void* s, void* r, size_t n, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t) {
  return collective(Kind::kBroadcast, s, r, n, t, ncclSum, root, c);
}
ncclResult_t ncclReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op, int root, ncclComm_t c,
                        cudaStream_t) {
  return collective(Kind::kReduce, s, r, n, t, op, root, c);
}
ncclResult_t ncclReduceScatter(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                               cudaStream_t) {
  return collective(Kind::kReduceScatter, s, r, n, t, op, 0, c);
}
ncclResult_t ncclAlltoAll(const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t) {
  return collective(Kind::kAlltoAll, s, r, n, t, ncclSum, 0, c);
}
ncclResult_t ncclGather(const void* s, void* r, size_t n, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t) {
  return collective(Kind::kGather, s, r, n, t, ncclSum, root, c);
}
ncclResult_t ncclScatter(const void* s, void* r, size_t n, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t) {
  return collective(Kind::kScatter, s, r, n, t, ncclSum, root, c);
}

ncclResult_t ncclSend(const void* s, size_t n, ncclDataType_t t, int peer, ncclComm_t handle, cudaStream_t) {
  PendingOp p;
  p.type = PendingOp::Type::kSend;
  p.comm = reinterpret_cast<FakeComm*>(handle);
  p.peer = peer;
  p.c.send = s;
  p.c.count = n;
  p.c.type = t;
  return submit(std::move(p));
}

ncclResult_t ncclRecv(void* r, size_t n, ncclDataType_t t, int peer, ncclComm_t handle, cudaStream_t) {
  PendingOp p;
  p.type = PendingOp::Type::kRecv;
  p.comm = reinterpret_cast<FakeComm*>(handle);
  p.peer = peer;
  p.c.recv = r;
  p.c.count = n;
  p.c.type = t;
  return submit(std::move(p));
}

}  // extern "C"
