#include "topology/topology.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "common/knobs.h"
#include "common/log.h"
#include "common/plugin_library.h"

namespace theseus::topology {
namespace {

const StringKnob kTopoFile("THESEUS_TOPO_FILE", nullptr,
                           "hwloc XML describing this host (lstopo --of xml, or tests/topology/*.xml) instead of "
                           "hwloc's discovery: which GPUs and NICs exist, their PCI paths and NUMA nodes");

constexpr const char* kReader = "libtheseus-topo-hwloc.so";

std::string text(const char* s, size_t max) { return std::string(s, strnlen(s, max)); }

// The reader next to the library this code is in (libnccl.so.2 in lib/, or a test
// binary in bin/ with lib/ beside it), else wherever the loader finds it.
Result<std::unique_ptr<plugin::Library>> openReader() {
  std::vector<std::string> tried;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&openReader), &info) != 0 && info.dli_fname != nullptr) {
    std::string self = info.dli_fname;
    std::string dir = self.substr(0, self.find_last_of('/') == std::string::npos ? 0 : self.find_last_of('/'));
    if (!dir.empty()) {
      tried.push_back(dir + "/" + kReader);
      tried.push_back(dir + "/../lib/" + kReader);
    }
  }
  tried.push_back(kReader);
  std::string why;
  for (const std::string& path : tried) {
    auto lib = plugin::Library::open(path, "topology reader");
    if (lib.isOk()) return lib;
    why = lib.status().message();
  }
  return systemError("the topology reader %s could not be loaded (%s)", kReader, why.c_str());
}

}  // namespace

const char* pathName(Path p) {
  switch (p) {
    case Path::kPix: return "PIX";
    case Path::kPxb: return "PXB";
    case Path::kPhb: return "PHB";
    case Path::kSys: return "SYS";
  }
  return "?";
}

bool Nic::knows(const std::string& osName) const {
  return name == osName || std::find(aliases.begin(), aliases.end(), osName) != aliases.end();
}

Result<std::unique_ptr<Topology>> Topology::fromData(const TheseusTopoData& d, const std::string& source) {
  if (d.version != THESEUS_TOPO_READER_VERSION)
    return invalidArgument("topology %s: reader data version %d, expected %d", source.c_str(), d.version,
                           THESEUS_TOPO_READER_VERSION);
  if (d.ngpus < 0 || d.ngpus > THESEUS_TOPO_MAX_GPUS || d.nnics < 0 || d.nnics > THESEUS_TOPO_MAX_NICS ||
      d.nnuma < 0 || d.nnuma > THESEUS_TOPO_MAX_NUMA)
    return invalidArgument("topology %s: counts out of range (%d GPUs, %d NICs, %d NUMA nodes)", source.c_str(),
                           d.ngpus, d.nnics, d.nnuma);
  std::unique_ptr<Topology> t(new Topology());
  t->source_ = source;
  for (int i = 0; i < d.nnuma; ++i) {
    std::vector<int> cpus;
    for (int w = 0; w < THESEUS_TOPO_CPU_WORDS; ++w)
      for (int b = 0; b < 64; ++b)
        if (d.numaCpus[i][w] & (uint64_t(1) << b)) cpus.push_back(w * 64 + b);
    t->numa_.emplace_back(d.numaIndex[i], std::move(cpus));
  }
  // GPUs in CUDA order (the order "take them in turn" follows), with their rows of paths.
  std::vector<int> order(static_cast<size_t>(d.ngpus));
  for (int i = 0; i < d.ngpus; ++i) order[static_cast<size_t>(i)] = i;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return d.gpus[a].index < d.gpus[b].index; });
  for (int i : order) {
    t->gpus_.push_back({d.gpus[i].index, text(d.gpus[i].busId, sizeof(d.gpus[i].busId)), d.gpus[i].numa});
    std::vector<Path> row;
    for (int n = 0; n < d.nnics; ++n) {
      if (d.path[i][n] > static_cast<uint8_t>(Path::kSys))
        return invalidArgument("topology %s: path class %d out of range", source.c_str(), d.path[i][n]);
      row.push_back(static_cast<Path>(d.path[i][n]));
    }
    t->path_.push_back(std::move(row));
  }
  for (int n = 0; n < d.nnics; ++n) {
    const TheseusTopoNic& in = d.nics[n];
    Nic nic{text(in.name, sizeof(in.name)), {}, text(in.busId, sizeof(in.busId)), in.numa};
    for (int a = 0; a < std::clamp(in.naliases, 0, THESEUS_TOPO_MAX_ALIASES); ++a)
      nic.aliases.push_back(text(in.aliases[a], sizeof(in.aliases[a])));
    t->nics_.push_back(std::move(nic));
  }
  return t;
}

Result<std::unique_ptr<Topology>> Topology::load(const std::string& xmlPath) {
  TH_ASSIGN(std::unique_ptr<plugin::Library> lib, openReader());
  auto read = reinterpret_cast<TheseusTopoReadFn>(const_cast<void*>(lib->find(THESEUS_TOPO_READ_SYMBOL)));
  if (read == nullptr)
    return systemError("%s: not a topology reader: symbol %s not found", lib->path().c_str(), THESEUS_TOPO_READ_SYMBOL);
  auto data = std::make_unique<TheseusTopoData>();
  if (read(xmlPath.c_str(), data.get()) != 0)
    return invalidArgument("%s", text(data->error, sizeof(data->error)).c_str());
  return fromData(*data, xmlPath.empty() ? "this machine (hwloc)" : xmlPath);
}

const Topology* Topology::forThisHost() {
  static std::once_flag once;
  static Topology* host = nullptr;  // kept for the process
  std::call_once(once, [] {
    auto t = load(kTopoFile.get());
    if (!t.isOk()) {
      TH_WARN("%s; NICs are chosen without the topology", t.status().message().c_str());
      return;
    }
    host = t.take().release();
    TH_INFO(log::kInit | log::kGraph, "Topology: %s", host->describe().c_str());
  });
  return host;
}

Topology::~Topology() = default;

int Topology::gpuIndex(int cudaDev) const {
  for (size_t i = 0; i < gpus_.size(); ++i)
    if (gpus_[i].index == cudaDev) return static_cast<int>(i);
  return -1;
}

Path Topology::path(size_t gpu, size_t nic) const { return path_.at(gpu).at(nic); }

int Topology::nicFor(size_t gpu) const {
  if (nics_.empty() || gpu >= gpus_.size()) return -1;
  auto closest = [&](size_t g) {
    Path best = *std::min_element(path_[g].begin(), path_[g].end());
    std::vector<int> set;
    for (size_t n = 0; n < nics_.size(); ++n)
      if (path_[g][n] == best) set.push_back(static_cast<int>(n));
    return set;
  };
  const std::vector<int> mine = closest(gpu);
  size_t turn = 0;
  for (size_t g = 0; g < gpu; ++g)
    if (closest(g) == mine) ++turn;
  return mine[turn % mine.size()];
}

std::vector<int> Topology::numaCpus(int numa) const {
  for (const auto& [index, cpus] : numa_)
    if (index == numa) return cpus;
  return {};
}

std::string Topology::describe() const {
  return std::to_string(numaCount()) + " NUMA node(s), " + std::to_string(gpus_.size()) + " GPU(s), " +
         std::to_string(nics_.size()) + " NIC(s) (" + source_ + ")";
}

}  // namespace theseus::topology
