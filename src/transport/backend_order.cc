#include "transport/backend_order.h"

#include <strings.h>

#include <atomic>

#include "common/log.h"
#include "transport/shm/shm_backend.h"
#include "transport/socket/socket_backend.h"

namespace theseus::transport {
namespace {

// The networks Theseus has, by NCCL's names.
const char* const kNetworks[] = {"Socket"};

Status checkNetwork(const TransportConfig& config) {
  static std::atomic<bool> reportedPlugin{false}, reportedP2p{false};
  if (!config.netPlugin.empty() && strcasecmp(config.netPlugin.c_str(), "none") != 0 &&
      !reportedPlugin.exchange(true))
    TH_WARN("NCCL_NET_PLUGIN=%s: Theseus does not load NCCL net plugins yet; using its internal Socket network",
            config.netPlugin.c_str());
  if (config.p2pDisable && !reportedP2p.exchange(true))
    TH_INFO(log::kInit | log::kNet, "NCCL_P2P_DISABLE=1 has no effect: Theseus has no GPU peer-to-peer transport yet");
  if (config.net.empty()) return Status::ok();
  for (const char* n : kNetworks)
    if (strcasecmp(config.net.c_str(), n) == 0) return Status::ok();
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
  TH_CHECK(checkNetwork(ctx.config));
  out.push_back(std::make_unique<ShmBackend>(ctx, ctx.config.mode == TransportMode::kAuto));
  out.push_back(std::make_unique<SocketBackend>(ctx));
  return out;
}

}  // namespace theseus::transport
