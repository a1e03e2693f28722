// NetEndpoint (net_connection.h): what both directions of a net-plugin connection share.
#include <unistd.h>

#include <string>

#include "common/log.h"
#include "device/dmabuf.h"
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

bool netReachesGpu(const NetApi& api, int ptrSupport, int cudaDev) {
  return (ptrSupport & NCCL_PTR_CUDA) != 0 ||
         ((ptrSupport & NCCL_PTR_DMABUF) != 0 && api.hasRegMrDmaBuf() && device::DmaBuf::supported(cudaDev));
}

bool NetEndpoint::gpuMemoryUsable(int cudaDev) const { return netReachesGpu(api_, p_.ptrSupport, cudaDev); }

void NetEndpoint::registerRegion(void* comm, Region& r, const char* direction) {
  if (r.state != RegionState::kPending) return;
  std::string why;
  if ((p_.ptrSupport & NCCL_PTR_DMABUF) != 0 && api_.hasRegMrDmaBuf()) {
    Result<int> fd = device::DmaBuf::exportRange(r.base, r.bytes, r.cudaDev);
    if (fd.isOk()) {
      ncclResult_t rc = api_.regMrDmaBuf(comm, r.base, r.bytes, NCCL_PTR_CUDA, 0, fd.value(), &r.mhandle);
      close(fd.value());
      if (rc == ncclSuccess && r.mhandle != nullptr) {
        r.state = RegionState::kDirect;
        r.how = "dma-buf";
      } else {
        why = "regMrDmaBuf failed (" + std::to_string(static_cast<int>(rc)) + ")" + api_.detail();
        r.mhandle = nullptr;
      }
    } else {
      why = fd.status().message();
    }
  }
  if (r.state == RegionState::kPending && (p_.ptrSupport & NCCL_PTR_CUDA) != 0) {
    ncclResult_t rc = api_.regMr(comm, r.base, r.bytes, NCCL_PTR_CUDA, &r.mhandle);
    if (rc == ncclSuccess && r.mhandle != nullptr) {
      r.state = RegionState::kDirect;
      r.how = "address";
    } else {
      why += std::string(why.empty() ? "" : "; ") + "regMr of CUDA memory failed (" +
             std::to_string(static_cast<int>(rc)) + ")" + api_.detail();
      r.mhandle = nullptr;
    }
  }
  if (r.state == RegionState::kDirect) {
    TH_INFO(log::kNet | log::kReg, "%s: GPUDirect RDMA %s rank %d channel %d: %zu bytes of GPU memory registered "
            "(by %s)", api_.label().c_str(), direction, p_.peer, p_.channel, r.bytes, r.how);
    return;
  }
  r.state = RegionState::kRefused;
  TH_WARN("%s: GPU memory for rank %d channel %d could not be registered (%s); its messages are copied through "
          "host memory", api_.label().c_str(), p_.peer, p_.channel, why.empty() ? "no way offered" : why.c_str());
}

void NetEndpoint::addRegionLocked(void* comm, void* base, size_t bytes, int cudaDev, const char* direction) {
  regions_.push_back(Region{static_cast<char*>(base), bytes, cudaDev});
  if (comm != nullptr) registerRegion(comm, regions_.back(), direction);
}

RegionState NetEndpoint::regionStateOf(const void* base) {
  std::lock_guard lock(mu_);
  for (const Region& r : regions_)
    if (r.base == base) return r.state;
  return RegionState::kRefused;
}

Result<RingMemory> allocNetRing(const NetParams& params) {
  return allocRing(static_cast<size_t>(params.slots) * (params.slotBytes + sizeof(wire::NetMessageHeader)));
}

}  // namespace theseus::transport::netplugin
