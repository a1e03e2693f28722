// NCCL net plugins (NCCL_NET_PLUGIN): finding, validating and querying them.
//
// Loading follows NCCL: NCCL_NET_PLUGIN is a comma-separated list, each entry
// found by NCCL's library rules (as given, then libnccl-net-<entry>.so;
// common/nccl_plugins.h), and the first library that exports a net plugin
// this Theseus reads (ncclNetPlugin_v12 .. _v6, newest first) and whose
// init() and devices() succeed is used. Entries that fail are skipped with
// their reason, and when none is usable Theseus falls back to its internal
// networks, as NCCL falls back to IB and Socket. With the variable unset,
// libnccl-net.so is tried silently.
//
// What is read: the plugin's name, its devices and their properties (name,
// PCI path, GUID, pointer support; for v9 and newer also speed, port,
// latency, comm limits; v12 also rail and plane). A plugin must also have
// every data member the backend calls (net_api.h), or it is skipped like one
// of the wrong version. The loaded plugin carries the traffic between hosts
// (net_backend.h; transport/backend_order.cc says when).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/plugin_library.h"
#include "common/status.h"
#include "transport/netplugin/net_api.h"

namespace theseus::transport::netplugin {

struct NetDevice {
  std::string name;
  std::string pciPath;
  uint64_t guid = 0;
  int ptrSupport = 0;      // NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF
  bool forceFlush = false; // v9 on: receives into GPU memory are always flushed (iflush)
  int speedMbps = -1;      // -1: not read (v6..v8)
  int port = -1;
  float latencyUs = -1;
  int maxComms = -1;
  int maxRecvs = -1;
  int railId = -1;         // v12; -1 = unknown
  int planeId = -1;
  std::string describe() const;  // "mlx5_0 port 1, 400000 Mb/s, host+cuda (0000:1a:00.0)"
};

class NetPlugin {
 public:
  static constexpr int kOldestVersion = 6;
  static constexpr int kNewestVersion = 12;

  // One library (a path or name as given).
  static Result<std::unique_ptr<NetPlugin>> load(const std::string& path, uint64_t commId);
  // A network built into Theseus (IB): its table, initialised and queried like a plugin's.
  // `origin` stands for the path in messages ("built in").
  // `lastError`: the network's text for the last call that failed on the calling thread.
  static Result<std::unique_ptr<NetPlugin>> internal(const void* descriptor, int version, const std::string& origin,
                                                     uint64_t commId, const char* (*lastError)());
  // NCCL_NET_PLUGIN's list (or, `set` false, the default libnccl-net.so). Null
  // when nothing is usable; `skipped` receives one line per entry that was not
  // (what was tried, why) - empty when the variable is unset and nothing found.
  static Result<std::unique_ptr<NetPlugin>> loadList(const std::string& list, bool set, uint64_t commId,
                                                     std::vector<std::string>* skipped);
  ~NetPlugin();  // finalize() (v11, v12)
  NetPlugin(const NetPlugin&) = delete;
  NetPlugin& operator=(const NetPlugin&) = delete;

  const std::string& name() const { return name_; }
  int version() const { return version_; }
  const std::vector<NetDevice>& devices() const { return devices_; }
  const std::string& path() const { return library_ ? library_->path() : origin_; }
  bool builtIn() const { return library_ == nullptr; }
  // The data calls (bound to the version found, and to v11+'s context).
  const NetApi& api() const { return api_; }
  // "NCCL net plugin 'X' v12 (path): 2 devices: ...".
  std::string describe() const;

 private:
  NetPlugin() = default;
  // Checks, initialises and queries the table at descriptor_ (version_ set).
  Status start(const std::string& where, const char* symbol, uint64_t commId);
  std::unique_ptr<plugin::Library> library_;
  std::string origin_;
  const void* descriptor_ = nullptr;
  int version_ = 0;
  std::string name_;
  void* context_ = nullptr;
  NetApi api_;
  bool initialized_ = false;
  std::vector<NetDevice> devices_;
};

}  // namespace theseus::transport::netplugin
