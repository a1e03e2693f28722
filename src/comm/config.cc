// ncclConfig_t parsing with NCCL 2.28's rules.
//
// The caller's struct may come from an older header (24, 40, 48 or 72 bytes)
// or a newer one (larger). We read `size` first and never touch a byte past
// it: the known prefix is copied into a struct pre-filled with
// NCCL_CONFIG_INITIALIZER (every field "undefined"), then every field the
// caller's `version` predates is reset to undefined as well (NCCL does the
// same: an old caller cannot have meant the value found there). Undefined
// fields take the defaults, or the parent's values for a split/shrink given no
// config. NCCL_* environment variables then override (the environment wins,
// as in NCCL), and the result is validated; strings are copied.
#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstring>

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
const StringKnob kEnvNet("NCCL_NET", nullptr, "Overrides ncclConfig_t.netName (network plugin by name)");
const StringKnob kEnvSplitShare("NCCL_COMM_SPLIT_SHARE_RESOURCES", nullptr, "Integer; overrides ncclConfig_t.splitShare (0/1)");
const StringKnob kEnvCollnet("NCCL_COLLNET_ENABLE", nullptr, "Integer; overrides ncclConfig_t.collnetEnable (0/1)");
const StringKnob kEnvCtaPolicy("NCCL_CTA_POLICY", nullptr, "Integer; overrides ncclConfig_t.CTAPolicy (0..2)");
const StringKnob kEnvShrinkShare("NCCL_COMM_SHRINK_SHARE_RESOURCES", nullptr, "Integer; overrides ncclConfig_t.shrinkShare (0/1)");
const StringKnob kEnvNvlsCtas("NCCL_NVLS_NCHANNELS", nullptr, "Integer; overrides ncclConfig_t.nvlsCTAs");
const StringKnob kEnvPerNetPeer("NCCL_NCHANNELS_PER_NET_PEER", nullptr,
                             "Integer; overrides ncclConfig_t.nChannelsPerNetPeer (1..64)");
const StringKnob kEnvNvlinkSched("NCCL_NVLINK_UTIL_CENTRIC_SCHED_ENABLE", nullptr,
                              "Integer; overrides ncclConfig_t.nvlinkCentricSched (0/1)");

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
  return Status::ok();
}

}  // namespace

Status parseConfig(const ncclConfig_t* user, const CommConfig* inherit, CommConfig* out) {
  if (out == nullptr) return internalError("parseConfig: output is NULL");
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  // Explicit configs start from the defaults; no config means the parent's (split/shrink) or the defaults.
  CommConfig result = (user == nullptr && inherit != nullptr) ? *inherit : CommConfig{};
  if (user != nullptr) TH_CHECK(readCallerStruct(user, &c));
  TH_CHECK(resolve(c, &result));
  *out = std::move(result);
  return Status::ok();
}

}  // namespace theseus::comm
