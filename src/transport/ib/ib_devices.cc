#include "transport/ib/ib_devices.h"

#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <thread>

#include "common/deadline.h"
#include "common/log.h"
#include "transport/ib/ib_hca_filter.h"
#include "transport/ib/ib_settings.h"

namespace theseus::transport::ib {
namespace {

// Whether the provider registers dma-bufs: rdma-core answers a registration of
// no descriptor with EOPNOTSUPP (or EPROTONOSUPPORT) when the provider has no
// dma-buf support, and with another error (EBADF) when it has.
bool providerTakesDmaBufs(const IbVerbs* verbs, ibv_pd* pd) {
  if (verbs->regDmaBufMr == nullptr || pd == nullptr) return false;
  errno = 0;
  ibv_mr* mr = verbs->regDmaBufMr(pd, 0, 0, 0, -1, 0);
  if (mr != nullptr) {
    verbs->deregMr(mr);
    return true;
  }
  return errno != EOPNOTSUPP && errno != EPROTONOSUPPORT;
}

// nvidia-peermem (or the older nv_peer_mem) lets ibv_reg_mr take GPU addresses.
bool peerMemoryLoaded() {
  for (const char* path : {"/sys/kernel/mm/memory_peers/nv_mem/version", "/sys/module/nvidia_peermem/version",
                           "/sys/module/nv_peer_mem/version"})
    if (access(path, F_OK) == 0) return true;
  return false;
}

bool zeroGid(const ibv_gid& g) {
  for (unsigned char b : g.raw)
    if (b != 0) return false;
  return true;
}

bool ipv4Mapped(const ibv_gid& g) {
  for (int i = 0; i < 10; ++i)
    if (g.raw[i] != 0) return false;
  return g.raw[10] == 0xff && g.raw[11] == 0xff;
}

// The GID index a RoCE port uses (see the header).
int chooseRoceGid(const IbVerbs* v, ibv_context* ctx, int port, int tableLen, const IbSettings& s) {
  if (s.gidIndex >= 0) return s.gidIndex;
  const uint32_t wanted = s.roceVersion == 1 ? IBV_GID_TYPE_ROCE_V1 : IBV_GID_TYPE_ROCE_V2;
  int firstNonZero = -1;
  for (int i = 0; i < tableLen && i < 256; ++i) {
    ibv_gid gid{};
    if (v->queryGid(ctx, static_cast<uint8_t>(port), i, &gid) != 0 || zeroGid(gid)) continue;
    if (firstNonZero < 0) firstNonZero = i;
    if (v->queryGidEx == nullptr) continue;
    ibv_gid_entry entry{};
    if (v->queryGidEx(ctx, static_cast<uint32_t>(port), static_cast<uint32_t>(i), &entry, 0, sizeof(entry)) != 0)
      continue;
    if (entry.gid_type != wanted) continue;
    if ((s.addrFamily == AF_INET) == ipv4Mapped(gid)) return i;
  }
  return firstNonZero >= 0 ? firstNonZero : 0;
}

const char* eventName(const IbVerbs* v, ibv_event_type t) {
  const char* s = v->eventTypeStr != nullptr ? v->eventTypeStr(t) : nullptr;
  return s != nullptr ? s : "unknown event";
}

constexpr uint64_t kRateCheckNs = 500 * 1000000ull;

// The port's link rate now; a change is logged (a rate below the one at discovery at WARN: the link
// trained down, and its traffic moves only if a policy asks).
void checkRate(const IbVerbs* v, IbDevice* d) {
  ibv_port_attr a{};
  if (v->queryPort(d->context, static_cast<uint8_t>(d->port), &a) != 0 || a.state != IBV_PORT_ACTIVE) return;
  const int rate = ibPortSpeedMbps(a.active_speed, a.active_width);
  const int before = d->rateMbps.exchange(rate);
  if (rate == before) return;
  if (rate < d->speedMbps)
    TH_WARN("IB: %s:%d runs at %d Mb/s, below its %d Mb/s at start (a degraded link)", d->name.c_str(), d->port, rate,
            d->speedMbps);
  else
    TH_INFO(log::kNet, "IB: %s:%d runs at %d Mb/s", d->name.c_str(), d->port, rate);
}

// Reads the asynchronous events of every context (see the header) until the process exits, and
// queries the ports' link rates every kRateCheckNs.
void monitor(const IbVerbs* v, std::vector<IbDevice*> devices) {
  std::vector<ibv_context*> contexts;
  for (IbDevice* d : devices)
    if (std::find(contexts.begin(), contexts.end(), d->context) == contexts.end()) contexts.push_back(d->context);
  std::vector<pollfd> fds;
  for (ibv_context* c : contexts) {
    fcntl(c->async_fd, F_SETFL, fcntl(c->async_fd, F_GETFL) | O_NONBLOCK);
    fds.push_back(pollfd{c->async_fd, POLLIN, 0});
  }
  uint64_t nextRateCheck = 0;
  for (;;) {
    if (const uint64_t now = nowNs(); now >= nextRateCheck) {
      nextRateCheck = now + kRateCheckNs;
      for (IbDevice* d : devices) checkRate(v, d);
    }
    if (poll(fds.data(), fds.size(), static_cast<int>(kRateCheckNs / 1000000)) <= 0) continue;
    for (size_t i = 0; i < fds.size(); ++i) {
      if ((fds[i].revents & POLLIN) == 0) continue;
      ibv_async_event ev{};
      while (v->getAsyncEvent(contexts[i], &ev) == 0) {
        for (IbDevice* d : devices) {
          if (d->context != contexts[i]) continue;
          const bool portEvent = ev.event_type == IBV_EVENT_PORT_ERR || ev.event_type == IBV_EVENT_PORT_ACTIVE;
          if (portEvent && ev.element.port_num != d->port) continue;
          if (ev.event_type == IBV_EVENT_PORT_ERR) {
            d->downEvents.fetch_add(1);
            d->up.store(false);
            TH_WARN("IB: %s:%d is down (%s); its connections fail and traffic moves to the next network",
                    d->name.c_str(), d->port, eventName(v, ev.event_type));
          } else if (ev.event_type == IBV_EVENT_PORT_ACTIVE) {
            d->up.store(true);
            TH_INFO(log::kNet, "IB: %s:%d is active again", d->name.c_str(), d->port);
          } else if (ev.event_type == IBV_EVENT_CQ_ERR || ev.event_type == IBV_EVENT_QP_FATAL ||
                     ev.event_type == IBV_EVENT_QP_REQ_ERR || ev.event_type == IBV_EVENT_QP_ACCESS_ERR ||
                     ev.event_type == IBV_EVENT_DEVICE_FATAL) {
            d->asyncErrors.fetch_add(1);
            TH_WARN("IB: %s:%d: asynchronous error: %s", d->name.c_str(), d->port, eventName(v, ev.event_type));
          }
          if (portEvent) break;
        }
        v->ackAsyncEvent(&ev);
      }
    }
  }
}

}  // namespace

int ibPortSpeedMbps(int activeSpeed, int activeWidth) {
  static const int kLaneMbps[] = {2500, 5000, 10000, 10000, 14000, 25000, 50000, 100000, 200000};
  static const int kLanes[] = {1, 4, 8, 12, 2};
  int s = 0, w = 0;
  while (s < 8 && (activeSpeed & (1 << s)) == 0) ++s;
  while (w < 4 && (activeWidth & (1 << w)) == 0) ++w;
  return kLaneMbps[s] * kLanes[w];
}

std::string IbDevice::describe() const {
  char buf[200];
  snprintf(buf, sizeof(buf), "%s:%d (%s, %s %d, %d Mb/s%s%s)", name.c_str(), port, roce ? "RoCE" : "IB",
           roce ? "GID index" : "LID", roce ? gidIndex : lid, speedMbps, dmaBuf ? ", dma-buf" : "",
           peerMemory ? ", peer memory" : "");
  return buf;
}

const IbDevices& IbDevices::get() {
  static IbDevices* devices = [] {
    auto* d = new IbDevices();
    d->discover();
    return d;
  }();
  return *devices;
}

void IbDevices::discover() {
  const IbSettings& s = IbSettings::get();
  if (s.disable) {
    why_ = "NCCL_IB_DISABLE=1";
    return;
  }
  auto v = IbVerbs::get();
  if (!v.isOk()) {
    why_ = v.status().message();
    return;
  }
  verbs_ = v.value();
  const HcaFilter filter = HcaFilter::parse(s.hca);
  const bool peerMemory = peerMemoryLoaded();  // the host's, for every port
  int n = 0;
  ibv_device** list = verbs_->getDeviceList(&n);
  if (list == nullptr || n == 0) {
    why_ = "no verbs devices (" + verbs_->path + ")";
    if (list != nullptr) verbs_->freeDeviceList(list);
    return;
  }
  for (int i = 0; i < n; ++i) {
    const char* rawName = verbs_->getDeviceName(list[i]);
    const std::string name = rawName != nullptr ? rawName : "?";
    ibv_context* ctx = verbs_->openDevice(list[i]);
    if (ctx == nullptr) {
      TH_WARN("IB: cannot open %s: %s", name.c_str(), strerror(errno));
      continue;
    }
    ibv_device_attr dattr{};
    if (verbs_->queryDevice(ctx, &dattr) != 0) {
      TH_WARN("IB: ibv_query_device(%s) failed: %s", name.c_str(), strerror(errno));
      verbs_->closeDevice(ctx);
      continue;
    }
    char real[PATH_MAX];
    std::string pci;
    if (realpath((std::string(list[i]->ibdev_path) + "/device").c_str(), real) != nullptr) pci = real;
    ibv_pd* pd = nullptr;
    MrCache* mrs = nullptr;
    for (int port = 1; port <= dattr.phys_port_cnt; ++port) {
      ibv_port_attr pattr{};
      if (verbs_->queryPort(ctx, static_cast<uint8_t>(port), &pattr) != 0) continue;
      if (pattr.state != IBV_PORT_ACTIVE) {
        TH_INFO(log::kInit | log::kNet, "IB: %s:%d is not active; not used", name.c_str(), port);
        continue;
      }
      if (pattr.link_layer != IBV_LINK_LAYER_INFINIBAND && pattr.link_layer != IBV_LINK_LAYER_ETHERNET) continue;
      if (!filter.allows(name, port)) {
        TH_INFO(log::kInit | log::kNet, "IB: %s:%d left out by NCCL_IB_HCA=%s", name.c_str(), port, s.hca.c_str());
        continue;
      }
      if (pd == nullptr) {
        pd = verbs_->allocPd(ctx);
        if (pd == nullptr) {
          TH_WARN("IB: ibv_alloc_pd(%s) failed: %s", name.c_str(), strerror(errno));
          break;
        }
        mrs = new MrCache(verbs_, pd);
      }
      auto* d = new IbDevice();
      d->name = name;
      d->port = port;
      d->context = ctx;
      d->pd = pd;
      d->mrs = mrs;
      d->roce = pattr.link_layer == IBV_LINK_LAYER_ETHERNET;
      d->lid = pattr.lid;
      d->mtu = pattr.active_mtu;
      d->guid = dattr.node_guid;
      d->pciPath = pci;
      d->speedMbps = ibPortSpeedMbps(pattr.active_speed, pattr.active_width);
      d->rateMbps.store(d->speedMbps);
      d->maxQpWr = dattr.max_qp_wr;
      d->dmaBuf = providerTakesDmaBufs(verbs_, pd);
      d->peerMemory = peerMemory;
      d->gidIndex = d->roce ? chooseRoceGid(verbs_, ctx, port, pattr.gid_tbl_len, s) : std::max(s.gidIndex, 0);
      if (verbs_->queryGid(ctx, static_cast<uint8_t>(port), d->gidIndex, &d->gid) != 0) {
        TH_WARN("IB: %s:%d: GID index %d cannot be read: %s; port not used", name.c_str(), port, d->gidIndex,
                strerror(errno));
        delete d;
        continue;
      }
      if (!d->roce && d->lid == 0 && s.gidIndex < 0) {
        TH_WARN("IB: %s:%d has no LID (subnet manager not running?); port not used", name.c_str(), port);
        delete d;
        continue;
      }
      TH_INFO(log::kInit | log::kNet, "IB: network device %zu: %s", devices_.size(), d->describe().c_str());
      devices_.push_back(d);
    }
    if (pd == nullptr) verbs_->closeDevice(ctx);  // nothing of it is used
  }
  verbs_->freeDeviceList(list);
  if (devices_.empty()) {
    why_ = "no active port" + std::string(s.hca.empty() ? "" : " that NCCL_IB_HCA=" + s.hca + " allows");
    return;
  }
  std::thread(monitor, verbs_, devices_).detach();
}

}  // namespace theseus::transport::ib
