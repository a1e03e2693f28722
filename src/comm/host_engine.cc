#include "comm/host_engine.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <thread>

#include "comm/communicator.h"
#include "common/knobs.h"
#include "common/log.h"
#include "schedule/user/user_schedules.h"
#include "telemetry/telemetry.h"
#include "transport/emulation.h"
#include "transport/shared_memory_registry.h"
#include "transport/transport_config.h"

namespace theseus::comm {
namespace {

using schedule::Collective;

const IntKnob kMaxChannels("THESEUS_MAX_CHANNELS", 8,
                            "Connections per peer and direction a communicator may use (schedules with more "
                            "channels than this are not chosen)");

const IntKnob kSliceBytes("THESEUS_SLICE_BYTES", 128 << 10,
                          "Bytes per pipelined slice of a step (rounded down to a multiple of 64; must not exceed "
                          "the transports' slot size). Must be equal on all ranks");

constexpr uint32_t kP2pTag = 0x50325030;  // "P2P0"
constexpr size_t kMaxShapes = 256;         // request shapes remembered for PREPARE
constexpr size_t kDirectMinBytes = 2048;               // see lowerCollective
constexpr size_t kInPlaceDirectMinBytes = 128 << 10;

uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Value of a scalar of `type` at `p`, as double.
double scalarValue(ncclDataType_t type, const void* p) {
  switch (type) {
    case ncclInt8: return *static_cast<const int8_t*>(p);
    case ncclUint8: return *static_cast<const uint8_t*>(p);
    case ncclInt32: return *static_cast<const int32_t*>(p);
    case ncclUint32: return *static_cast<const uint32_t*>(p);
    case ncclInt64: return static_cast<double>(*static_cast<const int64_t*>(p));
    case ncclUint64: return static_cast<double>(*static_cast<const uint64_t*>(p));
    case ncclFloat16: return exec::halfToFloat(*static_cast<const uint16_t*>(p));
    case ncclFloat32: return *static_cast<const float*>(p);
    case ncclFloat64: return *static_cast<const double*>(p);
    case ncclBfloat16: return exec::bf16ToFloat(*static_cast<const uint16_t*>(p));
    case ncclFloat8e4m3: return exec::fp8E4M3ToFloat(*static_cast<const uint8_t*>(p));
    case ncclFloat8e5m2: return exec::fp8E5M2ToFloat(*static_cast<const uint8_t*>(p));
    default: return 0;
  }
}

// Programs are shared by every communicator of the process. Names that are not
// built-ins are user schedules (THESEUS_SCHEDULES, or a file path a policy names).
schedule::ProgramCache& programCache() {
  static schedule::ProgramCache cache(schedule::ProgramCache::Options{schedule::user::generate, -1});
  return cache;
}

// The memo's range id of a request: the table's range index, or for a collective
// the table leaves out (the static choice applies) -1 - its size class.
int rangeOf(const policy::DecisionTable& t, Collective c, size_t bytes) {
  int r = t.rangeIndex(c, bytes);
  return r >= 0 ? r : -1 - policy::sizeClass(bytes);
}

bool overlaps(const void* a, size_t na, const void* b, size_t nb) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return na > 0 && nb > 0 && pa < pb + nb && pb < pa + na;
}

}  // namespace

HostEngine::HostEngine(Communicator& comm) : comm_(comm) {
  size_t slice = static_cast<size_t>(std::max<int64_t>(kSliceBytes.get(), 64));
  sliceBytes_ = slice / 64 * 64;
  // Slot sizes are knobs equal on all ranks, so every rank clamps decisions' slices alike.
  auto tc = transport::readTransportConfig();
  maxSliceBytes_ = tc.isOk() ? std::min(tc.value().shmSlotBytes, tc.value().socketSlotBytes) / 64 * 64 : sliceBytes_;
  if (comm.transports() != nullptr) emulation_ = comm.transports()->emulation();
  // Host index of every rank, in order of first appearance (used by hierarchical schedules).
  if (comm.bootstrap() != nullptr) {
    std::map<uint64_t, int> hostIndex;
    for (const auto& p : comm.bootstrap()->peers()) {
      auto it = hostIndex.emplace(p.hostHash, static_cast<int>(hostIndex.size())).first;
      hostOf_.push_back(it->second);
    }
  }
}

HostEngine::~HostEngine() { shutdown(); }

Status HostEngine::startEpochs() {
  epoch::ServiceOptions o;
  o.bootstrap = comm_.bootstrap();
  o.transports = comm_.transports();
  o.attributes = &comm_.attributes();
  o.abort = &comm_.abortFlag();
  o.cudaDev = comm_.cudaDev();
  o.maxChannels = maxChannels();
  o.hostOf = hostOf_;
  o.participant = this;
  o.health = [this]() -> Status {
    TH_CHECK(health());
    for (int r : comm_.bootstrap()->departedRanks())
      if (r == 0) return remoteError("the leader (rank 0) left the communicator");
    return Status::ok();
  };
  if (o.bootstrap == nullptr) return internalError("the collective engine needs a bootstrap");
  TH_ASSIGN(epochs_, epoch::EpochService::create(o));
  clock_ = &epochs_->clock();
  adoptEpoch();
  return Status::ok();
}

void HostEngine::shutdown() {
  if (epochs_) epochs_->stop();  // before the transports go: the epoch thread uses them
  memo_.clear();
  if (scratch_ != nullptr) {
    (void)transport::freeShared(scratch_);
    scratch_ = nullptr;
    scratchBytes_ = 0;
  }
}

// ---- user reduction ops -------------------------------------------------------------------------

Status HostEngine::createPreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t type,
                                   ncclScalarResidence_t residence) {
  std::lock_guard<std::mutex> lock(opsMutex_);
  size_t slot = 0;
  while (slot < userOps_.size() && userOps_[slot].live) ++slot;
  if (slot == userOps_.size()) userOps_.emplace_back();
  if (slot >= static_cast<size_t>(ncclMaxRedOp - ncclNumOps))
    return invalidUsage("too many live custom reduction operations");
  UserOp& u = userOps_[slot];
  u.live = true;
  u.type = type;
  u.residence = residence;
  if (residence == ncclScalarHostImmediate) {
    u.value = scalarValue(type, scalar);
    u.pointer = nullptr;
  } else {
    u.pointer = scalar;
  }
  *op = static_cast<ncclRedOp_t>(ncclNumOps + static_cast<int>(slot));
  return Status::ok();
}

Status HostEngine::destroyRedOp(ncclRedOp_t op) {
  std::lock_guard<std::mutex> lock(opsMutex_);
  size_t slot = static_cast<size_t>(op) - ncclNumOps;
  if (static_cast<int>(op) < ncclNumOps || slot >= userOps_.size() || !userOps_[slot].live)
    return invalidArgument("ncclRedOpDestroy: %d is not a live custom operation of this communicator",
                           static_cast<int>(op));
  userOps_[slot].live = false;
  return Status::ok();
}

bool HostEngine::redOpIsValid(ncclRedOp_t op) const {
  int v = static_cast<int>(op);
  if (v >= 0 && v < ncclNumOps) return true;
  std::lock_guard<std::mutex> lock(opsMutex_);
  size_t slot = static_cast<size_t>(v) - ncclNumOps;
  return v >= ncclNumOps && slot < userOps_.size() && userOps_[slot].live;
}

Result<exec::Reduction> HostEngine::resolveReduction(const OpDesc& op) const {
  exec::Reduction r;
  r.type = op.type;
  switch (op.op) {
    case ncclSum: r.kind = exec::RedKind::kSum; return r;
    case ncclProd: r.kind = exec::RedKind::kProd; return r;
    case ncclMax: r.kind = exec::RedKind::kMax; return r;
    case ncclMin: r.kind = exec::RedKind::kMin; return r;
    case ncclAvg:
      r.kind = exec::RedKind::kSum;
      if (exec::isFloatType(op.type)) {
        r.preMul = true;
        r.scalar = 1.0 / comm_.nranks();
      } else {
        r.divideAtEnd = true;
        r.divisor = static_cast<uint32_t>(comm_.nranks());
      }
      return r;
    default: break;
  }
  std::lock_guard<std::mutex> lock(opsMutex_);
  size_t slot = static_cast<size_t>(op.op) - ncclNumOps;
  if (slot >= userOps_.size() || !userOps_[slot].live)
    return invalidArgument("reduction operation %d is not valid on this communicator", static_cast<int>(op.op));
  const UserOp& u = userOps_[slot];
  if (u.type != op.type)
    return invalidArgument("PreMulSum operation %d was created for datatype %s but used with %s",
                           static_cast<int>(op.op), exec::typeName(u.type), exec::typeName(op.type));
  r.kind = exec::RedKind::kSum;
  r.preMul = true;
  r.scalar = u.residence == ncclScalarHostImmediate ? u.value : scalarValue(u.type, u.pointer);
  return r;
}

// ---- registration ---------------------------------------------------------------------------------

Status HostEngine::registerBuffer(void* buff, size_t size, void** handle) {
  if (buff == nullptr && size > 0) return invalidArgument("ncclCommRegister: buffer is NULL");
  std::lock_guard<std::mutex> lock(regMutex_);
  registrations_.push_back(std::make_unique<std::pair<void*, size_t>>(buff, size));
  *handle = registrations_.back().get();
  return Status::ok();
}

Status HostEngine::deregisterBuffer(void* handle) {
  std::lock_guard<std::mutex> lock(regMutex_);
  for (auto it = registrations_.begin(); it != registrations_.end(); ++it) {
    if (it->get() == handle) {
      registrations_.erase(it);
      return Status::ok();
    }
  }
  return invalidUsage("ncclCommDeregister: could not find handle %p", handle);
}

Status HostEngine::registerWindow(void* buff, size_t size, ncclWindow_t* win, int flags) {
  if (flags != NCCL_WIN_DEFAULT && flags != NCCL_WIN_COLL_SYMMETRIC)
    return invalidArgument("ncclCommWindowRegister: invalid flags 0x%x", flags);
  std::lock_guard<std::mutex> lock(regMutex_);
  windows_.push_back(std::make_unique<std::pair<void*, size_t>>(buff, size));
  *win = reinterpret_cast<ncclWindow_t>(windows_.back().get());
  return Status::ok();
}

Status HostEngine::deregisterWindow(ncclWindow_t win) {
  std::lock_guard<std::mutex> lock(regMutex_);
  for (auto it = windows_.begin(); it != windows_.end(); ++it) {
    if (reinterpret_cast<ncclWindow_t>(it->get()) == win) {
      windows_.erase(it);
      return Status::ok();
    }
  }
  return invalidUsage("ncclCommWindowDeregister: unknown window %p", static_cast<void*>(win));
}

// ---- lowering -------------------------------------------------------------------------------------

exec::Plan* HostEngine::nextPlan() {
  if (plansUsed_ == plans_.size()) plans_.push_back(std::make_unique<exec::Plan>());
  exec::Plan* p = plans_[plansUsed_++].get();
  p->clear();
  p->rank = comm_.rank();
  p->transports = comm_.transports();
  p->abort = &comm_.abortFlag();
  p->sliceBytes = sliceBytes_;
  p->reduction = exec::Reduction{};
  p->elemBytes = 1;
  return p;
}

Status HostEngine::lowerOps(const std::vector<OpDesc>& ops, std::vector<exec::Plan*>* plans) {
  plansUsed_ = 0;
  plans->clear();
  if (memoFloor_ != 0) {  // the previous group finished: templates of replaced tables can go
    std::erase_if(memo_, [this](const auto& kv) { return kv.first.version < memoFloor_; });
    memoFloor_ = 0;
  }
  for (size_t i = 0; i < ops.size();) {
    if (ops[i].kind == OpDesc::Kind::kCollective) {
      exec::Plan* p = nextPlan();
      TH_CHECK(lowerCollective(ops[i], *p));
      plans->push_back(p);
      ++i;
      continue;
    }
    size_t j = i;
    while (j < ops.size() && ops[j].kind != OpDesc::Kind::kCollective) ++j;
    exec::Plan* p = nextPlan();
    TH_CHECK(lowerP2p(&ops[i], j - i, *p));
    plans->push_back(p);
    i = j;
  }
  return Status::ok();
}

bool HostEngine::isInPlace(const OpDesc& op) const {
  const char* s = static_cast<const char*>(op.sendbuff);
  const char* r = static_cast<const char*>(op.recvbuff);
  size_t block = op.count * exec::typeSize(op.type);
  switch (op.collective) {
    case Collective::kAllGather:
    case Collective::kGather: return r != nullptr && s == r + comm_.rank() * block;
    case Collective::kReduceScatter:
    case Collective::kScatter: return s != nullptr && r == s + comm_.rank() * block;
    default: return s == r;
  }
}

// ---- epochs -----------------------------------------------------------------------------------------

// The clock's slow path. When a new table took effect, its templates (built by
// prepareEpoch on the epoch thread) join the memo; those of older tables are
// dropped at the next lowerOps, when no plan of this group can use them any more.
Status HostEngine::advanceEpoch() {
  TH_CHECK(clock_->advance(seq_));
  if (clock_->current().version != tableVersion_) adoptEpoch();
  return Status::ok();
}

void HostEngine::adoptEpoch() {
  epoch::Epoch& e = clock_->current();
  if (tableVersion_ != 0) memoFloor_ = e.version;
  tableVersion_ = e.version;
  table_ = &e.table;
  std::unique_ptr<epoch::Prepared> prepared = std::move(e.prepared);
  if (auto* warm = dynamic_cast<WarmMemos*>(prepared.get()))
    for (auto& [key, memo] : warm->entries) memo_.emplace(key, std::move(memo));
  TH_INFO(log::kEpoch | log::kTuning, "comm %p rank %d: decision table v%llu in effect from collective %llu",
          static_cast<void*>(&comm_), comm_.rank(), static_cast<unsigned long long>(e.version),
          static_cast<unsigned long long>(e.fromSeq));
}

// Epoch thread: the templates of every request shape seen so far under the new
// table, and the connections they use, so the first collectives on the new
// table find everything ready.
Status HostEngine::prepareEpoch(epoch::Epoch& e) {
  std::vector<Shape> shapes;
  {
    std::lock_guard<std::mutex> lock(shapesMu_);
    shapes = shapes_;
  }
  auto warm = std::make_unique<WarmMemos>();
  for (const Shape& sh : shapes) {
    int range = rangeOf(e.table, sh.collective, sh.bytes);
    MemoKey key{e.version, static_cast<uint8_t>(sh.collective), static_cast<uint8_t>(sh.inPlace),
                static_cast<int16_t>(range), sh.root};
    bool have = false;
    for (const auto& kv : warm->entries) have = have || kv.first == key;
    if (have) continue;
    Memo memo;
    TH_ASSIGN(memo, buildMemo(e.table, range, sh.collective, sh.bytes, sh.root, sh.inPlace));
    if (comm_.transports() != nullptr) {
      for (const exec::PlanConn& c : memo.tmpl->conns) {
        Status st = c.isSend ? comm_.transports()->sendConnection(c.peer, c.channel).status()
                             : comm_.transports()->recvConnection(c.peer, c.channel).status();
        TH_CHECK(st.withContext("opening the connections of " + memo.program->program.name));
      }
    }
    warm->entries.emplace_back(key, std::move(memo));
  }
  e.prepared = std::move(warm);
  return Status::ok();
}

std::vector<uint64_t> HostEngine::recentSizes() {
  std::lock_guard<std::mutex> lock(shapesMu_);
  std::vector<uint64_t> out;
  for (const Shape& sh : shapes_) out.push_back(sh.bytes);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Result<HostEngine::Memo> HostEngine::buildMemo(const policy::DecisionTable& table, int range, Collective c,
                                               size_t bytes, int root, bool inPlace) const {
  const policy::Decision* d = range >= 0 ? &table.ranges(c)[static_cast<size_t>(range)].decision : nullptr;
  policy::Choice fallback;
  if (d == nullptr) {  // the table says nothing about this collective: the static choice
    int nnodes = hostOf_.empty() ? 1 : *std::max_element(hostOf_.begin(), hostOf_.end()) + 1;
    fallback = policy::defaultChoice({c, policy::sizeClass(bytes), comm_.nranks(), nnodes},
                                     policy::AlgoFilter::fromEnv());
  }
  schedule::GenerateRequest req;
  req.collective = c;
  req.nranks = comm_.nranks();
  req.root = root;
  req.inPlace = inPlace;
  req.params = d ? d->params : fallback.params;
  req.hostOf = hostOf_;
  req.onlyRank = comm_.rank();
  Memo memo;
  TH_ASSIGN(memo.program, programCache().get(schedule::ProgramKey::make(d ? d->schedule : fallback.schedule, req)));
  const schedule::Program& prog = memo.program->program;
  if (prog.nchannels > static_cast<uint32_t>(maxChannels()))
    return invalidUsage("schedule %s needs %u channels but THESEUS_MAX_CHANNELS is %d", prog.name.c_str(),
                        prog.nchannels, maxChannels());
  TH_ASSIGN(memo.tmpl, exec::buildRankTemplate(prog, comm_.rank(), memo.program->plans[comm_.rank()]));
  memo.sliceBytes = sliceBytes_;
  if (d != nullptr && d->sliceBytes > 0)
    memo.sliceBytes = std::clamp<size_t>(d->sliceBytes / 64 * 64, 64, std::max<size_t>(maxSliceBytes_, 64));
  return memo;
}

Result<const HostEngine::Memo*> HostEngine::templateFor(const OpDesc& op, size_t bytes, bool inPlace) {
  int root = schedule::isRooted(op.collective) ? op.root : 0;
  int range = rangeOf(*table_, op.collective, bytes);
  MemoKey key{tableVersion_, static_cast<uint8_t>(op.collective), static_cast<uint8_t>(inPlace),
              static_cast<int16_t>(range), root};
  auto it = memo_.find(key);
  if (it != memo_.end()) return &it->second;

  Memo memo;
  TH_ASSIGN(memo, buildMemo(*table_, range, op.collective, bytes, root, inPlace));
  TH_INFO(log::kColl | log::kTuning, "comm %p rank %d: %s of %zu bytes uses %s (table v%llu)",
          static_cast<void*>(&comm_), comm_.rank(), schedule::collectiveName(op.collective), bytes,
          memo.program->program.name.c_str(), static_cast<unsigned long long>(tableVersion_));
  {
    std::lock_guard<std::mutex> lock(shapesMu_);
    bool seen = false;
    for (Shape& sh : shapes_)
      if (sh.collective == op.collective && sh.root == root && sh.inPlace == inPlace &&
          rangeOf(*table_, op.collective, sh.bytes) == range) {
        seen = true;
        break;
      }
    if (!seen && shapes_.size() < kMaxShapes) shapes_.push_back(Shape{op.collective, bytes, root, inPlace});
  }
  return &memo_.emplace(key, std::move(memo)).first->second;
}

Result<char*> HostEngine::scratch(size_t bytes) {
  if (bytes <= scratchBytes_) return static_cast<char*>(scratch_);
  size_t want = std::max(bytes, scratchBytes_ * 2);
  if (scratch_ != nullptr) TH_CHECK(transport::freeShared(scratch_));
  scratch_ = nullptr;
  scratchBytes_ = 0;
  void* p;
  TH_ASSIGN(p, transport::allocShared(want));
  scratch_ = p;
  scratchBytes_ = want;
  return static_cast<char*>(p);
}

Status HostEngine::lowerCollective(const OpDesc& op, exec::Plan& plan) {
  const Collective c = op.collective;
  const int n = comm_.nranks();
  const size_t esz = exec::typeSize(op.type);
  const size_t inBytes = op.count * schedule::inputBlocks(c, n) * esz;
  const size_t outBytes = op.count * schedule::outputBlocks(c, n) * esz;
  const bool inPlace = isInPlace(op);
  if (!inPlace && overlaps(op.sendbuff, inBytes, op.recvbuff, outBytes))
    return invalidArgument("%s: send and receive buffers overlap but are not in place", schedule::collectiveName(c));

  if (clock_->mustAdvance(seq_)) TH_CHECK(advanceEpoch());
  const Memo* memo;
  TH_ASSIGN(memo, templateFor(op, std::max(inBytes, outBytes), inPlace));
  exec::Reduction red;
  if (schedule::isReducing(c)) {
    TH_ASSIGN(red, resolveReduction(op));
  }

  // Scratch: the program's own blocks, plus stand-ins for buffers a non-root rank may pass as NULL.
  const exec::RankTemplate& t = *memo->tmpl;
  size_t progScratch = memo->program->program.scratchBlocks * op.count * esz;
  bool needIn = t.usesInput && op.sendbuff == nullptr && inBytes > 0;
  bool needOut = t.usesOutput && op.recvbuff == nullptr && outBytes > 0;
  size_t total = progScratch + (needIn ? inBytes : 0) + (needOut ? outBytes : 0);
  char* s = nullptr;
  if (total > 0) {
    TH_ASSIGN(s, scratch(total));
  }

  exec::CallBuffers b;
  b.input = needIn ? s + progScratch : static_cast<const char*>(op.sendbuff);
  b.output = needOut ? s + progScratch + (needIn ? inBytes : 0) : static_cast<char*>(op.recvbuff);
  b.scratch = s;
  b.unitElems = op.count;
  b.elemBytes = esz;
  plan.sliceBytes = memo->sliceBytes;
  exec::lowerTemplate(t, b, red, plan);
  // Zero-copy costs the sender a wait for the receiver's release. Tiny pieces
  // are cheaper copied (2 ranks, 8 B: 0.78 us copied vs 0.98 us direct; 4 KiB:
  // 1.6 vs 1.1 us). In place, a rank overwrites the very memory its peers read
  // zero-copy, so the wait sits on its critical path: copying wins up to 128 KiB
  // (32 KiB: 5.2 us copied vs 8.0 us direct; direct ahead from 256 KiB).
  plan.directMinBytes = inPlace ? kInPlaceDirectMinBytes : kDirectMinBytes;

  uint64_t seq = seq_++;
  nextSeq_.store(seq_, std::memory_order_relaxed);
  if (emulation_ != nullptr) emulation_->onCollective(seq);
  plan.reduction = red;
  plan.seq = seq;
  plan.opName = schedule::collectiveName(c);
  plan.scheduleName = memo->program->program.name.c_str();
  plan.bytes = std::max(inBytes, outBytes);
  int opClass = schedule::isReducing(c) ? static_cast<int>(red.kind) + 1 : 0;
  plan.tag = static_cast<uint32_t>(mix64(seq ^ (uint64_t(c) << 56) ^ (uint64_t(op.type) << 48) ^
                                         (uint64_t(opClass) << 40) ^ (uint64_t(op.root) << 20)) >> 32);
  if (plan.tag == kP2pTag) plan.tag ^= 1;
  if (red.divideAtEnd) {
    bool holdsResult = c == Collective::kAllReduce || c == Collective::kReduceScatter ||
                       (c == Collective::kReduce && comm_.rank() == op.root);
    if (holdsResult) {
      plan.divideDst = b.output;
      plan.divideElems = op.count;
    }
  }
  return Status::ok();
}

// Point-to-point: one step per operation, all concurrent; operations with the
// same peer and direction share a connection, so their messages keep their
// issue order (the peer issues the matching operations in the same order).
// Sends to self pair with receives from self in order and become local copies.
Status HostEngine::lowerP2p(const OpDesc* ops, size_t n, exec::Plan& plan) {
  const int me = comm_.rank();
  std::vector<const OpDesc*> selfSends, selfRecvs;
  size_t total = 0;
  plan.chunked = false;
  plan.rounds = 1;
  plan.elemBytes = 1;
  for (size_t i = 0; i < n; ++i) {
    const OpDesc& op = ops[i];
    size_t bytes = op.count * exec::typeSize(op.type);
    total += bytes;
    bool isSend = op.kind == OpDesc::Kind::kSend;
    if (op.peer == me) {
      (isSend ? selfSends : selfRecvs).push_back(&op);
      continue;
    }
    exec::PlanStep st;
    st.op = isSend ? schedule::Op::kSend : schedule::Op::kRecv;
    st.index = static_cast<uint32_t>(plan.steps.size());
    st.bytes = bytes;
    int32_t conn = -1;
    for (size_t c = 0; c < plan.conns.size(); ++c)
      if (plan.conns[c].peer == op.peer && plan.conns[c].isSend == isSend) conn = static_cast<int32_t>(c);
    if (conn < 0) {
      exec::PlanConn pc;
      pc.peer = op.peer;
      pc.isSend = isSend;
      plan.conns.push_back(pc);
      conn = static_cast<int32_t>(plan.conns.size() - 1);
    }
    uint32_t pos = plan.conns[conn].nsteps++;
    if (isSend) {
      st.sendPeer = op.peer;
      st.hasSrc = true;
      st.src = static_cast<const char*>(op.sendbuff);
      st.outConn = conn;
      st.outPos = pos;
    } else {
      st.recvPeer = op.peer;
      st.hasDst = true;
      st.dst = static_cast<char*>(op.recvbuff);
      st.inConn = conn;
      st.inPos = pos;
    }
    plan.steps.push_back(st);
  }
  if (selfSends.size() != selfRecvs.size())
    return invalidUsage("group has %zu ncclSend to self (rank %d) but %zu ncclRecv from self", selfSends.size(), me,
                        selfRecvs.size());
  for (size_t k = 0; k < selfSends.size(); ++k) {
    size_t sb = selfSends[k]->count * exec::typeSize(selfSends[k]->type);
    size_t rb = selfRecvs[k]->count * exec::typeSize(selfRecvs[k]->type);
    if (sb != rb)
      return invalidUsage("send to self of %zu bytes is matched with a receive from self of %zu bytes", sb, rb);
    exec::PlanStep st;
    st.op = schedule::Op::kCopy;
    st.index = static_cast<uint32_t>(plan.steps.size());
    st.hasSrc = st.hasDst = true;
    st.src = static_cast<const char*>(selfSends[k]->sendbuff);
    st.dst = static_cast<char*>(selfRecvs[k]->recvbuff);
    st.bytes = sb;
    plan.steps.push_back(st);
  }
  plan.tag = kP2pTag;
  plan.seq = seq_;
  plan.opName = "send/recv";
  plan.scheduleName = "p2p";
  plan.bytes = total;
  return Status::ok();
}

Status HostEngine::health() const {
  if (comm_.abortFlag().isSet()) return remoteError("the communicator was aborted");
  ncclResult_t e = comm_.asyncError();
  if (e != ncclSuccess && e != ncclInProgress) return Status(e, comm_.asyncErrorMessage());
  if (comm_.bootstrap() != nullptr) {
    std::vector<int> failed = comm_.bootstrap()->failedRanks();
    if (!failed.empty()) {
      const auto& peers = comm_.bootstrap()->peers();
      int r = failed.front();
      std::string who = r >= 0 && r < static_cast<int>(peers.size())
                            ? peers[r].hostname + " pid " + std::to_string(peers[r].pid)
                            : std::string("?");
      return remoteError("rank %d (%s) exited or lost its connection%s", r, who.c_str(),
                         failed.size() > 1 ? " (and others)" : "");
    }
  }
  return Status::ok();
}

void HostEngine::noteFailure(const Status& s) {
  if (!s.isOk()) comm_.setAsyncError(s.code(), s.message());
}

Status HostEngine::beforeExecute() {
  if (emulation_ == nullptr) return Status::ok();
  uint64_t ns = emulation_->straggleNs();
  if (ns == 0) return Status::ok();
  // A straggling rank (THESEUS_EMULATE straggle:...) starts late; an abort still ends the wait.
  uint64_t until = nowNs() + ns;
  for (uint64_t now = nowNs(); now < until; now = nowNs()) {
    if (comm_.abortFlag().isSet()) return remoteError("the communicator was aborted");
    std::this_thread::sleep_for(std::chrono::nanoseconds(std::min<uint64_t>(until - now, 1000000)));
  }
  return Status::ok();
}

int maxChannels() { return static_cast<int>(std::clamp<int64_t>(kMaxChannels.get(), 1, 64)); }

Result<std::unique_ptr<CollectiveEngine>> createCollectiveEngine(Communicator& comm) {
  auto engine = std::make_unique<HostEngine>(comm);
  TH_CHECK(engine->startEpochs());
  return std::unique_ptr<CollectiveEngine>(std::move(engine));
}

}  // namespace theseus::comm
