// The host's topology, from hwloc: GPUs, NICs, NUMA nodes and the PCI paths
// between them, the way NVIDIA's library classifies them (closest first):
//   PIX  GPU and NIC behind one PCIe switch (at most one bridge each way);
//   PXB  through several PCIe bridges, without the host bridge;
//   PHB  through the CPU's PCIe host bridge (same socket, other switch);
//   SYS  across the sockets' interconnect.
// A rank picks its NIC as NVIDIA's library does: the NICs with the closest
// path from its GPU; GPUs that share the same closest set take them in turn
// (GPU order), so 8 GPUs on 4 NICs use two GPUs per NIC and on 8 NICs one each
// (nicFor). The NIC's NUMA node gives the CPUs its progress thread runs on.
//
// The machine comes from hwloc's discovery, or from an hwloc XML file
// (THESEUS_TOPO_FILE: `lstopo --of xml` output, or the synthetic machines of
// tests/topology/), read by libtheseus-topo-hwloc.so (hwloc_reader.h) so that
// libnccl.so.2 itself needs no libhwloc. GPUs are hwloc's CUDA co-processors
// ("cuda<N>"); NICs are PCI functions with an OpenFabrics ("mlx5_0") or network
// ("ib0", "eth0") device, named by the first and known by all.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "topology/hwloc_reader.h"

namespace theseus::topology {

enum class Path : uint8_t { kPix, kPxb, kPhb, kSys };
const char* pathName(Path p);

struct Gpu {
  int index = -1;          // CUDA device number (cuda<N>)
  std::string busId;       // "0000:02:00.0"
  int numa = -1;
};

struct Nic {
  std::string name;                  // the OpenFabrics name when there is one, else the network name
  std::vector<std::string> aliases;  // every OS device name of the PCI function
  std::string busId;
  int numa = -1;
  bool knows(const std::string& osName) const;
};

class Topology {
 public:
  // `xmlPath` empty: this machine. Errors name the file (or say the reader is missing).
  static Result<std::unique_ptr<Topology>> load(const std::string& xmlPath);
  // From the reader's data (checked: counts, indexes and path classes in range).
  static Result<std::unique_ptr<Topology>> fromData(const TheseusTopoData& data, const std::string& source);
  // THESEUS_TOPO_FILE or this machine, loaded once per process (null with a WARN when hwloc fails).
  static const Topology* forThisHost();
  ~Topology();
  Topology(const Topology&) = delete;
  Topology& operator=(const Topology&) = delete;

  const std::vector<Gpu>& gpus() const { return gpus_; }
  const std::vector<Nic>& nics() const { return nics_; }
  const std::string& source() const { return source_; }
  // Index into gpus() of CUDA device `cudaDev`, or -1.
  int gpuIndex(int cudaDev) const;
  Path path(size_t gpu, size_t nic) const;
  // Index into nics() for gpus()[gpu] (see above); -1 without NICs.
  int nicFor(size_t gpu) const;
  // OS indexes of the CPUs of NUMA node `numa` (empty when unknown).
  std::vector<int> numaCpus(int numa) const;
  int numaCount() const { return static_cast<int>(numa_.size()); }
  // "2 NUMA nodes, 8 GPUs, 4 NICs (file)".
  std::string describe() const;

 private:
  Topology() = default;
  std::vector<Gpu> gpus_;
  std::vector<Nic> nics_;
  std::vector<std::vector<Path>> path_;  // [gpu][nic]
  std::vector<std::pair<int, std::vector<int>>> numa_;  // OS index, CPUs
  std::string source_;
};

}  // namespace theseus::topology
