#include "policy/nccl_tuner.h"

#include <algorithm>
#include <cstring>

#include "common/knobs.h"
#include "common/log.h"
#include "common/nccl_plugins.h"
#include "policy/decision_check.h"
#include "policy/nccl_algorithms.h"
#include "schedule/builtins.h"
#include "schedule/user/cost_model.h"

namespace theseus::policy {
namespace {

using schedule::Collective;

const StringKnob kTunerPlugin("NCCL_TUNER_PLUGIN", nullptr,
                              "NCCL tuner plugin to load (NCCL's rules: a name or path, then "
                              "libnccl-tuner-<name>.so; 'none' disables; unset tries libnccl-tuner.so). The leader "
                              "runs it and its choices enter the decision table (docs/plugin-guide.md)");

constexpr int kSamples = 35;  // nBytes = 2^0 .. 2^34
constexpr Collective kTuned[] = {Collective::kBroadcast, Collective::kReduce, Collective::kAllGather,
                                 Collective::kReduceScatter, Collective::kAllReduce};

const char* const kKnown[] = {"ncclTunerPlugin_v6", "ncclTunerPlugin_v5", "ncclTunerPlugin_v4",
                              "ncclTunerPlugin_v3", "ncclTunerPlugin_v2"};
const char* const kNewer[] = {"ncclTunerPlugin_v7", "ncclTunerPlugin_v8", "ncclTunerPlugin_v9"};

bool tuned(Collective c) { return std::find(std::begin(kTuned), std::end(kTuned), c) != std::end(kTuned); }

// The cost model's block size for NCCL's nBytes, the larger buffer (allgather/reducescatter count all blocks).
size_t blockBytes(Collective c, uint64_t nBytes, int nranks) {
  const uint64_t blocks = std::max(schedule::inputBlocks(c, nranks), schedule::outputBlocks(c, nranks));
  return static_cast<size_t>(std::max<uint64_t>(nBytes / blocks, 1));
}

schedule::user::LinkParams linkModel(const TunerContext& ctx) {
  schedule::user::LinkParams link;  // 5 us, 10 GB/s within a host
  const int n = ctx.nranks;
  if (ctx.hostOf.empty()) return link;
  link.linkGBps.assign(static_cast<size_t>(n) * n, 0.0);
  link.linkAlphaUs.assign(static_cast<size_t>(n) * n, 0.0);
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b)
      if (ctx.hostOf[a] != ctx.hostOf[b]) {
        link.linkGBps[static_cast<size_t>(a) * n + b] = 1.25;
        link.linkAlphaUs[static_cast<size_t>(a) * n + b] = 20.0;
      }
  return link;
}

const char* funcName(Collective c) { return schedule::collectiveName(c); }

}  // namespace

// Theseus' estimates per size sample and algorithm: the schedule the algorithm
// maps to here (first that serves) and its modelled time, -1 when none.
struct NcclTuner::Estimates {
  std::string schedule[kNcclAlgorithms];
  float costUs[kSamples][kNcclAlgorithms];
};

const NcclTuner::Estimates& NcclTuner::estimates(Collective c) {
  auto& slot = estimates_[static_cast<int>(c)];
  if (slot) return *slot;
  slot = std::make_unique<Estimates>();
  Estimates& e = *slot;
  const schedule::user::LinkParams link = linkModel(ctx_);
  for (int a = 0; a < kNcclAlgorithms; ++a) {
    for (int k = 0; k < kSamples; ++k) e.costUs[k][a] = static_cast<float>(NCCL_ALGO_PROTO_IGNORE);
    for (const std::string& name : schedulesForNcclAlgorithm(a, c)) {
      if (!scheduleServes(name, c, ctx_.nranks)) continue;
      schedule::GenerateRequest req;
      req.collective = c;
      req.nranks = ctx_.nranks;
      req.hostOf = ctx_.hostOf;
      auto program = schedule::generateBuiltin(name, req);
      if (!program.isOk()) continue;
      e.schedule[a] = name;
      for (int k = 0; k < kSamples; ++k) {
        auto cost = schedule::user::estimateCost(program.value(), blockBytes(c, uint64_t(1) << k, ctx_.nranks), link);
        e.costUs[k][a] = cost.isOk() ? static_cast<float>(cost.value().timeUs) : 0.0f;
      }
      break;
    }
  }
  return e;
}

Result<std::unique_ptr<NcclTuner>> NcclTuner::loadConfigured(const TunerContext& ctx) {
  return open(kTunerPlugin.get(), kTunerPlugin.isSet(), ctx);
}

Result<std::unique_ptr<NcclTuner>> NcclTuner::load(const std::string& value, const TunerContext& ctx) {
  return open(value, true, ctx);
}

Result<std::unique_ptr<NcclTuner>> NcclTuner::open(const std::string& value, bool set, const TunerContext& ctx) {
  plugin::NcclPluginLookup lookup{"tuner plugin", "libnccl-tuner", "NCCL_TUNER_PLUGIN", value, set};
  TH_ASSIGN(plugin::NcclPluginLibrary found, plugin::openNcclPlugin(lookup));
  if (!found.library) return std::unique_ptr<NcclTuner>();
  std::unique_ptr<NcclTuner> t(new NcclTuner());
  t->library_ = std::move(found.library);
  t->ctx_ = ctx;
  t->estimates_.resize(DecisionTable::kCollectives);
  if (const KnobInfo* slice = findKnob("THESEUS_SLICE_BYTES"))
    if (auto text = knobValueText(*slice))
      if (auto v = parseIntWithSuffix(text->c_str())) t->sliceBytes_ = static_cast<uint64_t>(*v);
  auto versioned = t->library_->findVersioned(kKnown, kNewer);
  if (!versioned.isOk() && found.optional) {
    // A candidate (libnccl-tuner.so with the variable unset, NCCL_NET_PLUGIN's library) that is no tuner: none.
    TH_INFO(log::kInit | log::kTuning, "%s; no NCCL tuner plugin", versioned.status().message().c_str());
    return std::unique_ptr<NcclTuner>();
  }
  TH_ASSIGN(plugin::Library::Symbol sym, std::move(versioned));
  t->descriptor_ = sym.address;
  t->version_ = kNewestVersion - static_cast<int>(sym.index);
  const std::string& path = t->library_->path();
  // Every version starts with `name`, then init, getCollInfo and finalize/destroy pointers.
  struct Head {
    const char* name;
    const void* init;
    const void* getCollInfo;
    const void* finalize;
  };
  const auto* head = static_cast<const Head*>(t->descriptor_);
  if (head->name == nullptr || head->name[0] == '\0' || strnlen(head->name, 129) > 128)
    return invalidArgument("%s: %s has no name (1..128 characters)", path.c_str(), sym.name);
  t->name_ = head->name;
  if (head->init == nullptr || head->getCollInfo == nullptr)
    return invalidArgument("%s: tuner plugin '%s' (%s): required function %s is NULL", path.c_str(), t->name_.c_str(),
                           sym.name, head->init == nullptr ? "init()" : "getCollInfo()");

  int nnodes = 1;
  for (int h : ctx.hostOf) nnodes = std::max(nnodes, h + 1);
  ncclResult_t r;
  {
    plugin::CallScope scope(t->name_.c_str());
    if (t->version_ >= 5) {
      // NVLink domains: Theseus treats each host as one domain.
      ncclNvlDomainInfo_v6_t nvl{nnodes, ctx.nranks, 0};
      std::vector<int> perHost(static_cast<size_t>(nnodes), 0);
      for (int r2 = 0; r2 < ctx.nranks; ++r2) ++perHost[ctx.hostOf.empty() ? 0 : ctx.hostOf[r2]];
      nvl.minRanksPerNvlDomain = *std::min_element(perHost.begin(), perHost.end());
      nvl.maxRanksPerNvlDomain = *std::max_element(perHost.begin(), perHost.end());
      // NCCL's constants describe its GPU kernels; Theseus' model does not read them (zeros in, changes ignored).
      ncclTunerConstants_v6_t constants;
      memset(&constants, 0, sizeof(constants));
      auto init = reinterpret_cast<const ncclTuner_v6_t*>(t->descriptor_)->init;
      r = init(&t->context_, ctx.commId, static_cast<size_t>(ctx.nranks), static_cast<size_t>(nnodes),
               plugin::ncclPluginLogger, &nvl, &constants);
    } else {
      auto init = reinterpret_cast<const ncclTuner_v4_t*>(t->descriptor_)->init;
      r = init(static_cast<size_t>(ctx.nranks), static_cast<size_t>(nnodes), plugin::ncclPluginLogger, &t->context_);
    }
  }
  if (r != ncclSuccess) {
    t->descriptor_ = nullptr;  // init failed: nothing to finalize
    return invalidArgument("%s: tuner plugin '%s' (%s): init() failed with %d (%s)", path.c_str(), t->name_.c_str(),
                           sym.name, static_cast<int>(r), resultName(r));
  }
  TH_INFO(log::kInit | log::kTuning, "%s loaded; the leader runs it and its choices enter the decision table",
          t->describe().c_str());
  return t;
}

NcclTuner::~NcclTuner() {
  if (descriptor_ == nullptr) return;
  plugin::CallScope scope(name_.c_str());
  // finalize (v5, v6) and destroy (v2..v4) sit at the same place.
  auto fin = version_ >= 5 ? reinterpret_cast<const ncclTuner_v6_t*>(descriptor_)->finalize
                           : reinterpret_cast<const ncclTuner_v4_t*>(descriptor_)->destroy;
  if (fin != nullptr) {
    ncclResult_t r = fin(context_);
    if (r != ncclSuccess) TH_WARN("tuner plugin '%s': finalize() failed with %d", name_.c_str(), static_cast<int>(r));
  }
}

std::string NcclTuner::describe() const {
  return "NCCL tuner plugin '" + name_ + "' v" + std::to_string(version_) + " (" + library_->path() + ")";
}

Result<TunerChoice> NcclTuner::choose(Collective c, uint64_t nBytes, const AlgoFilter& algos,
                                      const AlgoFilter& protocols) {
  if (!tuned(c)) return invalidArgument("NCCL tuners do not tune %s", funcName(c));
  const Estimates& e = estimates(c);
  int k = 0;
  while (k + 1 < kSamples && (uint64_t(1) << (k + 1)) <= nBytes) ++k;
  // Theseus' cells: estimates where the algorithm maps to an allowed schedule and the protocol is allowed.
  float table[kNcclAlgorithms][kNcclProtocols];
  bool available[kNcclAlgorithms][kNcclProtocols];
  for (int a = 0; a < kNcclAlgorithms; ++a)
    for (int p = 0; p < kNcclProtocols; ++p) {
      available[a][p] = !e.schedule[a].empty() && algos.allows(c, e.schedule[a]) &&
                        protocols.allows(c, ncclProtocolName(p));
      table[a][p] = available[a][p] ? e.costUs[k][a] : static_cast<float>(NCCL_ALGO_PROTO_IGNORE);
    }
  TunerChoice out;
  int nChannels = 0;
  const auto func = static_cast<ncclFunc_t>(static_cast<int>(c));
  ncclResult_t r;
  {
    plugin::CallScope scope(name_.c_str());
    // NCCL passes the 2-D array itself cast to float** (plugins cast it back); so does Theseus.
    float** cells = reinterpret_cast<float**>(&table[0][0]);
    if (version_ >= 4) {
      auto get = reinterpret_cast<const ncclTuner_v4_t*>(descriptor_)->getCollInfo;  // same in v4..v6
      r = get(context_, func, nBytes, 1, cells, kNcclAlgorithms, kNcclProtocols, 0, &nChannels);
    } else if (version_ == 3) {
      auto get = reinterpret_cast<const ncclTuner_v3_t*>(descriptor_)->getCollInfo;
      r = get(context_, func, nBytes, 1, cells, kNcclAlgorithms, kNcclProtocols, &nChannels);
    } else {
      int algo = NCCL_ALGO_UNDEF, proto = NCCL_PROTO_UNDEF;
      auto get = reinterpret_cast<const ncclTuner_v2_t*>(descriptor_)->getCollInfo;
      r = get(context_, func, nBytes, 0, 0, 1, &algo, &proto, &nChannels);
      // A direct pick becomes the only preferred cell (when Theseus can run it).
      if (r == ncclSuccess && algo >= 0 && algo < kNcclAlgorithms) {
        for (int p = 0; p < kNcclProtocols; ++p)
          if (proto < 0 || proto == p) table[algo][p] = available[algo][p] ? 0.0f : table[algo][p];
        if (!available[algo][0] && !available[algo][1] && !available[algo][2] &&
            noted_.insert(std::string("v2:") + ncclAlgorithmName(algo) + funcName(c)).second)
          TH_INFO(log::kTuning, "tuner plugin '%s' picks %s for %s, which Theseus cannot run; using its own estimates",
                  name_.c_str(), ncclAlgorithmName(algo), funcName(c));
      }
    }
  }
  if (r != ncclSuccess)
    return internalError("tuner plugin '%s': getCollInfo(%s, %llu bytes) failed with %d (%s)", name_.c_str(),
                         funcName(c), static_cast<unsigned long long>(nBytes), static_cast<int>(r),
                         resultName(r));
  // The cheapest cell Theseus can run.
  for (int a = 0; a < kNcclAlgorithms; ++a)
    for (int p = 0; p < kNcclProtocols; ++p) {
      float cost = table[a][p];
      if (cost < 0) continue;
      if (!available[a][p]) {
        if (noted_.insert(std::string(ncclAlgorithmName(a)) + "/" + ncclProtocolName(p) + funcName(c)).second)
          TH_INFO(log::kTuning, "tuner plugin '%s' enables %s/%s for %s, which Theseus %s; that cell is skipped",
                  name_.c_str(), ncclAlgorithmName(a), ncclProtocolName(p), funcName(c),
                  e.schedule[a].empty() ? "has no schedule for" : "NCCL_ALGO/NCCL_PROTO exclude here");
        continue;
      }
      if (out.algorithm < 0 || cost < out.cost) {
        out.algorithm = a;
        out.protocol = p;
        out.cost = cost;
      }
    }
  if (nChannels > 0) out.channels = std::min(nChannels, schedule::ScheduleParams::kMaxChannels);
  if (out.algorithm < 0) return out;
  out.schedule = e.schedule[out.algorithm];
  if (version_ >= 6) {
    auto chunk = reinterpret_cast<const ncclTuner_v6_t*>(descriptor_)->getChunkSize;
    if (chunk != nullptr) {
      size_t bytes = sliceBytes_;
      plugin::CallScope scope(name_.c_str());
      r = chunk(context_, func, nBytes, out.algorithm, out.protocol, out.channels > 0 ? out.channels : 1, &bytes);
      if (r != ncclSuccess)
        return internalError("tuner plugin '%s': getChunkSize(%s, %llu bytes) failed with %d (%s)", name_.c_str(),
                             funcName(c), static_cast<unsigned long long>(nBytes), static_cast<int>(r),
                             resultName(r));
      if (bytes != sliceBytes_) out.chunkBytes = std::clamp<size_t>(bytes, 64, size_t(1) << 30);
    }
  }
  return out;
}

Result<DecisionTable> NcclTuner::table(const AlgoFilter& algos, const AlgoFilter& protocols) {
  DecisionTable t;
  for (Collective c : kTuned) {
    std::vector<DecisionTable::Range> ranges;
    for (int k = 0; k < kSamples; ++k) {
      TH_ASSIGN(TunerChoice ch, choose(c, uint64_t(1) << k, algos, protocols));
      if (ch.schedule.empty()) continue;
      Decision d;
      d.schedule = ch.schedule;
      if (ch.channels > 0) d.params.channels = ch.channels;
      d.sliceBytes = ch.chunkBytes;
      d.why = "NCCL tuner '" + name_ + "': " + ncclAlgorithmName(ch.algorithm) + "/" + ncclProtocolName(ch.protocol) +
              (ch.channels > 0 ? ", " + std::to_string(ch.channels) + " channels" : std::string());
      uint64_t lo = k == 0 ? 0 : uint64_t(1) << k;
      if (!ranges.empty() && ranges.back().decision == d) {
        ranges.back().maxBytes = k + 1 < kSamples ? (uint64_t(1) << (k + 1)) - 1 : UINT64_MAX;
        continue;
      }
      if (!ranges.empty()) ranges.back().maxBytes = lo - 1;
      ranges.push_back({lo, k + 1 < kSamples ? (uint64_t(1) << (k + 1)) - 1 : UINT64_MAX, d});
    }
    if (ranges.empty()) continue;
    ranges.front().minBytes = 0;
    ranges.back().maxBytes = UINT64_MAX;
    for (auto& r : ranges) TH_CHECK(t.add(c, r.minBytes, r.maxBytes, r.decision));
  }
  return t;
}

}  // namespace theseus::policy
