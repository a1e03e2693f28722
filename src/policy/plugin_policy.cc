#include "policy/plugin_policy.h"

#include <cstring>
#include <vector>

#include "common/log.h"
#include "policy/decision_check.h"
#include "policy/ring_order.h"
#include "schedule/builtins.h"
#include "schedule/user/cost_model.h"
#include "schedule/user/user_schedules.h"

namespace theseus::policy {
namespace {

constexpr const char* kWhat = "policy plugin";

void pluginLogger(int level, const char* message) {
  plugin::logFromPlugin(kWhat, log::kPolicy, level, THESEUS_POLICY_LOG_WARN, THESEUS_POLICY_LOG_TRACE, message);
}

using plugin::CallScope;

// Descriptor symbols, newest first; when v2 arrives, v1 stays with an adapter.
const char* const kKnownSymbols[] = {THESEUS_POLICY_PLUGIN_SYMBOL_V1};
const char* const kFutureSymbols[] = {"theseusPolicyPlugin_v4", "theseusPolicyPlugin_v3", "theseusPolicyPlugin_v2"};

bool validCollective(int c) { return (c >= 0 && c <= 4) || (c >= 8 && c <= 10); }

bool validPluginName(const char* name) {
  size_t n = strnlen(name, 129);
  if (n == 0 || n > 128) return false;
  for (size_t i = 0; i < n; ++i) {
    char c = name[i];
    if (!isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-') return false;
  }
  return true;
}

void writeError(char* error, size_t size, const std::string& text) {
  if (error == nullptr || size == 0) return;
  snprintf(error, size, "%s", text.c_str());
}

// Host services: `ctx` is a HostCall.
struct HostCall {
  PluginPolicy* policy;
  const PolicyInput* in;
};

int hostSupports(void* ctx, const char* name, int collective, int nranks) {
  if (ctx == nullptr || name == nullptr || !validCollective(collective) || nranks < 1) return 0;
  return scheduleServes(name, static_cast<schedule::Collective>(collective), nranks) ? 1 : 0;
}

theseusPolicyResult_t hostEstimate(void* ctx, const char* name, const char* params, int collective, uint64_t bytes,
                                   const theseusPolicyLinkModel_v1_t* model, double* timeUs, char* error,
                                   size_t errorSize) {
  auto* call = static_cast<HostCall*>(ctx);
  if (call == nullptr || name == nullptr || timeUs == nullptr || model == nullptr) {
    writeError(error, errorSize, "estimate_cost: NULL argument");
    return theseusPolicyInvalidArgument;
  }
  Status st = call->policy->estimate(*call->in, name, params ? params : "", collective, bytes, model, timeUs);
  if (st.isOk()) return theseusPolicySuccess;
  writeError(error, errorSize, st.message());
  return theseusPolicyInvalidArgument;
}

theseusPolicyResult_t hostAvoidSlowLinks(void* ctx, int bidirectional, int* order) {
  auto* call = static_cast<HostCall*>(ctx);
  if (call == nullptr || order == nullptr) return theseusPolicyInvalidArgument;
  OrderOptions options;
  std::vector<int> ring = avoidSlowLinksOrder(linkCosts(*call->in, options), bidirectional != 0, options.slowRatio);
  for (size_t i = 0; i < ring.size(); ++i) order[i] = ring[i];
  return theseusPolicySuccess;
}

Status checkDescriptor(const theseusPolicyPlugin_v1_t* d, const std::string& path) {
  if (d->struct_size != sizeof(theseusPolicyPlugin_v1_t))
    return invalidArgument("%s: %s has struct_size %zu but theseusPolicyPlugin_v1_t is %zu bytes (built against a "
                           "different policy_plugin.h?)", path.c_str(), THESEUS_POLICY_PLUGIN_SYMBOL_V1,
                           d->struct_size, sizeof(theseusPolicyPlugin_v1_t));
  if (d->abi_version != THESEUS_POLICY_PLUGIN_ABI_V1)
    return invalidArgument("%s: %s has abi_version %u, expected %u", path.c_str(), THESEUS_POLICY_PLUGIN_SYMBOL_V1,
                           d->abi_version, THESEUS_POLICY_PLUGIN_ABI_V1);
  if (d->name == nullptr || !validPluginName(d->name))
    return invalidArgument("%s: the plugin's name must be 1..128 characters of [A-Za-z0-9_.-]", path.c_str());
  if (d->decide == nullptr)
    return invalidArgument("%s: policy plugin '%s': required function decide() is NULL", path.c_str(), d->name);
  return Status::ok();
}

void toC(const DecisionTable& t, std::vector<theseusPolicyDecision_v1_t>* out) {
  for (int c = 0; c < DecisionTable::kCollectives; ++c) {
    for (const auto& r : t.ranges(static_cast<schedule::Collective>(c))) {
      theseusPolicyDecision_v1_t d;
      memset(&d, 0, sizeof(d));
      d.collective = c;
      d.min_bytes = r.minBytes;
      d.max_bytes = r.maxBytes;
      snprintf(d.schedule, sizeof(d.schedule), "%s", r.decision.schedule.c_str());
      snprintf(d.params, sizeof(d.params), "%s", r.decision.params.toString().c_str());
      d.slice_bytes = r.decision.sliceBytes;
      snprintf(d.why, sizeof(d.why), "%s", r.decision.why.c_str());
      out->push_back(d);
    }
  }
}

}  // namespace

Result<std::unique_ptr<PluginPolicy>> PluginPolicy::load(const std::string& path) {
  TH_ASSIGN(std::unique_ptr<plugin::Library> lib, plugin::Library::open(path, kWhat));
  TH_ASSIGN(plugin::Library::Symbol found, lib->findVersioned(kKnownSymbols, kFutureSymbols));
  auto* d = static_cast<const theseusPolicyPlugin_v1_t*>(found.address);
  TH_CHECK(checkDescriptor(d, path));
  std::unique_ptr<PluginPolicy> p(new PluginPolicy());
  p->path_ = path;
  p->name_ = d->name;
  p->library_ = std::move(lib);
  p->plugin_ = d;
  if (d->init != nullptr) {
    CallScope scope(d->name);
    theseusPolicyResult_t rc = d->init(&p->context_, pluginLogger);
    if (rc != theseusPolicySuccess) {
      p->plugin_ = nullptr;  // no finalize() after a failed init()
      return invalidArgument("policy plugin %s ('%s'): init() failed with %d", path.c_str(), d->name, rc);
    }
  }
  TH_INFO(log::kPolicy, "policy plugin '%s' loaded from %s", p->name_.c_str(), path.c_str());
  return p;
}

PluginPolicy::~PluginPolicy() {
  if (plugin_ != nullptr && plugin_->finalize != nullptr) {
    CallScope scope(plugin_->name);
    theseusPolicyResult_t rc = plugin_->finalize(context_);
    if (rc != theseusPolicySuccess) TH_INFO(log::kPolicy, "policy plugin '%s': finalize() returned %d", name_.c_str(), rc);
  }
}

std::string PluginPolicy::describe() const {
  std::string out = "policy plugin '" + name_ + "' (" + path_ + ")";
  if (plugin_ != nullptr && plugin_->description != nullptr) out += std::string(": ") + plugin_->description;
  return out;
}

Status PluginPolicy::estimate(const PolicyInput& in, const std::string& name, const std::string& params,
                              int collective, uint64_t bytes, const theseusPolicyLinkModel_v1_t* model,
                              double* timeUs) {
  if (!validCollective(collective)) return invalidArgument("estimate_cost: %d is not a collective", collective);
  if (model->struct_size != sizeof(theseusPolicyLinkModel_v1_t))
    return invalidArgument("estimate_cost: link model struct_size %zu, expected %zu", model->struct_size,
                           sizeof(theseusPolicyLinkModel_v1_t));
  const auto c = static_cast<schedule::Collective>(collective);
  const int n = in.nranks;
  if (!scheduleServes(name, c, n))
    return invalidArgument("estimate_cost: schedule '%s' does not serve %s with %d ranks", name.c_str(),
                           schedule::collectiveName(c), n);
  TH_ASSIGN(schedule::ScheduleParams prm, schedule::ScheduleParams::parse(params));
  schedule::user::LinkParams link;
  link.alphaUs = model->alpha_us;
  link.betaGBps = model->beta_gbps;
  link.localGBps = model->local_gbps;
  const size_t links = static_cast<size_t>(n) * n;
  if (model->link_gbps) link.linkGBps.assign(model->link_gbps, model->link_gbps + links);
  if (model->link_alpha_us) link.linkAlphaUs.assign(model->link_alpha_us, model->link_alpha_us + links);
  TH_ASSIGN(*timeUs, estimator_.timeUs(name, c, n, in.hostOf, prm, bytes, link));
  return Status::ok();
}

Result<DecisionTable> PluginPolicy::decide(const PolicyInput& in) {
  if (in.view == nullptr || in.nranks < 1) return invalidArgument("policy plugin '%s': no view", name_.c_str());
  std::lock_guard<std::mutex> lock(mu_);
  // The view as C structs; names stay alive in `entries`.
  const auto entries = in.view->entries();
  std::vector<theseusPolicyAttr_v1_t> attrs(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const attrs::ViewEntry& e = entries[i].second;
    attrs[i].name = entries[i].first.c_str();
    attrs[i].value = e.value;
    attrs[i].age_s = in.nowNs > e.timestampNs ? static_cast<double>(in.nowNs - e.timestampNs) / 1e9 : 0.0;
    attrs[i].rank = e.rank;
    attrs[i].source = static_cast<int>(e.source);
  }
  std::vector<int> hostOf = in.hostOf.size() == static_cast<size_t>(in.nranks) ? in.hostOf
                                                                               : std::vector<int>(in.nranks, 0);
  std::vector<const char*> hostNames;
  for (const std::string& h : in.hostNames) hostNames.push_back(h.c_str());
  std::vector<theseusPolicyDecision_v1_t> current;
  if (in.current) toC(*in.current, &current);

  HostCall call{this, &in};
  theseusPolicyHost_v1_t host;
  memset(&host, 0, sizeof(host));
  host.struct_size = sizeof(host);
  host.ctx = &call;
  host.schedule_supports = hostSupports;
  host.estimate_cost = hostEstimate;
  host.avoid_slow_links_order = hostAvoidSlowLinks;

  theseusPolicyInput_v1_t input;
  memset(&input, 0, sizeof(input));
  input.struct_size = sizeof(input);
  input.nranks = in.nranks;
  input.nnodes = in.nnodes();
  input.host_of = hostOf.data();
  input.host_names = hostNames.data();
  input.attrs = attrs.data();
  input.nattrs = attrs.size();
  input.sizes = in.sizes.data();
  input.nsizes = in.sizes.size();
  input.current = current.data();
  input.ncurrent = current.size();
  input.current_age_s = static_cast<double>(in.currentAgeNs) / 1e9;
  input.host = &host;

  std::vector<theseusPolicyDecision_v1_t> decisions(kMaxDecisions);
  memset(decisions.data(), 0, decisions.size() * sizeof(decisions[0]));
  theseusPolicyTable_v1_t out;
  memset(&out, 0, sizeof(out));
  out.struct_size = sizeof(out);
  out.decisions = decisions.data();
  out.capacity = decisions.size();
  char error[512] = {0};
  theseusPolicyResult_t rc;
  {
    CallScope scope(plugin_->name);
    rc = plugin_->decide(context_, &input, &out, error, sizeof(error));
  }
  error[sizeof(error) - 1] = 0;
  if (rc != theseusPolicySuccess)
    return errorStatus(rc == theseusPolicyInvalidArgument ? ncclInvalidArgument : ncclInternalError,
                       "policy plugin '%s': decide() failed (%d): %s", name_.c_str(), rc,
                       error[0] ? error : "no reason given");
  return convert(out);
}

Result<DecisionTable> PluginPolicy::convert(const theseusPolicyTable_v1_t& out) const {
  if (out.count > out.capacity)
    return invalidArgument("policy plugin '%s': count %zu exceeds the table's capacity %zu", name_.c_str(), out.count,
                           out.capacity);
  DecisionTable table;
  for (size_t i = 0; i < out.count; ++i) {
    const theseusPolicyDecision_v1_t& in = out.decisions[i];
    const std::string where = "policy plugin '" + name_ + "': decision " + std::to_string(i);
    if (!validCollective(in.collective))
      return invalidArgument("%s: %d is not a collective", where.c_str(), in.collective);
    if (memchr(in.schedule, 0, sizeof(in.schedule)) == nullptr || memchr(in.params, 0, sizeof(in.params)) == nullptr ||
        memchr(in.why, 0, sizeof(in.why)) == nullptr)
      return invalidArgument("%s: schedule, params and why must be NUL-terminated", where.c_str());
    if (in.min_bytes > in.max_bytes)
      return invalidArgument("%s: min_bytes %llu > max_bytes %llu", where.c_str(),
                             static_cast<unsigned long long>(in.min_bytes),
                             static_cast<unsigned long long>(in.max_bytes));
    Decision d;
    d.schedule = in.schedule;
    auto params = schedule::ScheduleParams::parse(in.params);
    if (!params.isOk()) return params.status().withContext(where);
    d.params = params.take();
    d.sliceBytes = in.slice_bytes;
    d.why = in.why[0] ? std::string(in.why) : "policy plugin '" + name_ + "'";
    Status st = table.add(static_cast<schedule::Collective>(in.collective), in.min_bytes, in.max_bytes, std::move(d));
    if (!st.isOk()) return st.withContext(where);
  }
  return table;
}

}  // namespace theseus::policy
