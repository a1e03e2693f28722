#include "transport/backend_order.h"

#include <strings.h>

#include <atomic>
#include <mutex>

#include "common/log.h"
#include "bootstrap/bootstrap.h"
#include "transport/ib/ib_devices.h"
#include "transport/ib/ib_net.h"
#include "transport/ib/ib_settings.h"
#include "transport/netplugin/net_backend.h"
#include "transport/netplugin/net_plugin.h"
#include "transport/shm/shm_backend.h"
#include "transport/socket/socket_backend.h"

namespace theseus::transport {
namespace {

// The networks Theseus has, by NCCL's names.
const char* const kNetworks[] = {"IB", "Socket"};

// NCCL_NET_PLUGIN: the plugin NCCL would use, loaded, initialised and queried once per process
// (netplugin/net_plugin.h; v6..v10 plugins expect one init()) and kept loaded, as NCCL keeps it.
// Reported once. Null: none.
const netplugin::NetPlugin* queryNetPlugin(const BackendContext& ctx) {
  static std::mutex mu;
  static bool done = false;
  static const netplugin::NetPlugin* plugin = nullptr;  // never unloaded
  std::lock_guard<std::mutex> lock(mu);
  if (done) return plugin;
  done = true;
  const bool set = !ctx.config.netPlugin.empty();
  std::vector<std::string> skipped;
  auto p = netplugin::NetPlugin::loadList(ctx.config.netPlugin, set, ctx.boot ? ctx.boot->commHash() : 0, &skipped);
  if (!p.isOk()) {
    TH_WARN("%s; using Theseus' internal networks", p.status().message().c_str());
    return nullptr;
  }
  for (const std::string& why : skipped) TH_WARN("NCCL_NET_PLUGIN: %s; skipped", why.c_str());
  if (p.value()) {
    TH_INFO(log::kInit | log::kNet, "%s", p.value()->describe().c_str());
    plugin = p.take().release();
  } else if (set && strcasecmp(ctx.config.netPlugin.c_str(), "none") != 0) {
    TH_WARN("NCCL_NET_PLUGIN=%s: no usable net plugin; using Theseus' internal networks",
            ctx.config.netPlugin.c_str());
  }
  return plugin;
}

// Theseus' IB network (ib/ib_net.h), started once per process when verbs devices are there.
// Null: none (the reason is logged once at INFO).
const netplugin::NetPlugin* queryIbNetwork(const BackendContext& ctx) {
  static std::mutex mu;
  static bool done = false;
  static const netplugin::NetPlugin* network = nullptr;  // never unloaded
  std::lock_guard<std::mutex> lock(mu);
  if (done) return network;
  done = true;
  const ib::IbDevices& devices = ib::IbDevices::get();
  if (devices.devices().empty()) {
    TH_INFO(log::kInit | log::kNet, "IB: not used: %s", devices.why().c_str());
    return nullptr;
  }
  auto n = netplugin::NetPlugin::internal(ib::ibNet(), ib::kIbNetVersion, "built in, " + devices.verbs()->path,
                                          ctx.boot ? ctx.boot->commHash() : 0, ib::ibLastError);
  if (!n.isOk()) {
    TH_WARN("%s; the IB network is not used", n.status().message().c_str());
    return nullptr;
  }
  TH_INFO(log::kInit | log::kNet, "%s", n.value()->describe().c_str());
  network = n.take().release();
  return network;
}

// rank.<r>.net_up (1 while the port is active, 0 once it went down) and rank.<r>.net_errors (the
// asynchronous errors the HCA reported: fatal QP and CQ errors) and rank.<r>.net_failovers (its
// connections that moved to TCP), rank.<r>.net_away (its connections carried by another HCA now),
// rank.<r>.net_rate_gbps (the port's link rate now) and rank.<r>.net_moved (the policy's NIC choice
// in effect for the port: 0 stay, 1 another NIC, 2 another NIC or TCP) for the IB device a rank uses.
void ibDeviceProbe(int device, const std::string& prefix, std::vector<std::pair<std::string, double>>* out) {
  const auto& devices = ib::IbDevices::get().devices();
  if (device < 0 || device >= static_cast<int>(devices.size())) return;
  const ib::IbDevice* d = devices[static_cast<size_t>(device)];
  out->emplace_back(prefix + "net_up", d->up.load() ? 1.0 : 0.0);
  out->emplace_back(prefix + "net_errors", static_cast<double>(d->asyncErrors.load()));
  out->emplace_back(prefix + "net_failovers", static_cast<double>(d->failovers.load()));
  out->emplace_back(prefix + "net_away", static_cast<double>(d->away.load()));
  out->emplace_back(prefix + "net_rate_gbps", d->rateMbps.load() / 1000.0);
  out->emplace_back(prefix + "net_moved", static_cast<double>(d->policyMove()));
}

// A policy's NIC choice for the rank's IB port: one vote per communicator (IbDevice::moveVotes).
void ibDeviceMove(int device, int from, int to) {
  const auto& devices = ib::IbDevices::get().devices();
  if (device < 0 || device >= static_cast<int>(devices.size())) return;
  ib::IbDevice* d = devices[static_cast<size_t>(device)];
  if (from > 0 && from <= 2) d->moveVotes[from].fetch_sub(1);
  if (to > 0 && to <= 2) d->moveVotes[to].fetch_add(1);
}

// The IB backend exists on every rank unless IB is off by configuration (NCCL_IB_DISABLE=1, or
// THESEUS_TRANSPORT=socket): then no rank makes it (the configuration is the same everywhere).
bool wantsIbBackend(const BackendContext& ctx) {
  return !ib::IbSettings::get().disable && !ctx.config.socketOnly;
}

// Whether the plugin carries traffic: NCCL_NET unset or naming it. Errors for a NCCL_NET that names
// no network Theseus has.
Result<bool> checkNetwork(const BackendContext& ctx, const netplugin::NetPlugin* plugin) {
  const TransportConfig& config = ctx.config;
  if (config.net.empty()) return plugin != nullptr;
  if (plugin && strcasecmp(config.net.c_str(), plugin->name().c_str()) == 0) return true;
  if (strcasecmp(config.net.c_str(), "IB") == 0) {
    if (!wantsIbBackend(ctx) || queryIbNetwork(ctx) == nullptr)
      return invalidUsage("NCCL_NET/netName 'IB': the IB network is not available here (%s)",
                          !wantsIbBackend(ctx) ? "NCCL_IB_DISABLE=1 or THESEUS_TRANSPORT=socket"
                                               : ib::IbDevices::get().why().c_str());
    return false;
  }
  for (const char* n : kNetworks)
    if (strcasecmp(config.net.c_str(), n) == 0) return false;
  std::string available;
  if (plugin) available = plugin->name() + " (NCCL net plugin " + plugin->path() + ")";
  for (const char* n : kNetworks) available += (available.empty() ? "" : ", ") + std::string(n);
  return invalidUsage("NCCL_NET/netName '%s': no such network in Theseus (available: %s)", config.net.c_str(),
                      available.c_str());
}

// Every rank must make the same backends (their set-up rounds line up): the plugin backend
// exists where NCCL_NET_PLUGIN is set (not "none") or a default libnccl-net.so loaded.
bool wantsPluginBackend(const BackendContext& ctx, const netplugin::NetPlugin* plugin) {
  if (plugin != nullptr) return true;
  return !ctx.config.netPlugin.empty() && strcasecmp(ctx.config.netPlugin.c_str(), "none") != 0;
}

}  // namespace

Result<std::vector<std::unique_ptr<Backend>>> makeBackends(const BackendContext& ctx,
                                                           const std::vector<std::string>& explicitNames) {
  std::vector<std::unique_ptr<Backend>> out;
  if (!explicitNames.empty()) {
    for (const std::string& name : explicitNames) {
      if (name == "shm") {
        out.push_back(std::make_unique<ShmBackend>(ctx, true));
      } else if (name == "socket") {
        out.push_back(std::make_unique<SocketBackend>(ctx));
      } else if (name == "ib") {
        const netplugin::NetPlugin* network = queryIbNetwork(ctx);
        if (network == nullptr)
          return invalidUsage("transport backend 'ib': the IB network is not available (%s)",
                              ib::IbDevices::get().why().c_str());
        out.push_back(std::make_unique<netplugin::NetPluginBackend>(ctx, network, true, Kind::kIb, ibDeviceProbe,
                                                                    ibDeviceMove));
      } else if (name == "netplugin") {
        const netplugin::NetPlugin* plugin = queryNetPlugin(ctx);
        if (plugin == nullptr) return invalidUsage("transport backend 'netplugin': no NCCL net plugin is loaded");
        out.push_back(std::make_unique<netplugin::NetPluginBackend>(ctx, plugin, true));
      } else {
        return invalidArgument("transport backend '%s' does not exist (backends: shm, netplugin, ib, socket)",
                               name.c_str());
      }
    }
    return out;
  }
  const TransportConfig& config = ctx.config;
  const netplugin::NetPlugin* plugin = queryNetPlugin(ctx);
  TH_ASSIGN(bool usePlugin, checkNetwork(ctx, plugin));
  out.push_back(std::make_unique<ShmBackend>(ctx, ctx.config.mode == TransportMode::kAuto));
  if (wantsPluginBackend(ctx, plugin))
    out.push_back(std::make_unique<netplugin::NetPluginBackend>(ctx, plugin, usePlugin));
  if (wantsIbBackend(ctx)) {
    // Used when NCCL_NET is unset (after a plugin) or names IB.
    const bool useIb = config.net.empty() || strcasecmp(config.net.c_str(), "IB") == 0;
    const netplugin::NetPlugin* network = useIb ? queryIbNetwork(ctx) : nullptr;
    out.push_back(std::make_unique<netplugin::NetPluginBackend>(ctx, network, network != nullptr, Kind::kIb,
                                                                ibDeviceProbe, ibDeviceMove));
  }
  out.push_back(std::make_unique<SocketBackend>(ctx));
  return out;
}

}  // namespace theseus::transport
