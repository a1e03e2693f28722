#include "attrs/host_probes.h"

#include <dirent.h>
#include <dlfcn.h>

#include <algorithm>
#include <fstream>
#include <mutex>
#include <vector>

#include "common/deadline.h"
#include "common/log.h"

namespace theseus::attrs {
namespace {

// The few NVML entry points we use (nvml.h types: nvmlReturn_t is an int enum,
// nvmlDevice_t an opaque pointer). Success is 0.
using NvmlInitFn = int (*)();
using NvmlByIndexFn = int (*)(unsigned, void**);
using NvmlByBusIdFn = int (*)(const char*, void**);
using NvmlClockFn = int (*)(void*, int, unsigned*);
using NvmlReasonsFn = int (*)(void*, unsigned long long*);
using NvmlTemperatureFn = int (*)(void*, int, unsigned*);
constexpr int kNvmlClockSm = 1;
constexpr int kNvmlTemperatureGpu = 0;
// Throttle reasons that mean the GPU runs slower than it could: software power
// cap, hardware slowdown, software/hardware thermal slowdown, power brake. Idle,
// application clock settings, sync boost and display clocks are not problems.
constexpr unsigned long long kNvmlSlowdownReasons = 0x4 | 0x8 | 0x20 | 0x40 | 0x80;

struct Nvml {
  bool ok = false;
  NvmlByIndexFn byIndex = nullptr;
  NvmlByBusIdFn byBusId = nullptr;
  NvmlClockFn clock = nullptr;
  NvmlReasonsFn reasons = nullptr;
  NvmlTemperatureFn temperature = nullptr;
};

// Loaded once per process and never unloaded; the first library name wins.
const Nvml& nvml(const std::string& library) {
  static Nvml n;
  static std::once_flag once;
  std::call_once(once, [&] {
    void* h = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      TH_INFO(log::kAttrs, "NVML (%s) not available: no GPU clock or throttle attributes", library.c_str());
      return;
    }
    auto init = reinterpret_cast<NvmlInitFn>(dlsym(h, "nvmlInit_v2"));
    n.byIndex = reinterpret_cast<NvmlByIndexFn>(dlsym(h, "nvmlDeviceGetHandleByIndex_v2"));
    n.byBusId = reinterpret_cast<NvmlByBusIdFn>(dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2"));
    n.clock = reinterpret_cast<NvmlClockFn>(dlsym(h, "nvmlDeviceGetClockInfo"));
    n.reasons = reinterpret_cast<NvmlReasonsFn>(dlsym(h, "nvmlDeviceGetCurrentClocksEventReasons"));
    if (n.reasons == nullptr)
      n.reasons = reinterpret_cast<NvmlReasonsFn>(dlsym(h, "nvmlDeviceGetCurrentClocksThrottleReasons"));
    n.temperature = reinterpret_cast<NvmlTemperatureFn>(dlsym(h, "nvmlDeviceGetTemperature"));
    int rc = init ? init() : -1;
    if (init == nullptr || n.byIndex == nullptr || rc != 0) {
      TH_INFO(log::kAttrs, "NVML (%s) unusable (nvmlInit_v2 %s, rc %d): no GPU attributes", library.c_str(),
              init ? "found" : "missing", rc);
      return;
    }
    n.ok = true;
  });
  return n;
}

// The PCI bus id of CUDA device `ordinal` through the already-loaded driver, or "".
std::string cudaBusId(int ordinal) {
  void* drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (drv == nullptr) return "";
  using GetFn = int (*)(int*, int);
  using BusIdFn = int (*)(char*, int, int);
  auto get = reinterpret_cast<GetFn>(dlsym(drv, "cuDeviceGet"));
  auto busId = reinterpret_cast<BusIdFn>(dlsym(drv, "cuDeviceGetPCIBusId"));
  char id[64] = {0};
  int dev = 0;
  bool ok = get && busId && get(&dev, ordinal) == 0 && busId(id, sizeof(id), dev) == 0;
  dlclose(drv);  // drops only the reference RTLD_NOLOAD took
  return ok ? std::string(id) : std::string();
}

std::vector<std::string> listDir(const std::string& path) {
  std::vector<std::string> out;
  DIR* d = opendir(path.c_str());
  if (d == nullptr) return out;
  while (struct dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") out.push_back(name);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

HostProbes::HostProbes(int rank, int cudaDev, const std::string& hostname, Options options)
    : rank_(rank), cudaDev_(cudaDev), host_(hostLabel(hostname)), options_(std::move(options)) {}

bool HostProbes::nvmlAvailable() const { return nvml(options_.nvmlLibrary).ok; }

size_t HostProbes::poll(AttributeStore& store) {
  const uint64_t now = nowNs();
  if (lastPollNs_ != 0 && now - lastPollNs_ < options_.minIntervalNs) return 0;
  lastPollNs_ = now;
  return pollNics(store) + pollGpu(store);
}

// /sys/class/infiniband/<dev>/ports/<n>/state holds e.g. "4: ACTIVE".
size_t HostProbes::pollNics(AttributeStore& store) {
  size_t n = 0;
  for (const std::string& dev : listDir(options_.infinibandSysfs)) {
    const std::string ports = options_.infinibandSysfs + "/" + dev + "/ports";
    bool any = false, active = false;
    for (const std::string& port : listDir(ports)) {
      std::ifstream in(ports + "/" + port + "/state");
      std::string state;
      if (!std::getline(in, state)) continue;
      any = true;
      if (state.find("ACTIVE") != std::string::npos) active = true;
    }
    if (!any) continue;
    const std::string name = "node." + host_ + ".nic." + hostLabel(dev) + ".healthy";
    Status st = store.set(name, active ? 1.0 : 0.0, Source::kProbe);
    if (st.isOk()) ++n;
    else TH_INFO(log::kAttrs, "NIC probe: %s", st.message().c_str());
  }
  return n;
}

size_t HostProbes::pollGpu(AttributeStore& store) {
  if (cudaDev_ < 0) return 0;
  const Nvml& api = nvml(options_.nvmlLibrary);
  if (!api.ok) return 0;
  void* dev = nullptr;
  std::string busId = cudaBusId(cudaDev_);
  bool found = !busId.empty() && api.byBusId && api.byBusId(busId.c_str(), &dev) == 0;
  if (!found && api.byIndex(static_cast<unsigned>(cudaDev_), &dev) != 0) {
    TH_INFO(log::kAttrs, "NVML has no device for CUDA device %d", cudaDev_);
    return 0;
  }
  const std::string prefix = "gpu." + std::to_string(rank_) + ".";
  size_t n = 0;
  auto put = [&](const char* what, double v) {
    if (store.set(prefix + what, v, Source::kProbe).isOk()) ++n;
  };
  unsigned value = 0;
  if (api.clock && api.clock(dev, kNvmlClockSm, &value) == 0) put("sm_clock_mhz", value);
  unsigned long long reasons = 0;
  if (api.reasons && api.reasons(dev, &reasons) == 0) {
    put("throttled", (reasons & kNvmlSlowdownReasons) ? 1.0 : 0.0);
    put("throttle_reasons", static_cast<double>(reasons));
  }
  if (api.temperature && api.temperature(dev, kNvmlTemperatureGpu, &value) == 0) put("temperature_c", value);
  return n;
}

}  // namespace theseus::attrs
