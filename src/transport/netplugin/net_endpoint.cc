// NetEndpoint (net_connection.h): what both directions of a net-plugin connection share.
#include <string>

#include "common/log.h"
#include "transport/netplugin/nccl_net_abi.h"
#include "transport/netplugin/net_connection.h"

namespace theseus::transport::netplugin {

void NetEndpoint::fail(Status s) {
  if (!error_.isOk()) return;
  error_ = std::move(s);
  failed_.store(true, std::memory_order_release);
  TH_WARN("%s", error_.message().c_str());
  if (p_.failures != nullptr) p_.failures->report(error_);
}

Status NetEndpoint::pluginError(const char* call, const char* direction, ncclResult_t r) const {
  return remoteError("%s: %s %s rank %d channel %d failed with %d (%s)%s", api_.label().c_str(), call, direction,
                     p_.peer, p_.channel, static_cast<int>(r), resultName(r), api_.detail().c_str());
}

bool NetEndpoint::registerRing(void* comm, void** mhandle, const char* direction) {
  ncclResult_t r = api_.regMr(comm, ring_.get(), ringBytes(), NCCL_PTR_HOST, mhandle);
  if (r != ncclSuccess) {
    fail(pluginError("regMr", direction, r));
    return false;
  }
  connected_.store(true, std::memory_order_release);
  TH_INFO(log::kNet, "rank %d %s rank %d channel %d: connected through %s (device %d)", p_.rank,
          std::string(direction) == "to" ? "->" : "<-", p_.peer, p_.channel, api_.label().c_str(), p_.device);
  return true;
}

Result<RingMemory> allocNetRing(const NetParams& params) {
  return allocRing(static_cast<size_t>(params.slots) * (params.slotBytes + sizeof(wire::NetMessageHeader)));
}

}  // namespace theseus::transport::netplugin
