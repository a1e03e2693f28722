#include "transport/netplugin/net_backend.h"

#include <algorithm>

#include "common/log.h"
#include "device/cuda_driver.h"
#include "topology/topology.h"
#include "transport/netplugin/nccl_net_abi.h"
#include "transport/netplugin/net_device_choice.h"

namespace theseus::transport::netplugin {

NetPluginBackend::~NetPluginBackend() {
  setNicMove(0);  // this communicator's choice ends with it
  std::lock_guard lock(mu_);
  entries_.clear();  // the connections (destroyed first, by the manager) left the pump
  pump_.reset();
}

Status NetPluginBackend::setUp() {
  std::string mine;
  if (enabled_) mine = plugin_->name() + " v" + std::to_string(plugin_->version());
  std::vector<std::string> all;
  TH_CHECK(ctx_.boot->allGather(mine, &all));
  usable_.assign(static_cast<size_t>(ctx_.nranks), false);
  std::string others;
  for (int r = 0; r < ctx_.nranks && r < static_cast<int>(all.size()); ++r) {
    usable_[static_cast<size_t>(r)] = enabled_ && r != ctx_.rank && all[static_cast<size_t>(r)] == mine;
    if (enabled_ && r != ctx_.rank && all[static_cast<size_t>(r)] != mine && others.empty())
      others = "rank " + std::to_string(r) + " has " +
               (all[static_cast<size_t>(r)].empty() ? std::string("none") : "'" + all[static_cast<size_t>(r)] + "'");
  }
  if (!others.empty())
    TH_WARN("%s '%s': not every rank has it (%s); those pairs use the next network",
            plugin_->builtIn() ? "network" : "NCCL net plugin", mine.c_str(), others.c_str());
  if (enabled_) {
    const auto& peers = ctx_.boot->peers();
    const int cudaDev = ctx_.rank < static_cast<int>(peers.size()) ? peers[static_cast<size_t>(ctx_.rank)].cudaDev : -1;
    // The topology is read only when a GPU can use it (hwloc's discovery costs milliseconds).
    const topology::Topology* topo = cudaDev >= 0 ? topology::Topology::forThisHost() : nullptr;
    choice_ = chooseNetDevice(topo, cudaDev, plugin_->devices(), ctx_.boot->localRank());
    device_ = choice_.device;
  }
  return Status::ok();
}

bool NetPluginBackend::canConnect(int peer) const {
  return peer >= 0 && peer < static_cast<int>(usable_.size()) && usable_[static_cast<size_t>(peer)];
}

void NetPluginBackend::assigned(const std::vector<bool>& mine) {
  peers_ = static_cast<int>(std::count(mine.begin(), mine.end(), true));
  if (peers_ == 0) return;
  // GPUDirect RDMA: only where the device takes GPU memory; then the GPU-NIC distance decides.
  std::string gdr;
  if ((plugin_->devices()[static_cast<size_t>(device_)].ptrSupport & (NCCL_PTR_CUDA | NCCL_PTR_DMABUF)) != 0 &&
      choice_.path >= 0 && !gdrWithin(choice_, ctx_.config.netGdrLevel)) {
    gdr = std::string(", no GPUDirect RDMA: the path to the GPU is ") +
          topology::pathName(static_cast<topology::Path>(choice_.path)) + ", beyond NCCL_NET_GDR_LEVEL=" +
          gdrLevelName(ctx_.config.netGdrLevel);
  }
  TH_INFO(log::kInit | log::kNet, "rank %d: %d peer(s) through %s '%s' device %d (%s; %s)%s%s", ctx_.rank, peers_,
          plugin_->builtIn() ? "network" : "NCCL net plugin", plugin_->name().c_str(), device_,
          plugin_->devices()[static_cast<size_t>(device_)].describe().c_str(), choice_.why.c_str(),
          choice_.cpus.empty()
              ? ""
              : (", progress thread on the NIC's " + std::to_string(choice_.cpus.size()) + " NUMA-local CPU(s)").c_str(),
          gdr.c_str());
}

NetParams NetPluginBackend::paramsFor(int peer, int channel) const {
  NetParams p;
  p.rank = ctx_.rank;
  p.peer = peer;
  p.channel = channel;
  p.device = device_;
  p.slots = std::min<uint32_t>(kMaxNetSlots, std::max<uint32_t>(2, ctx_.config.socketSlots));
  p.slotBytes = std::min(ctx_.config.socketSlotBytes,
                         plugin_->api().maxMessageBytes() - sizeof(wire::NetMessageHeader));
  p.timeoutMs = ctx_.connectTimeoutMs;
  if (device_ >= 0 && device_ < static_cast<int>(plugin_->devices().size()))
    p.ptrSupport = plugin_->devices()[device_].ptrSupport & (ctx_.config.dmaBufEnable ? ~0 : ~NCCL_PTR_DMABUF) &
                   (gdrWithin(choice_, ctx_.config.netGdrLevel) ? ~0 : ~(NCCL_PTR_CUDA | NCCL_PTR_DMABUF));
  return p;
}

// GPUDirect RDMA receives for a device FIFO proxy's connection: where the network registers the
// GPU's memory (within NCCL_NET_GDR_LEVEL: paramsFor's pointer support), payloads land in the
// FIFO's slots in GPU memory. Flushed as NVIDIA's library does: always where the network's
// properties or NCCL_NET_FORCE_FLUSH say so, else on GPUs before compute capability 9.0 (whose
// PCIe writes may pass the CPU's later flag store), and an unknown one counts as such.
void NetPluginBackend::gdrReceives(NetParams* p) const {
  const NetApi& api = plugin_->api();
  if (!netReachesGpu(api, p->ptrSupport, ctx_.gdrDevice)) return;
  const NetDevice& dev = plugin_->devices()[static_cast<size_t>(device_)];
  const device::CudaDriver* cuda = device::CudaDriver::get();
  const int cc = cuda != nullptr ? cuda->computeCapability(ctx_.gdrDevice) : -1;
  const bool flush = dev.forceFlush || ctx_.config.netForceFlush || cc < 90;
  if (flush && !api.hasIflush()) {
    TH_INFO(log::kNet, "%s: receives from rank %d stay in host memory: GPUDirect RDMA receives need a flush here "
            "and the plugin has no iflush", api.label().c_str(), p->peer);
    return;
  }
  p->gdrRecvDevice = ctx_.gdrDevice;
  p->gdrFlush = flush;
  p->gdrFailures = ctx_.failures;
  if (!gdrLogged_.exchange(true))
    TH_INFO(log::kNet, "rank %d: GPUDirect RDMA receives into GPU %d's memory, %s", ctx_.rank, ctx_.gdrDevice,
            !flush                     ? "not flushed (compute capability 9.0 or later)"
            : dev.forceFlush           ? "each flushed (the network's properties ask for it)"
            : ctx_.config.netForceFlush ? "each flushed (NCCL_NET_FORCE_FLUSH=1)"
                                       : "each flushed (a GPU before compute capability 9.0)");
}

NetPump* NetPluginBackend::pump() {
  if (pump_ == nullptr) pump_ = std::make_unique<NetPump>(ctx_.wake, ctx_.wakeCtx, choice_.cpus);
  return pump_.get();
}

Result<std::unique_ptr<SendConnection>> NetPluginBackend::connectSend(int peer, int channel,
                                                                      ConnectionCounters* counters) {
  if (!canConnect(peer)) return internalError("net plugin backend asked to connect rank %d", peer);
  std::lock_guard lock(mu_);
  NetParams p = paramsFor(peer, channel);
  p.proxied = channel >= ctx_.channels;
  p.failures = ctx_.failures;  // a send may fail on the pump thread after its plan moved on
  if (ctx_.config.netZeroCopy > 0 || (ctx_.config.netZeroCopy < 0 && kind_ == Kind::kIb))
    p.userBuffers = ctx_.userBuffers;
  TH_ASSIGN(NetSendHandle h, makeNetSend(plugin_->api(), *ctx_.boot, p, ctx_.abort, counters, pump()));
  entries_.push_back({h.client, peer, channel, false});
  memoryBytes_.fetch_add(static_cast<uint64_t>(p.slots) * (p.slotBytes + sizeof(wire::NetMessageHeader)));
  return std::move(h.connection);
}

Result<std::unique_ptr<RecvConnection>> NetPluginBackend::connectRecv(int peer, int channel,
                                                                      ConnectionCounters* counters) {
  if (!canConnect(peer)) return internalError("net plugin backend asked to connect rank %d", peer);
  std::lock_guard lock(mu_);
  NetParams p = paramsFor(peer, channel);
  p.proxied = channel >= ctx_.channels;
  if (p.proxied && ctx_.gdrDevice >= 0) gdrReceives(&p);
  TH_ASSIGN(NetRecvHandle h, makeNetRecv(plugin_->api(), *ctx_.boot, p, ctx_.abort, counters, pump()));
  entries_.push_back({h.client, peer, channel, true});
  memoryBytes_.fetch_add(static_cast<uint64_t>(p.slots) * (p.slotBytes + sizeof(wire::NetMessageHeader)));
  return std::move(h.connection);
}

std::string NetPluginBackend::pendingReceives(const std::vector<int>& peers, int channels) {
  std::lock_guard lock(mu_);
  std::string out;
  for (const Entry& e : entries_) {
    if (!e.receive || e.channel >= channels || !e.client->settingUp()) continue;
    if (std::find(peers.begin(), peers.end(), e.peer) == peers.end()) continue;
    out += (out.empty() ? "" : ", ") + std::string("rank ") + std::to_string(e.peer) + " channel " +
           std::to_string(e.channel) + (plugin_->builtIn() ? " (" + plugin_->name() + ")" : " (net plugin)");
  }
  return out;
}

void NetPluginBackend::setUpAttributes(std::vector<std::pair<std::string, double>>* out) const {
  if (peers_ == 0) return;
  const std::string me = "rank." + std::to_string(ctx_.rank) + ".";
  out->emplace_back(me + "net_device", device_);
  if (choice_.rail >= 0) out->emplace_back(me + "rail", choice_.rail);
  if (choice_.numa >= 0) out->emplace_back(me + "nic_numa", choice_.numa);
}

void NetPluginBackend::liveAttributes(std::vector<std::pair<std::string, double>>* out) const {
  if (peers_ == 0 || probe_ == nullptr) return;
  probe_(device_, "rank." + std::to_string(ctx_.rank) + ".", out);
}

void NetPluginBackend::forgetUserBuffer(uint64_t id) {
  std::lock_guard lock(mu_);
  for (const Entry& e : entries_)
    if (!e.receive) e.client->forgetUserBuffer(id);
}

void NetPluginBackend::setNicMove(int move) {
  if (move == nicMove_ || peers_ == 0) return;
  if (move_ == nullptr) {
    if (move != 0)
      TH_INFO(log::kNet, "rank %d: the policy asks to move traffic off net device %d, which network '%s' cannot do",
              ctx_.rank, device_, plugin_->name().c_str());
    nicMove_ = move;
    return;
  }
  const char* what = move == 0   ? "lets traffic back onto"
                     : move == 1 ? "moves traffic to another NIC off"
                                 : "moves traffic to another NIC or TCP off";
  TH_INFO(log::kNet, "rank %d: the policy %s net device %d", ctx_.rank, what, device_);
  move_(device_, nicMove_, move);
  nicMove_ = move;
}

std::string NetPluginBackend::summary() const {
  if (peers_ == 0) return "";
  if (plugin_->builtIn()) return std::to_string(peers_) + " over " + plugin_->name();
  return std::to_string(peers_) + " over NCCL net plugin '" + plugin_->name() + "'";
}

}  // namespace theseus::transport::netplugin
