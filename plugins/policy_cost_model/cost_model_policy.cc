// A policy plugin that picks schedules with the alpha-beta cost model.
//
// How it decides. From the cluster view it builds a link model: the default
// bandwidth is the median of all measured link.*.*.gbps (10 GB/s when nothing
// is measured yet), the default latency the median of link.*.*.latency_us
// (5 us); every link with its own measurement gets its own bandwidth and
// latency; a link that is a bottleneck more than half of the time
// (link.a.b.bottleneck = f > 0.5, docs/attributes.md) gets at most (1 - f) of
// the default bandwidth, however fast it looked; bandwidths are divided by
// link.a.b.penalty when an operator set one; links between
// hosts get 25% of the default bandwidth when a NIC of either host is
// unhealthy (node.<host>.nic.*.healthy == 0) and 1% when a host is unhealthy
// (node.<host>.healthy == 0). For every collective that several built-ins
// serve (allreduce, allgather, reducescatter, broadcast, reduce) and every
// message size of interest (the sizes the communicator used recently, or a
// grid from 1 KiB to 256 MiB), it asks Theseus for the estimated time of each
// candidate - ring, ring around slow links, the trees, recursive doubling,
// halving-doubling, direct, hierarchical on several hosts - and takes the
// fastest. The size axis is cut half-way (geometrically) between neighbouring
// sizes. Alltoall, gather and scatter keep Theseus' static choice.
//
// Hysteresis. A choice made earlier for the same collective and size stays
// while it is within 10% of the best estimate, so estimates that wobble with
// noisy measurements do not swap schedules back and forth.
//
// Only the C header include/theseus/policy_plugin.h is used: the plugin links
// nothing of Theseus; estimates come through the host services.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "theseus/policy_plugin.h"

namespace {

constexpr double kDefaultGBps = 10.0;
constexpr double kDefaultAlphaUs = 5.0;
constexpr double kKeepWithin = 1.10;  // hysteresis: keep an earlier choice within 10% of the best
const uint64_t kDefaultSizes[] = {1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20,
                                  4 << 20, 16 << 20, 64 << 20, 256 << 20};
const int kCollectives[] = {THESEUS_POLICY_ALLREDUCE, THESEUS_POLICY_ALLGATHER, THESEUS_POLICY_REDUCESCATTER,
                            THESEUS_POLICY_BROADCAST, THESEUS_POLICY_REDUCE};

struct Candidate {
  std::string schedule;
  std::string params;
};

struct Context {
  theseusPolicyLogger_t logger = nullptr;
  std::map<std::pair<int, uint64_t>, Candidate> previous;  // (collective, size) -> last choice
};

double median(std::vector<double> v, double fallback) {
  if (v.empty()) return fallback;
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// "link.<a>.<b>.<what>" -> a, b, what.
bool parseLink(const char* name, int n, int* a, int* b, std::string* what) {
  if (strncmp(name, "link.", 5) != 0) return false;
  char* end = nullptr;
  long x = strtol(name + 5, &end, 10);
  if (end == name + 5 || *end != '.') return false;
  const char* second = end + 1;
  long y = strtol(second, &end, 10);
  if (end == second || *end != '.') return false;
  if (x < 0 || y < 0 || x >= n || y >= n || x == y) return false;
  *a = static_cast<int>(x);
  *b = static_cast<int>(y);
  *what = end + 1;
  return true;
}

bool hasSuffix(const std::string& s, const char* suffix) {
  size_t n = strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

struct LinkModel {
  theseusPolicyLinkModel_v1_t c;
  std::vector<double> gbps, alpha;
};

LinkModel buildModel(const theseusPolicyInput_v1_t* in) {
  const int n = in->nranks;
  std::vector<double> allGbps, allAlpha;
  std::vector<double> gbps(static_cast<size_t>(n) * n, 0.0), alpha(static_cast<size_t>(n) * n, 0.0);
  std::vector<double> penalty(static_cast<size_t>(n) * n, 1.0), bottleneck(static_cast<size_t>(n) * n, 0.0);
  std::vector<double> hostFactor(in->nnodes, 1.0);
  for (size_t i = 0; i < in->nattrs; ++i) {
    const theseusPolicyAttr_v1_t& a = in->attrs[i];
    int x, y;
    std::string what;
    if (parseLink(a.name, n, &x, &y, &what)) {
      size_t k = static_cast<size_t>(x) * n + y;
      if (what == "gbps" && a.value > 0) {
        gbps[k] = a.value;
        allGbps.push_back(a.value);
      } else if (what == "latency_us" && a.value > 0) {
        alpha[k] = a.value;
        allAlpha.push_back(a.value);
      } else if (what == "penalty" && a.value > 0) {
        penalty[k] = a.value;
      } else if (what == "bottleneck") {
        bottleneck[k] = a.value;
      }
      continue;
    }
    std::string name = a.name;
    for (int h = 0; h < in->nnodes; ++h) {
      std::string prefix = std::string("node.") + in->host_names[h] + ".";
      if (name.compare(0, prefix.size(), prefix) != 0 || a.value != 0) continue;
      if (name == prefix + "healthy") hostFactor[h] = std::min(hostFactor[h], 0.01);
      else if (name.compare(prefix.size(), 4, "nic.") == 0 && hasSuffix(name, ".healthy"))
        hostFactor[h] = std::min(hostFactor[h], 0.25);
    }
  }
  LinkModel m;
  memset(&m.c, 0, sizeof(m.c));
  m.c.struct_size = sizeof(m.c);
  m.c.beta_gbps = median(allGbps, kDefaultGBps);
  m.c.alpha_us = median(allAlpha, kDefaultAlphaUs);
  m.c.local_gbps = 0;
  for (int x = 0; x < n; ++x) {
    for (int y = 0; y < n; ++y) {
      if (x == y) continue;
      size_t k = static_cast<size_t>(x) * n + y;
      double g = gbps[k] > 0 ? gbps[k] : m.c.beta_gbps;
      if (bottleneck[k] > 0.5) g = std::min(g, m.c.beta_gbps * std::max(0.02, 1.0 - std::min(bottleneck[k], 1.0)));
      int hx = in->host_of[x], hy = in->host_of[y];
      if (hx != hy) g *= std::min(hostFactor[hx], hostFactor[hy]);
      g /= penalty[k];
      // Only links that differ from the default need an entry.
      gbps[k] = g == m.c.beta_gbps ? 0.0 : g;
    }
  }
  m.gbps = std::move(gbps);
  m.alpha = std::move(alpha);
  m.c.link_gbps = m.gbps.data();
  m.c.link_alpha_us = m.alpha.data();
  return m;
}

std::vector<Candidate> candidates(const theseusPolicyInput_v1_t* in, int collective, const std::string& avoidOrder) {
  static const char* kNames[] = {"ring", "tree", "double_binary_tree", "recursive_doubling", "halving_doubling",
                                 "direct", "hierarchical"};
  const theseusPolicyHost_v1_t* host = in->host;
  std::vector<Candidate> out;
  for (const char* name : kNames) {
    if (std::strcmp(name, "hierarchical") == 0 && in->nnodes < 2) continue;
    if (!host->schedule_supports(host->ctx, name, collective, in->nranks)) continue;
    out.push_back({name, ""});
    if (std::strcmp(name, "ring") == 0 && !avoidOrder.empty()) out.push_back({name, "order=" + avoidOrder});
  }
  return out;
}

// The ring order around slow links, "" when it is the identity.
std::string avoidOrder(const theseusPolicyInput_v1_t* in) {
  std::vector<int> order(in->nranks);
  if (in->host->avoid_slow_links_order(in->host->ctx, 0, order.data()) != theseusPolicySuccess) return "";
  bool identity = true;
  std::string text;
  for (int i = 0; i < in->nranks; ++i) {
    identity = identity && order[i] == i;
    text += (i ? "," : "") + std::to_string(order[i]);
  }
  return identity ? "" : text;
}

struct Pick {
  Candidate choice;
  double us = 0;
};

bool choose(Context* ctx, const theseusPolicyInput_v1_t* in, const LinkModel& model, int collective, uint64_t size,
            const std::vector<Candidate>& options, Pick* pick, char* error, size_t errorSize) {
  const theseusPolicyHost_v1_t* host = in->host;
  double best = INFINITY, previousUs = INFINITY;
  const Candidate* previous = nullptr;
  auto it = ctx->previous.find({collective, size});
  for (const Candidate& c : options) {
    double us = 0;
    char why[256] = {0};
    if (host->estimate_cost(host->ctx, c.schedule.c_str(), c.params.c_str(), collective, size, &model.c, &us, why,
                            sizeof(why)) != theseusPolicySuccess) {
      snprintf(error, errorSize, "estimate_cost(%s %s): %s", c.schedule.c_str(), c.params.c_str(), why);
      return false;
    }
    if (us < best) {
      best = us;
      pick->choice = c;
      pick->us = us;
    }
    if (it != ctx->previous.end() && it->second.schedule == c.schedule && it->second.params == c.params) {
      previous = &c;
      previousUs = us;
    }
  }
  if (previous != nullptr && previousUs <= best * kKeepWithin) {
    pick->choice = *previous;
    pick->us = previousUs;
  }
  return std::isfinite(best);
}

bool addDecision(theseusPolicyTable_v1_t* out, int collective, uint64_t lo, uint64_t hi, const Pick& p) {
  if (out->count > 0) {
    theseusPolicyDecision_v1_t& last = out->decisions[out->count - 1];
    if (last.collective == collective && p.choice.schedule == last.schedule && p.choice.params == last.params) {
      last.max_bytes = hi;
      return true;
    }
  }
  if (out->count >= out->capacity) return false;
  theseusPolicyDecision_v1_t& d = out->decisions[out->count++];
  d.collective = collective;
  d.min_bytes = lo;
  d.max_bytes = hi;
  snprintf(d.schedule, sizeof(d.schedule), "%s", p.choice.schedule.c_str());
  snprintf(d.params, sizeof(d.params), "%s", p.choice.params.c_str());
  snprintf(d.why, sizeof(d.why), "cost model: %.0f us at %llu bytes", p.us, static_cast<unsigned long long>(lo));
  return true;
}

theseusPolicyResult_t costInit(void** context, theseusPolicyLogger_t logger) {
  Context* ctx = new (std::nothrow) Context();
  if (ctx == nullptr) return theseusPolicyInternalError;
  ctx->logger = logger;
  *context = ctx;
  return theseusPolicySuccess;
}

theseusPolicyResult_t decideImpl(Context* ctx, const theseusPolicyInput_v1_t* in, theseusPolicyTable_v1_t* out,
                                 char* error, size_t errorSize) {
  std::vector<uint64_t> sizes(in->sizes, in->sizes + in->nsizes);
  if (sizes.empty()) sizes.assign(std::begin(kDefaultSizes), std::end(kDefaultSizes));
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  LinkModel model = buildModel(in);
  std::string order = avoidOrder(in);
  out->count = 0;
  for (int c : kCollectives) {
    std::vector<Candidate> options = candidates(in, c, order);
    if (options.empty()) continue;
    for (size_t i = 0; i < sizes.size(); ++i) {
      Pick p;
      if (!choose(ctx, in, model, c, std::max<uint64_t>(sizes[i], 1), options, &p, error, errorSize))
        return theseusPolicyInvalidArgument;
      if (ctx->previous.size() > 4096) ctx->previous.clear();  // sizes of interest keep changing: start over
      ctx->previous[{c, sizes[i]}] = p.choice;
      // Cut half-way (geometric mean) between neighbouring sizes.
      uint64_t lo = i == 0 ? 0 : static_cast<uint64_t>(std::sqrt(double(sizes[i - 1]) * double(sizes[i]))) + 1;
      uint64_t hi = i + 1 == sizes.size() ? UINT64_MAX
                                          : static_cast<uint64_t>(std::sqrt(double(sizes[i]) * double(sizes[i + 1])));
      if (hi < lo) continue;  // neighbouring sizes too close to separate
      if (!addDecision(out, c, lo, hi, p)) {
        snprintf(error, errorSize, "the decision table is full (%zu entries)", out->capacity);
        return theseusPolicyInternalError;
      }
    }
  }
  if (ctx->logger) {
    char line[128];
    snprintf(line, sizeof(line), "decided %zu ranges for %d ranks on %d hosts", out->count, in->nranks, in->nnodes);
    ctx->logger(THESEUS_POLICY_LOG_TRACE, line);
  }
  return theseusPolicySuccess;
}

theseusPolicyResult_t costDecide(void* context, const theseusPolicyInput_v1_t* in, theseusPolicyTable_v1_t* out,
                                 char* error, size_t errorSize) {
  if (context == nullptr || in == nullptr || out == nullptr || in->host == nullptr ||
      in->struct_size < sizeof(theseusPolicyInput_v1_t) || in->host->struct_size < sizeof(theseusPolicyHost_v1_t)) {
    snprintf(error, errorSize, "bad input (built against a different policy_plugin.h?)");
    return theseusPolicyInvalidArgument;
  }
  try {  // nothing may throw across the C interface
    return decideImpl(static_cast<Context*>(context), in, out, error, errorSize);
  } catch (const std::exception& e) {
    snprintf(error, errorSize, "%s", e.what());
  } catch (...) {
    snprintf(error, errorSize, "unexpected exception");
  }
  return theseusPolicyInternalError;
}

theseusPolicyResult_t costFinalize(void* context) {
  delete static_cast<Context*>(context);
  return theseusPolicySuccess;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const theseusPolicyPlugin_v1_t theseusPolicyPlugin_v1 = {
    sizeof(theseusPolicyPlugin_v1_t),
    THESEUS_POLICY_PLUGIN_ABI_V1,
    "cost_model",
    "alpha-beta cost model over measured link attributes: the fastest estimated built-in per collective and size",
    costInit,
    costDecide,
    costFinalize,
};
