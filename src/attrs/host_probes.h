// Host and device facts, where the machine offers them.
//
// NICs: the state of every InfiniBand/RoCE port under /sys/class/infiniband
// (<dev>/ports/<n>/state reads "4: ACTIVE" when the port is up). A device is
// healthy when at least one of its ports is ACTIVE:
//   node.<host>.nic.<dev>.healthy        1 or 0
// GPUs: NVML, loaded with dlopen("libnvidia-ml.so.1") on first use and never
// linked, so machines without it (like CI) skip it with one INFO line. The
// rank's device is found by PCI bus id through the CUDA driver when the
// process already loaded it, else by index (right unless CUDA_VISIBLE_DEVICES
// renumbers devices):
//   gpu.<rank>.sm_clock_mhz              current SM clock
//   gpu.<rank>.throttled                 1 when a clock throttle reason other than
//                                        idle or application settings is active
//   gpu.<rank>.temperature_c             GPU core temperature
// poll() is cheap enough for every reporting interval (a few file reads and
// NVML calls) and writes with source "probe".
#pragma once

#include <string>

#include "attrs/attribute_store.h"

namespace theseus::attrs {

class HostProbes {
 public:
  struct Options {
    std::string infinibandSysfs = "/sys/class/infiniband";
    std::string nvmlLibrary = "libnvidia-ml.so.1";
    // poll() reads the hardware at most this often (the facts change slowly;
    // the attributes stay fresh for policies with a max_age_ms well above it).
    uint64_t minIntervalNs = 1000000000;
  };

  // cudaDev < 0: no GPU probes.
  HostProbes(int rank, int cudaDev, const std::string& hostname, Options options);
  HostProbes(int rank, int cudaDev, const std::string& hostname) : HostProbes(rank, cudaDev, hostname, Options()) {}

  // Writes what is available now (nothing when the previous poll was less
  // than minIntervalNs ago); returns how many values it wrote.
  size_t poll(AttributeStore& store);

  bool nvmlAvailable() const;

 private:
  size_t pollNics(AttributeStore& store);
  size_t pollGpu(AttributeStore& store);

  int rank_;
  int cudaDev_;
  std::string host_;
  Options options_;
  uint64_t lastPollNs_ = 0;
};

}  // namespace theseus::attrs
