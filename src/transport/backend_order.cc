#include "transport/backend_order.h"

#include <strings.h>

#include <atomic>
#include <mutex>

#include "common/log.h"
#include "bootstrap/bootstrap.h"
#include "transport/netplugin/net_plugin.h"
#include "transport/shm/shm_backend.h"
#include "transport/socket/socket_backend.h"

namespace theseus::transport {
namespace {

// The networks Theseus has, by NCCL's names.
const char* const kNetworks[] = {"Socket"};

// NCCL_NET_PLUGIN: the plugin NCCL would use, loaded, initialised and queried once per process
// (netplugin/net_plugin.h; v6..v10 plugins expect one init()) and kept loaded, as NCCL keeps it.
// Reported once; data still goes over the internal networks. Null: none.
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
    TH_INFO(log::kInit | log::kNet, "%s. Theseus does not move data through NCCL net plugins yet: its internal "
            "Socket network carries the traffic", p.value()->describe().c_str());
    plugin = p.take().release();
  } else if (set && strcasecmp(ctx.config.netPlugin.c_str(), "none") != 0) {
    TH_WARN("NCCL_NET_PLUGIN=%s: no usable net plugin; using Theseus' internal networks",
            ctx.config.netPlugin.c_str());
  }
  return plugin;
}

Status checkNetwork(const BackendContext& ctx) {
  const TransportConfig& config = ctx.config;
  static std::atomic<bool> reportedP2p{false};
  const netplugin::NetPlugin* plugin = queryNetPlugin(ctx);
  if (config.p2pDisable && !reportedP2p.exchange(true))
    TH_INFO(log::kInit | log::kNet, "NCCL_P2P_DISABLE=1 has no effect: Theseus has no GPU peer-to-peer transport yet");
  if (config.net.empty()) return Status::ok();
  for (const char* n : kNetworks)
    if (strcasecmp(config.net.c_str(), n) == 0) return Status::ok();
  if (plugin && strcasecmp(config.net.c_str(), plugin->name().c_str()) == 0)
    return invalidUsage("NCCL_NET/netName '%s' is the network of NCCL net plugin '%s' (%s), and Theseus does not move "
                        "data through NCCL net plugins yet; unset NCCL_NET to use the Socket network",
                        config.net.c_str(), plugin->name().c_str(), plugin->path().c_str());
  std::string available;
  for (const char* n : kNetworks) available += (available.empty() ? "" : ", ") + std::string(n);
  return invalidUsage("NCCL_NET/netName '%s': no such network in Theseus (available: %s)", config.net.c_str(),
                      available.c_str());
}

}  // namespace

Result<std::vector<std::unique_ptr<Backend>>> makeBackends(const BackendContext& ctx,
                                                           const std::vector<std::string>& explicitNames) {
  std::vector<std::unique_ptr<Backend>> out;
  if (!explicitNames.empty()) {
    for (const std::string& name : explicitNames) {
      if (name == "shm") out.push_back(std::make_unique<ShmBackend>(ctx, true));
      else if (name == "socket") out.push_back(std::make_unique<SocketBackend>(ctx));
      else return invalidArgument("transport backend '%s' does not exist (backends: shm, socket)", name.c_str());
    }
    return out;
  }
  TH_CHECK(checkNetwork(ctx));
  out.push_back(std::make_unique<ShmBackend>(ctx, ctx.config.mode == TransportMode::kAuto));
  out.push_back(std::make_unique<SocketBackend>(ctx));
  return out;
}

}  // namespace theseus::transport
