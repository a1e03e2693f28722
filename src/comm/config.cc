// ncclConfig_t parsing with NCCL 2.30.7's rules.
//
// The caller's struct may come from an older header (24, 40, 48, 72 or 80
// bytes), a 2.29 one (88), a 2.30 one (96) or a newer one (larger). We read `size` first and never touch a byte past
// it: the known prefix is copied into a struct pre-filled with
// NCCL_CONFIG_INITIALIZER (every field "undefined"), then every field the
// caller's `version` predates is reset to undefined as well (NCCL does the
// same: an old caller cannot have meant the value found there). Undefined
// fields take the defaults, or the parent's values for a split/shrink given no
// config. NCCL_* environment variables then override (the environment wins,
// as in NCCL), and the result is validated; strings are copied.
//
// Fields Theseus cannot apply (CTA counts, CUDA-graph modes, collnet, ...)
// are accepted with NCCL's validation, and the first time a process sets one
// an INFO line says it has no effect and why (docs/configuration.md lists
// them). Only `blocking`, `netName` and `commName` change what Theseus does.
#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <set>
#include <string>

#include "comm/config.h"
#include "common/knobs.h"
#include "common/log.h"

namespace theseus::comm {
namespace {

constexpr unsigned kConfigMagic = 0xcafebeef;
constexpr int kUndef = NCCL_CONFIG_UNDEF_INT;
constexpr int kMaxCgaClusterSize = 8;
constexpr int kMaxChannels = 64;

const StringKnob kEnvBlocking("NCCL_COMM_BLOCKING", nullptr, "Integer; overrides ncclConfig_t.blocking (0: non-blocking)");
const StringKnob kEnvCga("NCCL_CGA_CLUSTER_SIZE", nullptr, "Integer; overrides ncclConfig_t.cgaClusterSize (0..8)");
const StringKnob kEnvMinCtas("NCCL_MIN_CTAS", nullptr, "Integer; overrides ncclConfig_t.minCTAs");
const StringKnob kEnvMaxCtas("NCCL_MAX_CTAS", nullptr, "Integer; overrides ncclConfig_t.maxCTAs");
const StringKnob kEnvNet("NCCL_NET", nullptr,
                          "The network between hosts by NCCL's name, case-insensitive: 'Socket' (Theseus' TCP) or the "
                          "loaded net plugin's name; overrides ncclConfig_t.netName. Init fails when it names a network "
                          "Theseus does not have");
const StringKnob kEnvSplitShare("NCCL_COMM_SPLIT_SHARE_RESOURCES", nullptr, "Integer; overrides ncclConfig_t.splitShare (0/1)");
const StringKnob kEnvCollnet("NCCL_COLLNET_ENABLE", nullptr, "Integer; overrides ncclConfig_t.collnetEnable (0/1)");
const StringKnob kEnvCtaPolicy("NCCL_CTA_POLICY", nullptr, "Integer; overrides ncclConfig_t.CTAPolicy (0..2)");
const StringKnob kEnvShrinkShare("NCCL_COMM_SHRINK_SHARE_RESOURCES", nullptr, "Integer; overrides ncclConfig_t.shrinkShare (0/1)");
const StringKnob kEnvNvlsCtas("NCCL_NVLS_NCHANNELS", nullptr, "Integer; overrides ncclConfig_t.nvlsCTAs");
const StringKnob kEnvPerNetPeer("NCCL_NCHANNELS_PER_NET_PEER", nullptr,
                             "Integer; overrides ncclConfig_t.nChannelsPerNetPeer (1..64)");
const StringKnob kEnvNvlinkSched("NCCL_NVLINK_UTIL_CENTRIC_SCHED_ENABLE", nullptr,
                              "Integer; overrides ncclConfig_t.nvlinkCentricSched (0/1)");

const StringKnob kEnvGraphMixing("NCCL_GRAPH_MIXING_SUPPORT", nullptr,
                                  "Integer; overrides ncclConfig_t.graphUsageMode (0 -> 0, 1 -> 2)");
const StringKnob kEnvNumRmaCtx("NCCL_NUM_RMA_CTX", nullptr, "Integer; overrides ncclConfig_t.numRmaCtx (>= 0)");
const StringKnob kEnvP2pMaxPeers("NCCL_P2P_MAX_PEERS", nullptr, "Integer; overrides ncclConfig_t.maxP2pPeers (> 0)");
const StringKnob kEnvGraphOrdering("NCCL_GRAPH_STREAM_ORDERING", nullptr,
                                   "Integer; overrides ncclConfig_t.graphStreamOrdering (0/1)");

constexpr unsigned version(int major, int minor, int patch) { return major * 10000 + minor * 100 + patch; }

// Copies the caller's struct without reading past its size; fields the caller
// cannot have set (outside its size, or newer than its version) stay undefined.
Status readCallerStruct(const ncclConfig_t* user, ncclConfig_t* c) {
  size_t size;
  memcpy(&size, user, sizeof(size));
  const size_t header = offsetof(ncclConfig_t, version) + sizeof(unsigned);
  if (size < header)
    return invalidArgument("ncclConfig_t size %zu is too small (at least %zu bytes); initialise it with "
                           "NCCL_CONFIG_INITIALIZER", size, header);
  unsigned magic, ver;
  memcpy(&magic, reinterpret_cast<const char*>(user) + offsetof(ncclConfig_t, magic), sizeof(magic));
  memcpy(&ver, reinterpret_cast<const char*>(user) + offsetof(ncclConfig_t, version), sizeof(ver));
  if (magic != kConfigMagic)
    return invalidArgument("ncclConfig_t argument not initialized via NCCL_CONFIG_INITIALIZER (magic %#x, expected %#x)",
                           magic, kConfigMagic);
  memcpy(c, user, std::min(size, sizeof(ncclConfig_t)));
  auto gate = [&](auto& field, unsigned since) {
    size_t end = reinterpret_cast<const char*>(&field) - reinterpret_cast<const char*>(c) + sizeof(field);
    if (end > size || ver < since) {
      using T = std::remove_reference_t<decltype(field)>;
      if constexpr (std::is_pointer_v<T>) field = nullptr;
      else field = kUndef;
    }
  };
  gate(c->blocking, version(2, 14, 0));
  gate(c->cgaClusterSize, version(2, 17, 0));
  gate(c->minCTAs, version(2, 17, 0));
  gate(c->maxCTAs, version(2, 17, 0));
  gate(c->netName, version(2, 17, 0));
  gate(c->splitShare, version(2, 18, 0));
  gate(c->trafficClass, version(2, 25, 0));
  gate(c->commName, version(2, 27, 0));
  gate(c->collnetEnable, version(2, 27, 0));
  gate(c->CTAPolicy, version(2, 27, 0));
  gate(c->shrinkShare, version(2, 27, 0));
  gate(c->nvlsCTAs, version(2, 27, 0));
  gate(c->nChannelsPerNetPeer, version(2, 28, 0));
  gate(c->nvlinkCentricSched, version(2, 28, 0));
  gate(c->graphUsageMode, version(2, 29, 0));
  gate(c->numRmaCtx, version(2, 29, 0));
  gate(c->maxP2pPeers, version(2, 30, 0));
  // 2.30.5, not 2.30.0: in 2.30.3/2.30.4 headers these bytes are padding with undefined contents.
  gate(c->graphStreamOrdering, version(2, 30, 5));
  return Status::ok();
}

// The value of one integer field: the environment, else the caller's, else `fallback`.
struct Picked {
  int value;
  const char* source;  // for messages: "config.blocking" or "NCCL_COMM_BLOCKING"
  Status error;        // the environment value is not an integer
};
Picked pick(int userValue, const char* field, const StringKnob& env, int fallback) {
  if (env.isSet()) {
    std::string text = env.get();
    auto v = parseIntWithSuffix(text.c_str());
    if (!v || *v < INT_MIN + 1 || *v > INT_MAX)
      return {0, env.name(), invalidArgument("%s='%s' is not a valid integer", env.name(), text.c_str())};
    return {static_cast<int>(*v), env.name(), Status()};
  }
  if (userValue != kUndef) return {userValue, field, Status()};
  return {fallback, field, Status()};
}

Status expectBool(const Picked& p, bool* out) {
  TH_CHECK(p.error);
  if (p.value != 0 && p.value != 1) return invalidArgument("%s=%d is invalid (must be 0 or 1)", p.source, p.value);
  *out = p.value == 1;
  return Status::ok();
}

Status resolveCtas(const ncclConfig_t& c, CommConfig* out) {
  Picked cga = pick(c.cgaClusterSize, "config.cgaClusterSize", kEnvCga, out->cgaClusterSize);
  TH_CHECK(cga.error);
  if (cga.value < 0) return invalidArgument("%s=%d is invalid (must be >= 0)", cga.source, cga.value);
  if (cga.value > kMaxCgaClusterSize) {
    TH_INFO(log::kInit | log::kEnv, "%s=%d is larger than %d; using %d", cga.source, cga.value, kMaxCgaClusterSize,
            kMaxCgaClusterSize);
    cga.value = kMaxCgaClusterSize;
  }
  out->cgaClusterSize = cga.value;
  Picked minC = pick(c.minCTAs, "config.minCTAs", kEnvMinCtas, out->minCTAs);
  Picked maxC = pick(c.maxCTAs, "config.maxCTAs", kEnvMaxCtas, out->maxCTAs);
  TH_CHECK(minC.error);
  TH_CHECK(maxC.error);
  if (minC.value <= 0) return invalidArgument("%s=%d is invalid (must be > 0)", minC.source, minC.value);
  if (maxC.value <= 0) return invalidArgument("%s=%d is invalid (must be > 0)", maxC.source, maxC.value);
  if (minC.value > maxC.value)
    return invalidArgument("%s=%d is larger than %s=%d", minC.source, minC.value, maxC.source, maxC.value);
  out->minCTAs = minC.value;
  out->maxCTAs = maxC.value;
  Picked policy = pick(c.CTAPolicy, "config.CTAPolicy", kEnvCtaPolicy, out->ctaPolicy);
  TH_CHECK(policy.error);
  if (policy.value < NCCL_CTA_POLICY_DEFAULT || policy.value > NCCL_CTA_POLICY_ZERO)
    return invalidArgument("%s=%d is invalid (must be 0, 1 or 2)", policy.source, policy.value);
  out->ctaPolicy = policy.value;
  Picked nvls = pick(c.nvlsCTAs, "config.nvlsCTAs", kEnvNvlsCtas, out->nvlsCTAs);
  TH_CHECK(nvls.error);
  if (nvls.value != kUndef && nvls.value <= 0)
    return invalidArgument("%s=%d is invalid (must be > 0)", nvls.source, nvls.value);
  out->nvlsCTAs = nvls.value;
  Picked perPeer = pick(c.nChannelsPerNetPeer, "config.nChannelsPerNetPeer", kEnvPerNetPeer, out->nChannelsPerNetPeer);
  TH_CHECK(perPeer.error);
  if (perPeer.value != kUndef && (perPeer.value <= 0 || perPeer.value > kMaxChannels))
    return invalidArgument("%s=%d is invalid (must be in 1..%d)", perPeer.source, perPeer.value, kMaxChannels);
  out->nChannelsPerNetPeer = perPeer.value;
  return Status::ok();
}

// The 2.29/2.30 fields: validated as NCCL does; none changes what Theseus does (see noEffect).
Status resolveNewFields(const ncclConfig_t& c, CommConfig* out) {
  Picked graphs = pick(c.graphUsageMode, "config.graphUsageMode", kEnvGraphMixing, out->graphUsageMode);
  TH_CHECK(graphs.error);
  if (graphs.source == kEnvGraphMixing.name()) {
    if (graphs.value != 0 && graphs.value != 1)
      return invalidArgument("%s=%d is invalid (must be 0 or 1)", graphs.source, graphs.value);
    graphs.value = graphs.value == 1 ? 2 : 0;
  }
  if (graphs.value < 0 || graphs.value > 2)
    return invalidArgument("%s=%d is invalid (must be 0, 1 or 2)", graphs.source, graphs.value);
  out->graphUsageMode = graphs.value;
  Picked rma = pick(c.numRmaCtx, "config.numRmaCtx", kEnvNumRmaCtx, out->numRmaCtx);
  TH_CHECK(rma.error);
  if (rma.value < 0) return invalidArgument("%s=%d is invalid (must be >= 0)", rma.source, rma.value);
  out->numRmaCtx = rma.value;
  Picked peers = pick(c.maxP2pPeers, "config.maxP2pPeers", kEnvP2pMaxPeers, out->maxP2pPeers);
  TH_CHECK(peers.error);
  if (peers.value != kUndef && peers.value <= 0)
    return invalidArgument("%s=%d is invalid (must be > 0)", peers.source, peers.value);
  out->maxP2pPeers = peers.value;
  Picked ordering = pick(c.graphStreamOrdering, "config.graphStreamOrdering", kEnvGraphOrdering,
                         out->graphStreamOrdering);
  TH_CHECK(ordering.error);
  if (ordering.value != kUndef && ordering.value != 0 && ordering.value != 1)
    return invalidArgument("%s=%d is invalid (must be 0 or 1)", ordering.source, ordering.value);
  out->graphStreamOrdering = ordering.value;
  return Status::ok();
}

// Says once per process that a field the caller (or the environment) set has no effect.
void noteNoEffect(bool set, const char* field, const char* why) {
  static std::mutex mu;
  static auto* said = new std::set<std::string>;
  if (!set) return;
  std::lock_guard<std::mutex> lock(mu);
  if (!said->insert(field).second) return;
  TH_INFO(log::kInit | log::kEnv, "%s has no effect in Theseus: %s", field, why);
}

void noteFieldsWithoutEffect(const ncclConfig_t& c) {
  constexpr const char* kNoCtas = "Theseus runs one progress lane per communicator, not NCCL's CTA channels";
  noteNoEffect(c.cgaClusterSize != kUndef || kEnvCga.isSet(), "cgaClusterSize (NCCL_CGA_CLUSTER_SIZE)", kNoCtas);
  noteNoEffect(c.minCTAs != kUndef || kEnvMinCtas.isSet(), "minCTAs (NCCL_MIN_CTAS)", kNoCtas);
  noteNoEffect(c.maxCTAs != kUndef || kEnvMaxCtas.isSet(), "maxCTAs (NCCL_MAX_CTAS)", kNoCtas);
  noteNoEffect(c.CTAPolicy != kUndef || kEnvCtaPolicy.isSet(), "CTAPolicy (NCCL_CTA_POLICY)", kNoCtas);
  noteNoEffect(c.nvlsCTAs != kUndef || kEnvNvlsCtas.isSet(), "nvlsCTAs (NCCL_NVLS_NCHANNELS)",
               "Theseus has no NVLS (NVLink SHARP) path");
  noteNoEffect(c.nChannelsPerNetPeer != kUndef || kEnvPerNetPeer.isSet(),
               "nChannelsPerNetPeer (NCCL_NCHANNELS_PER_NET_PEER)",
               "schedules set their channels; THESEUS_MAX_CHANNELS caps them");
  noteNoEffect(c.nvlinkCentricSched != kUndef || kEnvNvlinkSched.isSet(),
               "nvlinkCentricSched (NCCL_NVLINK_UTIL_CENTRIC_SCHED_ENABLE)", "Theseus has no NVLink-specific scheduler");
  noteNoEffect(c.collnetEnable != kUndef || kEnvCollnet.isSet(), "collnetEnable (NCCL_COLLNET_ENABLE)",
               "Theseus has no CollNet (in-network reduction) path");
  noteNoEffect(c.splitShare != kUndef || kEnvSplitShare.isSet(), "splitShare (NCCL_COMM_SPLIT_SHARE_RESOURCES)",
               "children never share the parent's resources (they always get their own)");
  noteNoEffect(c.shrinkShare != kUndef || kEnvShrinkShare.isSet(),
               "shrinkShare (NCCL_COMM_SHRINK_SHARE_RESOURCES)",
               "children never share the parent's resources (they always get their own)");
  noteNoEffect(c.trafficClass != kUndef, "trafficClass", "the socket and shared-memory transports set no traffic class");
  noteNoEffect(c.graphUsageMode != kUndef || kEnvGraphMixing.isSet(), "graphUsageMode (NCCL_GRAPH_MIXING_SUPPORT)",
               "captured and eager operations always mix on one communicator (the FIFOs' counters live in the FIFOs)");
  noteNoEffect(c.graphStreamOrdering != kUndef || kEnvGraphOrdering.isSet(),
               "graphStreamOrdering (NCCL_GRAPH_STREAM_ORDERING)",
               "a captured operation is ordered by its stream within the graph, as an eager one is");
  noteNoEffect(c.numRmaCtx != kUndef || kEnvNumRmaCtx.isSet(), "numRmaCtx (NCCL_NUM_RMA_CTX)",
               "one-sided operations (ncclPutSignal, ...) are not available");
  noteNoEffect(c.maxP2pPeers != kUndef || kEnvP2pMaxPeers.isSet(), "maxP2pPeers (NCCL_P2P_MAX_PEERS)",
               "connections are made lazily for the peers a rank really talks to, so there is nothing to reserve");
}

Status resolve(const ncclConfig_t& c, CommConfig* out) {
  TH_CHECK(expectBool(pick(c.blocking, "config.blocking", kEnvBlocking, out->blocking), &out->blocking));
  TH_CHECK(resolveCtas(c, out));
  if (c.netName != nullptr) out->netName = c.netName;
  if (kEnvNet.isSet()) out->netName = kEnvNet.get();
  if (c.commName != nullptr) out->commName = c.commName;
  TH_CHECK(expectBool(pick(c.splitShare, "config.splitShare", kEnvSplitShare, out->splitShare), &out->splitShare));
  if (c.trafficClass != kUndef) out->trafficClass = c.trafficClass;
  TH_CHECK(expectBool(pick(c.collnetEnable, "config.collnetEnable", kEnvCollnet, out->collnetEnable),
                      &out->collnetEnable));
  TH_CHECK(expectBool(pick(c.shrinkShare, "config.shrinkShare", kEnvShrinkShare, out->shrinkShare), &out->shrinkShare));
  TH_CHECK(expectBool(pick(c.nvlinkCentricSched, "config.nvlinkCentricSched", kEnvNvlinkSched, out->nvlinkCentricSched),
                      &out->nvlinkCentricSched));
  TH_CHECK(resolveNewFields(c, out));
  noteFieldsWithoutEffect(c);
  return Status::ok();
}

}  // namespace

ncclResult_t visibleTo(ncclResult_t code, const CommConfig& cfg) {
  return code == ncclTimeout && cfg.callerVersion < version(2, 30, 0) ? ncclRemoteError : code;
}

Status visibleTo(const Status& s, const CommConfig& cfg) {
  return s.code() == ncclTimeout ? Status(visibleTo(s.code(), cfg), s.message()) : s;
}

Status parseConfig(const ncclConfig_t* user, const CommConfig* inherit, CommConfig* out) {
  if (out == nullptr) return internalError("parseConfig: output is NULL");
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  // Explicit configs start from the defaults; no config means the parent's (split/shrink) or the defaults.
  CommConfig result = (user == nullptr && inherit != nullptr) ? *inherit : CommConfig{};
  if (user != nullptr) {
    TH_CHECK(readCallerStruct(user, &c));
    result.callerVersion = c.version;
  }
  TH_CHECK(resolve(c, &result));
  *out = std::move(result);
  return Status::ok();
}

}  // namespace theseus::comm
