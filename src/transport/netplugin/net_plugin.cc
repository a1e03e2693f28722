#include "transport/netplugin/net_plugin.h"

#include <cstring>

#include "common/log.h"
#include "common/nccl_plugins.h"
#include "transport/netplugin/nccl_net_abi.h"

namespace theseus::transport::netplugin {
namespace {

const char* const kKnown[] = {"ncclNetPlugin_v12", "ncclNetPlugin_v11", "ncclNetPlugin_v10", "ncclNetPlugin_v9",
                              "ncclNetPlugin_v8",  "ncclNetPlugin_v7",  "ncclNetPlugin_v6"};
const char* const kNewer[] = {"ncclNetPlugin_v13", "ncclNetPlugin_v14", "ncclNetPlugin_v15"};
const char* const kOlder[] = {"ncclNetPlugin_v5", "ncclNetPlugin_v4", "ncclNetPlugin_v3", "ncclNetPlugin_v2"};
constexpr int kMaxDevices = 1024;

std::string ptrText(int support) {
  std::string s;
  if (support & NCCL_PTR_HOST) s += "host";
  if (support & NCCL_PTR_CUDA) s += std::string(s.empty() ? "" : "+") + "cuda";
  if (support & NCCL_PTR_DMABUF) s += std::string(s.empty() ? "" : "+") + "dmabuf";
  return s.empty() ? "none" : s;
}

std::string text(const char* s) { return s != nullptr ? std::string(s, strnlen(s, 256)) : std::string(); }

}  // namespace

std::string NetDevice::describe() const {
  std::string s = name.empty() ? "(unnamed)" : name;
  if (port >= 0) s += " port " + std::to_string(port);
  if (speedMbps >= 0) s += ", " + std::to_string(speedMbps) + " Mb/s";
  s += ", " + ptrText(ptrSupport);
  if (railId >= 0) s += ", rail " + std::to_string(railId);
  if (!pciPath.empty()) s += " (" + pciPath + ")";
  return s;
}

Result<std::unique_ptr<NetPlugin>> NetPlugin::load(const std::string& path, uint64_t commId) {
  std::unique_ptr<NetPlugin> p(new NetPlugin());
  TH_ASSIGN(p->library_, plugin::Library::open(path, "net plugin"));
  auto sym = p->library_->findVersioned(kKnown, kNewer);
  if (!sym.isOk()) {
    for (const char* old : kOlder)
      if (p->library_->find(old) != nullptr)
        return invalidArgument("%s: exports %s, an older net plugin ABI than Theseus reads (ncclNetPlugin_v6 .. "
                               "_v12)", path.c_str(), old);
    return sym.status();
  }
  p->descriptor_ = sym.value().address;
  p->version_ = kNewestVersion - static_cast<int>(sym.value().index);
  TH_CHECK(p->start(path, sym.value().name, commId));
  return p;
}

Result<std::unique_ptr<NetPlugin>> NetPlugin::internal(const void* descriptor, int version, const std::string& origin,
                                                       uint64_t commId, const char* (*lastError)()) {
  std::unique_ptr<NetPlugin> p(new NetPlugin());
  p->origin_ = origin;
  p->descriptor_ = descriptor;
  p->version_ = version;
  TH_CHECK(p->start(origin, "its table", commId));
  p->api_.markBuiltIn(lastError);
  return p;
}

Status NetPlugin::start(const std::string& where, const char* symbol, uint64_t commId) {
  // Every version starts with name, init, devices, getProperties.
  const auto* head = static_cast<const ncclNetHead_v6_t*>(descriptor_);
  name_ = text(head->name);
  if (name_.empty()) return invalidArgument("%s: %s has no name", where.c_str(), symbol);
  if (head->init == nullptr || head->devices == nullptr || head->getProperties == nullptr)
    return invalidArgument("%s: net plugin '%s' (%s): init, devices and getProperties are required", where.c_str(),
                           name_.c_str(), symbol);
  // The data members are checked before init, so a malformed plugin is never initialised.
  TH_CHECK(NetApi::bind(descriptor_, version_, nullptr, name_).status().withContext(where));
  ncclResult_t r;
  {
    plugin::CallScope scope(name_.c_str());
    if (version_ >= 11) {
      ncclNetCommConfig_v11_t config{NCCL_NET_TRAFFIC_CLASS_UNDEF};
      r = static_cast<const ncclNet_v11_t*>(descriptor_)->init(&context_, commId, &config,
                                                                   plugin::ncclPluginLogger, nullptr);
    } else if (version_ == 10) {
      r = static_cast<const ncclNetHead_v10_t*>(descriptor_)->init(plugin::ncclPluginLogger, nullptr);
    } else {
      r = head->init(plugin::ncclPluginLogger);
    }
  }
  if (r != ncclSuccess)
    return invalidArgument("%s: net plugin '%s' (%s): init() failed with %d (%s)", where.c_str(), name_.c_str(),
                           symbol, static_cast<int>(r), resultName(r));
  initialized_ = true;
  TH_ASSIGN(api_, NetApi::bind(descriptor_, version_, context_, name_));
  int n = 0;
  {
    plugin::CallScope scope(name_.c_str());
    r = head->devices(&n);
  }
  if (r != ncclSuccess || n < 0 || n > kMaxDevices)
    return invalidArgument("%s: net plugin '%s': devices() %s", where.c_str(), name_.c_str(),
                           r != ncclSuccess ? (std::string("failed with ") + resultName(r)).c_str()
                                            : ("returned " + std::to_string(n) + " devices").c_str());
  for (int d = 0; d < n; ++d) {
    // A buffer larger than any version's properties, zeroed: a plugin of a
    // slightly different layout cannot write past it.
    alignas(8) unsigned char raw[512] = {};
    {
      plugin::CallScope scope(name_.c_str());
      r = head->getProperties(d, raw);
    }
    if (r != ncclSuccess)
      return invalidArgument("%s: net plugin '%s': getProperties(%d) failed with %d (%s)", where.c_str(),
                             name_.c_str(), d, static_cast<int>(r), resultName(r));
    NetDevice dev;
    const auto* h = reinterpret_cast<const ncclNetPropertiesHead_t*>(raw);
    dev.name = text(h->name);
    dev.pciPath = text(h->pciPath);
    dev.guid = h->guid;
    dev.ptrSupport = h->ptrSupport;
    if (version_ >= 9) {
      const auto* v = reinterpret_cast<const ncclNetProperties_v10_t*>(raw);  // v9..v12 agree up to maxCollBytes
      dev.forceFlush = v->forceFlush != 0;
      dev.speedMbps = v->speed;
      dev.port = v->port;
      dev.latencyUs = v->latency;
      dev.maxComms = v->maxComms;
      dev.maxRecvs = v->maxRecvs;
    }
    if (version_ >= 12) {
      const auto* v = reinterpret_cast<const ncclNetProperties_v12_t*>(raw);
      dev.railId = v->railId;
      dev.planeId = v->planeId;
    }
    devices_.push_back(std::move(dev));
  }
  return Status::ok();
}

Result<std::unique_ptr<NetPlugin>> NetPlugin::loadList(const std::string& list, bool set, uint64_t commId,
                                                       std::vector<std::string>* skipped) {
  std::vector<std::string> entries;
  if (!set || list.empty()) {
    entries.push_back("");
  } else {
    size_t pos = 0;
    while (pos <= list.size()) {
      size_t comma = list.find(',', pos);
      std::string e = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      pos = comma == std::string::npos ? list.size() + 1 : comma + 1;
      if (!e.empty()) entries.push_back(e);
    }
  }
  for (const std::string& entry : entries) {
    plugin::NcclPluginLookup lookup{"net plugin", "libnccl-net", "NCCL_NET_PLUGIN", entry, set && !entry.empty()};
    auto found = plugin::openNcclPlugin(lookup);
    if (!found.isOk()) {
      skipped->push_back(found.status().message());
      continue;
    }
    if (!found.value().library) continue;  // "none", or the default name absent
    auto p = load(found.value().library->path(), commId);
    if (p.isOk()) return p;
    skipped->push_back(p.status().message());
  }
  return std::unique_ptr<NetPlugin>();
}

NetPlugin::~NetPlugin() {
  if (!initialized_ || version_ < 11) return;  // older versions have no finalize
  auto fin = static_cast<const ncclNet_v11_t*>(descriptor_)->finalize;
  if (fin == nullptr) return;
  plugin::CallScope scope(name_.c_str());
  ncclResult_t r = fin(context_);
  if (r != ncclSuccess) TH_WARN("net plugin '%s': finalize() failed with %d", name_.c_str(), static_cast<int>(r));
}

std::string NetPlugin::describe() const {
  std::string s = (builtIn() ? "network '" + name_ + "' (" + path() + ")" :
                   "NCCL net plugin '" + name_ + "' v" + std::to_string(version_) + " (" + path() + ")") + ": " +
                  std::to_string(devices_.size()) + " device(s)";
  for (size_t i = 0; i < devices_.size(); ++i) s += (i ? "; " : ": ") + devices_[i].describe();
  return s;
}

}  // namespace theseus::transport::netplugin
