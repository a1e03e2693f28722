// The schedule plugin loader and the C-to-IR program copy (plugin_schedule.h).
#include "schedule/user/plugin_schedule.h"

#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "common/log.h"
#include "schedule/user/json_schedule.h"

namespace theseus::schedule::user {
namespace {

constexpr const char* kWhat = "schedule plugin";

void pluginLogger(int level, const char* message) {
  plugin::logFromPlugin(kWhat, log::kSchedule, level, THESEUS_SCHED_LOG_WARN, THESEUS_SCHED_LOG_TRACE, message);
}

using plugin::CallScope;

// Descriptor symbols, newest first. Only v1 exists; when v2 arrives, v1 stays
// here with an adapter that fills the v2 fields.
const char* const kKnownSymbols[] = {THESEUS_SCHEDULE_PLUGIN_SYMBOL_V1};
const char* const kFutureSymbols[] = {"theseusSchedulePlugin_v4", "theseusSchedulePlugin_v3",
                                      "theseusSchedulePlugin_v2"};

Status stepError(const std::string& where, int rank, uint32_t step, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
Status stepError(const std::string& where, int rank, uint32_t step, const char* fmt, ...) {
  char text[384];
  va_list args;
  va_start(args, fmt);
  vsnprintf(text, sizeof(text), fmt, args);
  va_end(args);
  return invalidArgument("%s: rank %d step %u: %s", where.c_str(), rank, step, text);
}

Result<ChunkRange> copyRange(const theseusSchedRange_v1_t& r, const char* role, const std::string& where, int rank,
                             uint32_t step) {
  if (r.buf > THESEUS_SCHED_BUF_SCRATCH)
    return stepError(where, rank, step, "%s buffer %u is not a buffer (0 input, 1 output, 2 scratch)", role, r.buf);
  return ChunkRange{static_cast<Buf>(r.buf), r.first, r.count};
}

Result<Step> copyStep(const theseusSchedStep_v1_t& in, uint32_t index, uint32_t nchannels, const std::string& where,
                      int rank) {
  Step s;
  if (in.op > THESEUS_SCHED_OP_RECV_REDUCE_COPY_SEND)
    return stepError(where, rank, index, "op %u is not a valid op (0..%d)", in.op,
                     THESEUS_SCHED_OP_RECV_REDUCE_COPY_SEND);
  s.op = static_cast<Op>(in.op);
  if (in.channel >= nchannels)
    return stepError(where, rank, index, "channel %u is out of range: the program has %u channel(s)", in.channel,
                     nchannels);
  s.channel = static_cast<uint8_t>(in.channel);
  // Unused fields are ignored, so plugins need not clear them.
  s.recvPeer = opReceives(s.op) ? in.recv_peer : -1;
  s.sendPeer = opSends(s.op) ? in.send_peer : -1;
  if (opReadsSrc(s.op)) {
    TH_ASSIGN(s.src, copyRange(in.src, "src", where, rank, index));
  }
  if (opWritesDst(s.op)) {
    TH_ASSIGN(s.dst, copyRange(in.dst, "dst", where, rank, index));
  }
  if (in.ndeps > kMaxDepsPerStep)
    return stepError(where, rank, index, "ndeps %u exceeds the limit of %u", in.ndeps, kMaxDepsPerStep);
  if (in.ndeps > 0 && !in.deps) return stepError(where, rank, index, "ndeps is %u but deps is NULL", in.ndeps);
  s.deps.assign(in.deps, in.deps + in.ndeps);
  for (uint32_t d : s.deps)
    if (d >= index) return stepError(where, rank, index, "dep %u is not an earlier step of rank %d", d, rank);
  return s;
}

// Copies what the plugin returned into a Program, checking every count.
Result<Program> copyProgram(const theseusSchedProgram_v1_t& out, const GenerateRequest& req, const std::string& name,
                            const std::string& where) {
  if (out.chunks_per_block < 1 || out.chunks_per_block > kMaxChunksPerBlock)
    return invalidArgument("%s: chunks_per_block %u is out of range 1..%u", where.c_str(), out.chunks_per_block,
                           kMaxChunksPerBlock);
  if (out.nchannels < 1 || out.nchannels > kMaxUserChannels)
    return invalidArgument("%s: nchannels %u is out of range 1..%u", where.c_str(), out.nchannels, kMaxUserChannels);
  if (out.scratch_blocks > kMaxScratchBlocks)
    return invalidArgument("%s: scratch_blocks %u exceeds the limit of %u", where.c_str(), out.scratch_blocks,
                           kMaxScratchBlocks);
  if (!out.ranks) return invalidArgument("%s: the program's ranks array is NULL", where.c_str());
  Program p;
  p.name = name;
  p.collective = req.collective;
  p.nranks = req.nranks;
  p.root = isRooted(req.collective) ? req.root : 0;
  p.inPlace = req.inPlace;
  p.chunksPerBlock = out.chunks_per_block;
  p.scratchBlocks = out.scratch_blocks;
  p.nchannels = out.nchannels;
  p.ranks.resize(req.nranks);
  for (int r = 0; r < req.nranks; ++r) {
    if (req.onlyRank >= 0 && r != req.onlyRank) continue;
    const theseusSchedRankProgram_v1_t& rp = out.ranks[r];
    if (rp.nsteps > kMaxStepsPerRank)
      return invalidArgument("%s: rank %d has %u steps, more than the limit of %u", where.c_str(), r, rp.nsteps,
                             kMaxStepsPerRank);
    if (rp.nsteps > 0 && !rp.steps)
      return invalidArgument("%s: rank %d has %u steps but its steps array is NULL", where.c_str(), r, rp.nsteps);
    std::vector<Step>& steps = p.ranks[r].steps;
    steps.reserve(rp.nsteps);
    for (uint32_t i = 0; i < rp.nsteps; ++i) {
      TH_ASSIGN(Step s, copyStep(rp.steps[i], i, out.nchannels, where, r));
      steps.push_back(std::move(s));
    }
  }
  return p;
}

std::string requestText(const GenerateRequest& req) {
  std::string out = std::string(collectiveName(req.collective)) + " nranks=" + std::to_string(req.nranks);
  if (isRooted(req.collective)) out += " root=" + std::to_string(req.root);
  out += req.inPlace ? " in-place" : " out-of-place";
  std::string params = req.params.toString();
  if (!params.empty()) out += " params='" + params + "'";
  return out;
}

Status checkDescriptor(const theseusSchedulePlugin_v1_t* d, const std::string& path, const char* symbol) {
  if (d->struct_size != sizeof(theseusSchedulePlugin_v1_t))
    return invalidArgument("%s: %s has struct_size %zu but theseusSchedulePlugin_v1_t is %zu bytes (built against "
                           "a different schedule_plugin.h?)", path.c_str(), symbol, d->struct_size,
                           sizeof(theseusSchedulePlugin_v1_t));
  if (d->abi_version != THESEUS_SCHEDULE_PLUGIN_ABI_V1)
    return invalidArgument("%s: %s has abi_version %u, expected %u", path.c_str(), symbol, d->abi_version,
                           THESEUS_SCHEDULE_PLUGIN_ABI_V1);
  if (!d->name) return invalidArgument("%s: %s has a NULL name", path.c_str(), symbol);
  Status st = checkScheduleName(d->name);
  if (!st.isOk()) return st.withContext(path + ": " + symbol);
  if (!d->supports) return invalidArgument("%s: plugin '%s': required function supports() is NULL", path.c_str(), d->name);
  if (!d->generate) return invalidArgument("%s: plugin '%s': required function generate() is NULL", path.c_str(), d->name);
  if (d->min_bytes > d->max_bytes && d->max_bytes != 0)
    return invalidArgument("%s: plugin '%s': min_bytes %llu is larger than max_bytes %llu", path.c_str(), d->name,
                           static_cast<unsigned long long>(d->min_bytes), static_cast<unsigned long long>(d->max_bytes));
  return Status::ok();
}

}  // namespace

PluginSchedule::~PluginSchedule() {
  if (plugin_ && plugin_->finalize) {
    std::lock_guard<std::mutex> lock(mu_);
    CallScope scope(plugin_->name);
    theseusSchedResult_t rc = plugin_->finalize(context_);
    if (rc != theseusSchedSuccess) TH_INFO(log::kSchedule, "%s: finalize() returned %d", label().c_str(), rc);
  }
}

std::string PluginSchedule::label() const { return "schedule plugin '" + info_.name + "' (" + info_.path + ")"; }

bool PluginSchedule::supports(Collective c, int nranks) const {
  std::lock_guard<std::mutex> lock(mu_);
  CallScope scope(plugin_->name);
  return plugin_->supports(context_, static_cast<int>(c), nranks) != 0;
}

Result<Program> PluginSchedule::generate(const GenerateRequest& req) const {
  const std::string where = label() + ": " + requestText(req);
  if (req.nranks < 1 || req.onlyRank < -1 || req.onlyRank >= req.nranks)
    return invalidArgument("%s: bad request (onlyRank %d)", where.c_str(), req.onlyRank);
  const std::string params = req.params.toString();
  theseusSchedRequest_v1_t in;
  memset(&in, 0, sizeof(in));
  in.struct_size = sizeof(in);
  in.collective = static_cast<int>(req.collective);
  in.nranks = req.nranks;
  in.root = isRooted(req.collective) ? req.root : 0;
  in.in_place = req.inPlace ? 1 : 0;
  in.only_rank = req.onlyRank;
  in.host_of = req.hostOf.size() == static_cast<size_t>(req.nranks) ? req.hostOf.data() : nullptr;
  in.params = params.c_str();
  theseusSchedProgram_v1_t out;
  memset(&out, 0, sizeof(out));
  out.struct_size = sizeof(out);
  char error[512] = {0};
  std::lock_guard<std::mutex> lock(mu_);
  CallScope scope(plugin_->name);
  theseusSchedResult_t rc = plugin_->generate(context_, &in, &out, error, sizeof(error));
  error[sizeof(error) - 1] = '\0';
  Result<Program> copied = rc == theseusSchedSuccess
                               ? copyProgram(out, req, info_.name, where)
                               : Result<Program>(invalidArgument("%s: generate() failed (code %d): %s", where.c_str(),
                                                                 rc, error[0] ? error : "(no message)"));
  if (plugin_->release) plugin_->release(context_, &out);
  return copied;
}

Result<std::shared_ptr<PluginSchedule>> loadSchedulePlugin(const std::string& path) {
  std::shared_ptr<PluginSchedule> s(new PluginSchedule());
  TH_ASSIGN(s->library_, plugin::Library::open(path, kWhat));  // closed by the destructor on every error path below
  TH_ASSIGN(plugin::Library::Symbol found, s->library_->findVersioned(kKnownSymbols, kFutureSymbols));
  const char* symbol = found.name;
  s->plugin_ = static_cast<const theseusSchedulePlugin_v1_t*>(found.address);
  const theseusSchedulePlugin_v1_t* d = s->plugin_;
  Status st = checkDescriptor(d, path, symbol);
  if (!st.isOk()) {
    s->plugin_ = nullptr;  // do not call finalize() on a descriptor we rejected
    return st;
  }
  s->info_.name = d->name;
  s->info_.path = path;
  s->info_.kind = SourceKind::kPlugin;
  s->info_.description = d->description ? d->description : "";
  if (d->max_bytes != 0) {
    s->info_.minBytes = d->min_bytes;
    s->info_.maxBytes = d->max_bytes;
  }
  if (d->init) {
    CallScope scope(d->name);
    theseusSchedResult_t rc = d->init(&s->context_, pluginLogger);
    if (rc != theseusSchedSuccess) {
      s->plugin_ = nullptr;
      return invalidArgument("%s: plugin '%s': init() failed (code %d)", path.c_str(), d->name, rc);
    }
  }
  // The summary lists a collective when the plugin takes it for some small rank count.
  for (Collective c : {Collective::kBroadcast, Collective::kReduce, Collective::kAllGather, Collective::kReduceScatter,
                       Collective::kAllReduce, Collective::kAlltoAll, Collective::kScatter, Collective::kGather}) {
    for (int n : {2, 3, 4, 8}) {
      if (s->supports(c, n)) {
        s->info_.collectives |= 1u << static_cast<unsigned>(c);
        break;
      }
    }
  }
  return s;
}

}  // namespace theseus::schedule::user
