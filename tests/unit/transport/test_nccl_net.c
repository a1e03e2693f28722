/* A net plugin written against NCCL's net plugin ABI (our own code) for the
 * loader tests: two devices whose properties the tests check. It carries no
 * data: every data member refuses with ncclInternalError (the data path is
 * tested with the socket plugin, plugins/net_socket). Variants: GOOD (v12),
 * V11, V9, V6, NEWER_ONLY (only ncclNetPlugin_v13), OLDER_ONLY (only _v5),
 * NO_SYMBOL, INIT_FAILS, NULL_DEVICES, NULL_ISEND (a v12 table without isend).
 * TEST_NET_INIT_LOG=<file>: init() appends a line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/netplugin/nccl_net_abi.h"

static int nDevices = 2;

static void noteInit(void) {
  const char* path = getenv("TEST_NET_INIT_LOG");
  FILE* f = path ? fopen(path, "a") : NULL;
  if (f) {
    fputs("init\n", f);
    fclose(f);
  }
}

static ncclResult_t devices(int* ndev) {
  *ndev = nDevices;
  return ncclSuccess;
}

static void fill(int dev, ncclNetProperties_v12_t* p) {
  static char names[2][8] = {"tnet0", "tnet1"};
  static char paths[2][32] = {"/sys/devices/pci0000:00/0", "/sys/devices/pci0000:00/1"};
  p->name = names[dev & 1];
  p->pciPath = paths[dev & 1];
  p->guid = 0x1000 + dev;
  p->ptrSupport = NCCL_PTR_HOST | (dev == 1 ? NCCL_PTR_CUDA : 0);
  p->regIsGlobal = 0;
  p->forceFlush = 0;
  p->speed = 100000 * (dev + 1);
  p->port = dev + 1;
  p->latency = 1.5f;
  p->maxComms = 1024;
  p->maxRecvs = 1;
  p->netDeviceType = NCCL_NET_DEVICE_HOST;
  p->netDeviceVersion = 0;
  p->vProps.ndevs = 1;
  p->vProps.devs[0] = dev;
  p->maxP2pBytes = (size_t)1 << 31;
  p->maxCollBytes = (size_t)1 << 31;
  p->maxMultiRequestSize = 1;
  p->railId = (int16_t)dev;
  p->planeId = 0;
}

static ncclResult_t propsV12(int dev, ncclNetProperties_v12_t* props) {
  if (dev < 0 || dev >= nDevices) return ncclInvalidArgument;
  fill(dev, props);
  return ncclSuccess;
}

/* v9..v11 layouts: the v12 values up to netDeviceVersion, one vdevice, the byte limits. */
static ncclResult_t propsOlder(int dev, ncclNetProperties_v10_t* props) {
  ncclNetProperties_v12_t p;
  if (dev < 0 || dev >= nDevices) return ncclInvalidArgument;
  fill(dev, &p);
  memcpy(props, &p, offsetof(ncclNetProperties_v12_t, vProps));
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = dev;
  props->maxP2pBytes = p.maxP2pBytes;
  props->maxCollBytes = p.maxCollBytes;
  return ncclSuccess;
}

static ncclResult_t propsV11(int dev, ncclNetProperties_v11_t* props) {
  ncclResult_t r = propsOlder(dev, (ncclNetProperties_v10_t*)props); /* v11 = v10 + one trailing int */
  props->maxMultiRequestSize = 1;
  return r;
}

static ncclResult_t propsV9(int dev, void* out) { return propsOlder(dev, (ncclNetProperties_v10_t*)out); }

static ncclResult_t propsV6(int dev, void* out) {
  ncclNetPropertiesHead_t* props = (ncclNetPropertiesHead_t*)out;
  ncclNetProperties_v12_t p;
  if (dev < 0 || dev >= nDevices) return ncclInvalidArgument;
  fill(dev, &p);
  props->name = p.name;
  props->pciPath = p.pciPath;
  props->guid = p.guid;
  props->ptrSupport = p.ptrSupport;
  return ncclSuccess;
}

static ncclResult_t initV11(void** ctx, uint64_t commId, ncclNetCommConfig_v11_t* config,
                            ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction) {
  (void)commId; (void)profFunction;
  noteInit();
  if (config == NULL || config->trafficClass != NCCL_NET_TRAFFIC_CLASS_UNDEF) return ncclInternalError;
#ifdef FAULT_INIT_FAILS
  if (logFunction) logFunction(NCCL_LOG_WARN, NCCL_NET, __FILE__, __LINE__, "test net: no devices today");
  return ncclSystemError;
#else
  if (logFunction) logFunction(NCCL_LOG_INFO, NCCL_NET, __FILE__, __LINE__, "test net: %d devices", nDevices);
  *ctx = &nDevices;
  return ncclSuccess;
#endif
}

static ncclResult_t initOld(ncclDebugLogger_t logFunction) {
  noteInit();
  (void)logFunction;
  return ncclSuccess;
}

static ncclResult_t finalize(void* ctx) { return ctx == &nDevices ? ncclSuccess : ncclInternalError; }

/* Every data member, typed as its table declares it, refusing. */
static ncclResult_t refuse(void) { return ncclInternalError; }
#define REFUSE(T, m) ((__typeof__(((T*)0)->m))refuse)
#define DATA_V11(T)                                                                                             \
  REFUSE(T, listen), REFUSE(T, connect), REFUSE(T, accept), REFUSE(T, regMr), REFUSE(T, regMrDmaBuf),          \
      REFUSE(T, deregMr)
#define DATA_TAIL(T)                                                                                            \
  REFUSE(T, iflush), REFUSE(T, test), REFUSE(T, closeSend), REFUSE(T, closeRecv), REFUSE(T, closeListen)

#if defined(FAULT_V11)
const ncclNet_v11_t ncclNetPlugin_v11 = {"test_net_v11", initV11, devices, propsV11, DATA_V11(ncclNet_v11_t),
                                         REFUSE(ncclNet_v11_t, isend), REFUSE(ncclNet_v11_t, irecv),
                                         DATA_TAIL(ncclNet_v11_t), NULL, NULL, NULL, finalize, NULL};
#elif defined(FAULT_V9)
const ncclNet_v9_t ncclNetPlugin_v9 = {"test_net_v9", initOld, devices, (__typeof__(((ncclNet_v9_t*)0)->getProperties))propsV9,
                                       DATA_V11(ncclNet_v9_t), REFUSE(ncclNet_v9_t, isend), REFUSE(ncclNet_v9_t, irecv),
                                       DATA_TAIL(ncclNet_v9_t), NULL, NULL, NULL};
#elif defined(FAULT_V6)
const ncclNet_v6_t ncclNetPlugin_v6 = {"test_net_v6", initOld, devices, propsV6, DATA_V11(ncclNet_v6_t),
                                       REFUSE(ncclNet_v6_t, isend), REFUSE(ncclNet_v6_t, irecv),
                                       DATA_TAIL(ncclNet_v6_t)};
#elif defined(FAULT_NEWER_ONLY)
const ncclNetHead_v6_t ncclNetPlugin_v13 = {"test_net_v13", initOld, devices, propsV6};
#elif defined(FAULT_OLDER_ONLY)
const ncclNetHead_v6_t ncclNetPlugin_v5 = {"test_net_v5", initOld, devices, propsV6};
#elif defined(FAULT_NO_SYMBOL)
const int notANetPlugin = 1;
#elif defined(FAULT_NULL_DEVICES)
const ncclNet_v12_t ncclNetPlugin_v12 = {"test_net", initV11, NULL, propsV12, DATA_V11(ncclNet_v12_t),
                                         REFUSE(ncclNet_v12_t, isend), REFUSE(ncclNet_v12_t, irecv),
                                         DATA_TAIL(ncclNet_v12_t), NULL, NULL, NULL, finalize, NULL};
#elif defined(FAULT_NULL_ISEND)
const ncclNet_v12_t ncclNetPlugin_v12 = {"test_net", initV11, devices, propsV12, DATA_V11(ncclNet_v12_t),
                                         NULL, REFUSE(ncclNet_v12_t, irecv),
                                         DATA_TAIL(ncclNet_v12_t), NULL, NULL, NULL, finalize, NULL};
#else
const ncclNet_v12_t ncclNetPlugin_v12 = {"test_net", initV11, devices, propsV12, DATA_V11(ncclNet_v12_t),
                                         REFUSE(ncclNet_v12_t, isend), REFUSE(ncclNet_v12_t, irecv),
                                         DATA_TAIL(ncclNet_v12_t), NULL, NULL, NULL, finalize, NULL};
#endif
