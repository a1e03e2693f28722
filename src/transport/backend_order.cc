#include "transport/backend_order.h"

#include <strings.h>

#include <atomic>
#include <mutex>

#include "common/log.h"
#include "bootstrap/bootstrap.h"
#include "transport/netplugin/net_backend.h"
#include "transport/netplugin/net_plugin.h"
#include "transport/shm/shm_backend.h"
#include "transport/socket/socket_backend.h"

namespace theseus::transport {
namespace {

// The networks Theseus has, by NCCL's names.
const char* const kNetworks[] = {"Socket"};

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

// Whether the plugin carries traffic: NCCL_NET unset or naming it. Errors for a NCCL_NET that names
// no network Theseus has.
Result<bool> checkNetwork(const BackendContext& ctx, const netplugin::NetPlugin* plugin) {
  const TransportConfig& config = ctx.config;
  static std::atomic<bool> reportedP2p{false};
  if (config.p2pDisable && !reportedP2p.exchange(true))
    TH_INFO(log::kInit | log::kNet, "NCCL_P2P_DISABLE=1 has no effect: Theseus has no GPU peer-to-peer transport yet");
  if (config.net.empty()) return plugin != nullptr;
  if (plugin && strcasecmp(config.net.c_str(), plugin->name().c_str()) == 0) return true;
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
      } else if (name == "netplugin") {
        const netplugin::NetPlugin* plugin = queryNetPlugin(ctx);
        if (plugin == nullptr) return invalidUsage("transport backend 'netplugin': no NCCL net plugin is loaded");
        out.push_back(std::make_unique<netplugin::NetPluginBackend>(ctx, plugin, true));
      } else {
        return invalidArgument("transport backend '%s' does not exist (backends: shm, netplugin, socket)",
                               name.c_str());
      }
    }
    return out;
  }
  const netplugin::NetPlugin* plugin = queryNetPlugin(ctx);
  TH_ASSIGN(bool usePlugin, checkNetwork(ctx, plugin));
  out.push_back(std::make_unique<ShmBackend>(ctx, ctx.config.mode == TransportMode::kAuto));
  if (wantsPluginBackend(ctx, plugin))
    out.push_back(std::make_unique<netplugin::NetPluginBackend>(ctx, plugin, usePlugin));
  out.push_back(std::make_unique<SocketBackend>(ctx));
  return out;
}

}  // namespace theseus::transport
