// The hwloc reader (hwloc_reader.h): GPUs, NICs, NUMA nodes and the PCI path
// class of every GPU x NIC pair, from hwloc's discovery or an XML file.
// Built as libtheseus-topo-hwloc.so (not part of libnccl.so.2); the path
// classes are NVIDIA's (topology.h), from the lowest common ancestor of the two
// PCI functions: a PCI-PCI bridge is PIX (at most one bridge below it on each
// side) or PXB; the host bridge or a CPU-side object of one socket is PHB; the
// machine (or a group of sockets) is SYS.
#include <hwloc.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <vector>

#include "topology/hwloc_reader.h"

namespace {

enum : uint8_t { kPix = 0, kPxb = 1, kPhb = 2, kSys = 3 };  // = topology::Path

void busIdOf(hwloc_obj_t pci, char* out, size_t size) {
  std::snprintf(out, size, "%04x:%02x:%02x.%01x", pci->attr->pcidev.domain, pci->attr->pcidev.bus,
                pci->attr->pcidev.dev, pci->attr->pcidev.func);
}

hwloc_obj_t pciOf(hwloc_obj_t osdev) {
  for (hwloc_obj_t o = osdev->parent; o != nullptr; o = o->parent)
    if (o->type == HWLOC_OBJ_PCI_DEVICE) return o;
  return nullptr;
}

int numaOf(hwloc_topology_t topo, hwloc_obj_t pci) {
  hwloc_obj_t host = hwloc_get_non_io_ancestor_obj(topo, pci);
  if (host == nullptr || host->nodeset == nullptr || hwloc_bitmap_weight(host->nodeset) != 1) return -1;
  return hwloc_bitmap_first(host->nodeset);
}

uint8_t pathOf(hwloc_obj_t a, hwloc_obj_t b, int nnuma) {
  std::set<hwloc_obj_t> above;
  for (hwloc_obj_t o = a; o != nullptr; o = o->parent) above.insert(o);
  hwloc_obj_t lca = b;
  while (lca != nullptr && above.count(lca) == 0) lca = lca->parent;
  if (lca == nullptr) return kSys;
  auto bridgesBelow = [&](hwloc_obj_t from) {
    int n = 0;
    for (hwloc_obj_t o = from->parent; o != nullptr && o != lca; o = o->parent) n += o->type == HWLOC_OBJ_BRIDGE;
    return n;
  };
  if (lca->type == HWLOC_OBJ_BRIDGE) {
    if (lca->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST) return kPhb;
    return std::max(bridgesBelow(a), bridgesBelow(b)) <= 1 ? kPix : kPxb;
  }
  if (lca->type == HWLOC_OBJ_PCI_DEVICE) return kPix;  // functions of one device
  if (lca->type == HWLOC_OBJ_MACHINE || lca->type == HWLOC_OBJ_GROUP) return nnuma <= 1 ? kPhb : kSys;
  return kPhb;
}

int fail(TheseusTopoData* out, const char* fmt, const char* a, const char* b) {
  std::snprintf(out->error, sizeof(out->error), fmt, a, b);
  return -1;
}

}  // namespace

extern "C" int theseusTopoRead_v1(const char* xmlPath, TheseusTopoData* out) {
  std::memset(out, 0, sizeof(*out));
  out->version = THESEUS_TOPO_READER_VERSION;
  const bool file = xmlPath != nullptr && *xmlPath != 0;
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) return fail(out, "hwloc_topology_init failed%s%s", "", "");
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (file) {
    FILE* f = std::fopen(xmlPath, "r");
    if (f == nullptr) {
      hwloc_topology_destroy(topo);
      return fail(out, "topology file %s: %s", xmlPath, std::strerror(errno));
    }
    std::fclose(f);
    if (hwloc_topology_set_xml(topo, xmlPath) != 0) {
      hwloc_topology_destroy(topo);
      return fail(out, "topology file %s: hwloc cannot read it as XML (%s)", xmlPath, std::strerror(errno));
    }
  }
  if (hwloc_topology_load(topo) != 0) {
    hwloc_topology_destroy(topo);
    return fail(out, "topology %s: hwloc could not load it (%s)", file ? xmlPath : "of this machine",
                std::strerror(errno));
  }
  // NUMA nodes and their CPUs.
  for (hwloc_obj_t n = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, nullptr);
       n != nullptr && out->nnuma < THESEUS_TOPO_MAX_NUMA; n = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, n)) {
    out->numaIndex[out->nnuma] = static_cast<int>(n->os_index);
    for (int c = hwloc_bitmap_first(n->cpuset); c >= 0 && c < 64 * THESEUS_TOPO_CPU_WORDS;
         c = hwloc_bitmap_next(n->cpuset, c))
      out->numaCpus[out->nnuma][c / 64] |= uint64_t(1) << (c % 64);
    ++out->nnuma;
  }
  std::vector<hwloc_obj_t> gpuPci, nicPci;
  for (hwloc_obj_t o = hwloc_get_next_osdev(topo, nullptr); o != nullptr; o = hwloc_get_next_osdev(topo, o)) {
    hwloc_obj_t pci = pciOf(o);
    if (pci == nullptr || o->name == nullptr) continue;
    int index = -1;
    if (o->attr->osdev.type == HWLOC_OBJ_OSDEV_COPROC && std::sscanf(o->name, "cuda%d", &index) == 1 && index >= 0) {
      if (out->ngpus == THESEUS_TOPO_MAX_GPUS) continue;
      TheseusTopoGpu& g = out->gpus[out->ngpus++];
      g.index = index;
      busIdOf(pci, g.busId, sizeof(g.busId));
      g.numa = numaOf(topo, pci);
      gpuPci.push_back(pci);
    } else if (o->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS || o->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK) {
      auto it = std::find(nicPci.begin(), nicPci.end(), pci);
      if (it == nicPci.end()) {
        if (out->nnics == THESEUS_TOPO_MAX_NICS) continue;
        TheseusTopoNic& n = out->nics[out->nnics++];
        std::snprintf(n.name, sizeof(n.name), "%s", o->name);
        busIdOf(pci, n.busId, sizeof(n.busId));
        n.numa = numaOf(topo, pci);
        nicPci.push_back(pci);
        it = nicPci.end() - 1;
      }
      TheseusTopoNic& n = out->nics[it - nicPci.begin()];
      if (n.naliases < THESEUS_TOPO_MAX_ALIASES) std::snprintf(n.aliases[n.naliases++], 64, "%s", o->name);
      if (o->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS) std::snprintf(n.name, sizeof(n.name), "%s", o->name);
    }
  }
  for (size_t g = 0; g < gpuPci.size(); ++g)
    for (size_t n = 0; n < nicPci.size(); ++n) out->path[g][n] = pathOf(gpuPci[g], nicPci[n], out->nnuma);
  hwloc_topology_destroy(topo);
  return 0;
}
