#include "transport/netplugin/net_device_choice.h"

namespace theseus::transport::netplugin {
namespace {

bool matches(const topology::Nic& nic, const NetDevice& dev) {
  if (!dev.name.empty() && nic.knows(dev.name)) return true;
  const std::string& p = dev.pciPath;
  return !nic.busId.empty() && p.size() >= nic.busId.size() &&
         p.compare(p.size() - nic.busId.size(), nic.busId.size(), nic.busId) == 0;
}

}  // namespace

bool gdrWithin(const DeviceChoice& c, int level) {
  if (level <= 0) return false;
  return c.path < 0 || c.path + 1 <= level;  // Path: kPix 0 .. kSys 3; levels: PIX 1 .. SYS 4
}

DeviceChoice chooseNetDevice(const topology::Topology* topo, int cudaDev, const std::vector<NetDevice>& devices,
                             int localRank) {
  DeviceChoice c;
  const int n = static_cast<int>(devices.size());
  c.device = n > 0 ? localRank % n : 0;
  c.why = "local rank " + std::to_string(localRank) + " of " + std::to_string(n) + " device(s)";
  if (topo == nullptr) {
    c.why += ": the topology is unknown";
    return c;
  }
  if (cudaDev < 0) {
    c.why += ": no GPU";
    return c;
  }
  const int gpu = topo->gpuIndex(cudaDev);
  const int nic = gpu >= 0 ? topo->nicFor(static_cast<size_t>(gpu)) : -1;
  if (nic < 0) {
    c.why += gpu < 0 ? ": GPU " + std::to_string(cudaDev) + " is not in the topology" : ": the topology has no NIC";
    return c;
  }
  const topology::Nic& chosen = topo->nics()[static_cast<size_t>(nic)];
  for (int d = 0; d < n; ++d) {
    if (!matches(chosen, devices[static_cast<size_t>(d)])) continue;
    c.device = d;
    c.cpus = topo->numaCpus(chosen.numa);
    c.rail = nic;
    c.numa = chosen.numa;
    const topology::Path path = topo->path(static_cast<size_t>(gpu), static_cast<size_t>(nic));
    c.path = static_cast<int>(path);
    c.why = "closest to GPU " + std::to_string(cudaDev) + " (" + topology::pathName(path) + "): " + chosen.name;
    return c;
  }
  c.why += ": the plugin has no device for NIC " + chosen.name + " (" + chosen.busId + ")";
  return c;
}

}  // namespace theseus::transport::netplugin
