// Which executor runs a communicator's device buffers (device_executor.h).
//
// THESEUS_DEVICE_EXECUTOR=auto, the default, gives a communicator the CUDA
// executor when the build has it and every one of its ranks uses CUDA (the
// process loaded the driver and sees a device: what an NCCL application on
// GPUs always does). Its operations then queue on their streams and can be
// captured into CUDA graphs. A communicator with a rank that does not use
// CUDA (a CPU-only process in the job) runs device buffers on the staging
// executor instead: its device FIFOs would be set up on one side only, and
// the ranks must lower every operation alike. The choice is a pure function of
// the setting and of facts every rank gathered identically, so no extra
// exchange is needed for the ranks to agree.
#include <strings.h>

#include <iterator>
#include <string>

#include "common/knobs.h"
#include "common/log.h"
#include "exec/device/device_executor.h"

namespace theseus::exec {
namespace {

const StringKnob kDeviceExecutor(
    "THESEUS_DEVICE_EXECUTOR", "auto",
    "The device executor: 'auto' (the CUDA executor for communicators whose ranks all use CUDA, else off), 'off' "
    "(device buffers are staged through host memory, synchronously), 'cuda' (the interpreter as a CUDA kernel on "
    "the operations' streams, docs/cuda-executor.md) or 'emulate' (the interpreter on host threads over shared host "
    "memory for every collective; tests). Must be equal on all ranks");

// The knob's values, in DeviceExecutorSetting's order: parsing and naming read the same table.
constexpr const char* kSettingNames[] = {"auto", "off", "cuda", "emulate"};

}  // namespace

DeviceExecutorSetting deviceExecutorSetting() {
  static const DeviceExecutorSetting setting = [] {
    std::string v = kDeviceExecutor.get();
    if (v.empty()) return DeviceExecutorSetting::kAuto;
    for (size_t i = 0; i < std::size(kSettingNames); ++i)
      if (strcasecmp(v.c_str(), kSettingNames[i]) == 0) return static_cast<DeviceExecutorSetting>(i);
    TH_WARN("THESEUS_DEVICE_EXECUTOR=%s is not one of auto, off, cuda, emulate; the device executor stays off",
            v.c_str());
    return DeviceExecutorSetting::kOff;
  }();
  return setting;
}

DeviceExecutorChoice chooseDeviceExecutor(DeviceExecutorSetting setting, bool cudaBuild,
                                          const std::vector<bool>& usesCuda) {
  DeviceExecutorChoice c;
  switch (setting) {
    case DeviceExecutorSetting::kEmulate:
      c.mode = DeviceExecutorMode::kEmulate;
      c.whyNotCuda = "THESEUS_DEVICE_EXECUTOR=emulate";
      return c;
    case DeviceExecutorSetting::kOff: c.whyNotCuda = "THESEUS_DEVICE_EXECUTOR=off"; return c;
    case DeviceExecutorSetting::kCuda:
    case DeviceExecutorSetting::kAuto: break;
  }
  if (!cudaBuild) {
    c.whyNotCuda = "this build of Theseus has no CUDA executor";
    return c;
  }
  // An explicit 'cuda' is kept whatever the ranks report (a rank without CUDA then keeps its FIFO slots in host
  // memory); 'auto' needs every rank.
  if (setting == DeviceExecutorSetting::kAuto)
    for (size_t r = 0; r < usesCuda.size(); ++r)
      if (!usesCuda[r]) {
        c.whyNotCuda = "rank " + std::to_string(r) + " of the communicator does not use CUDA (THESEUS_DEVICE_EXECUTOR=auto)";
        return c;
      }
  c.mode = DeviceExecutorMode::kCuda;
  return c;
}

const char* deviceExecutorSettingName(DeviceExecutorSetting setting) {
  const auto i = static_cast<size_t>(setting);
  return i < std::size(kSettingNames) ? kSettingNames[i] : "?";
}

const char* deviceExecutorModeName(DeviceExecutorMode mode) {
  switch (mode) {
    case DeviceExecutorMode::kOff: return "staging";
    case DeviceExecutorMode::kEmulate: return "emulated";
    case DeviceExecutorMode::kCuda: return "cuda";
  }
  return "?";
}

}  // namespace theseus::exec
