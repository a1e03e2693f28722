/* The hwloc reader's C interface. The reader (hwloc_reader.cc) is built as its
 * own library, libtheseus-topo-hwloc.so, next to libnccl.so.2 and loaded on
 * first use, so libnccl.so.2 does not need libhwloc at load time (a drop-in
 * replacement must load wherever NVIDIA's library does); without it the
 * topology is unknown and says why. It fills plain data; every decision made
 * from it lives in topology.cc. */
#ifndef THESEUS_TOPOLOGY_HWLOC_READER_H
#define THESEUS_TOPOLOGY_HWLOC_READER_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define THESEUS_TOPO_READER_VERSION 1
#define THESEUS_TOPO_MAX_GPUS 64
#define THESEUS_TOPO_MAX_NICS 64
#define THESEUS_TOPO_MAX_NUMA 32
#define THESEUS_TOPO_MAX_ALIASES 4
#define THESEUS_TOPO_CPU_WORDS 16 /* 1024 CPUs */

typedef struct {
  int index; /* CUDA device number (hwloc's "cuda<N>") */
  char busId[16];
  int numa; /* OS index of its NUMA node, -1 when it has none of its own */
} TheseusTopoGpu;

typedef struct {
  char name[64];
  char aliases[THESEUS_TOPO_MAX_ALIASES][64];
  int naliases;
  char busId[16];
  int numa;
} TheseusTopoNic;

typedef struct {
  int version; /* THESEUS_TOPO_READER_VERSION */
  int ngpus, nnics, nnuma;
  TheseusTopoGpu gpus[THESEUS_TOPO_MAX_GPUS];
  TheseusTopoNic nics[THESEUS_TOPO_MAX_NICS];
  uint8_t path[THESEUS_TOPO_MAX_GPUS][THESEUS_TOPO_MAX_NICS]; /* topology::Path of gpu x nic */
  int numaIndex[THESEUS_TOPO_MAX_NUMA];                      /* OS index of each NUMA node */
  uint64_t numaCpus[THESEUS_TOPO_MAX_NUMA][THESEUS_TOPO_CPU_WORDS];
  char error[256];
} TheseusTopoData;

/* xmlPath NULL or "": this machine. Returns 0, or -1 with out->error set. */
typedef int (*TheseusTopoReadFn)(const char* xmlPath, TheseusTopoData* out);
#define THESEUS_TOPO_READ_SYMBOL "theseusTopoRead_v1"

#ifdef __cplusplus
}
#endif

#endif
