/* NCCL's net plugin ABI, ncclNetPlugin_v6 .. _v12: the function tables, the
 * device properties and the handles. Written from NCCL's documentation (2.28.9
 * for v6..v11, 2.30.7 for v12). Theseus' net-plugin backend calls every
 * version through one adapter (net_api.h); our socket net plugin
 * (plugins/net_socket) implements them. C, for the plugins too. */
#ifndef THESEUS_TRANSPORT_NETPLUGIN_NCCL_NET_ABI_H
#define THESEUS_TRANSPORT_NETPLUGIN_NCCL_NET_ABI_H

#include "common/nccl_plugin_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NCCL_NET_HANDLE_MAXSIZE 128
#define NCCL_PTR_HOST 0x1
#define NCCL_PTR_CUDA 0x2
#define NCCL_PTR_DMABUF 0x4
#define NCCL_NET_MAX_DEVS_PER_NIC_V11 4
#define NCCL_NET_MAX_DEVS_PER_NIC_V12 8
#define NCCL_NET_TRAFFIC_CLASS_UNDEF -1

typedef enum {
  NCCL_NET_DEVICE_HOST = 0,
  NCCL_NET_DEVICE_UNPACK = 1,
  NCCL_NET_DEVICE_GIN_PROXY = 2,
  NCCL_NET_DEVICE_GIN_GDAKI = 3
} ncclNetDeviceType;

typedef ncclResult_t (*ncclProfilerCallback_t)(void** eHandle, int type, void* pHandle, int64_t pluginId, void* extData);

typedef struct {
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  void* handle;
  size_t size;
  int needsProxyProgress;
} ncclNetDeviceHandle_v11_t;

typedef struct { int ndevs; int devs[NCCL_NET_MAX_DEVS_PER_NIC_V11]; } ncclNetVDeviceProps_v11_t;
typedef struct { int ndevs; int devs[NCCL_NET_MAX_DEVS_PER_NIC_V12]; } ncclNetVDeviceProps_v12_t;
typedef struct { int trafficClass; } ncclNetCommConfig_v11_t;

/* The members every version from 6 on starts with (all Theseus reads of v6..v8). */
typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
} ncclNetPropertiesHead_t;

/* The members v9 to v12 share, in order. */
#define THESEUS_NCCL_NET_PROPS_COMMON \
  char* name;                         \
  char* pciPath;                      \
  uint64_t guid;                      \
  int ptrSupport;                     \
  int regIsGlobal;                    \
  int forceFlush;                     \
  int speed; /* Mbps */               \
  int port;                           \
  float latency; /* us */             \
  int maxComms;                       \
  int maxRecvs;                       \
  ncclNetDeviceType netDeviceType;    \
  int netDeviceVersion;

/* v9 and v10 (v10 = v9's layout). */
typedef struct {
  THESEUS_NCCL_NET_PROPS_COMMON
  ncclNetVDeviceProps_v11_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
} ncclNetProperties_v10_t;

typedef struct {
  THESEUS_NCCL_NET_PROPS_COMMON
  ncclNetVDeviceProps_v11_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
} ncclNetProperties_v11_t;

typedef struct {
  THESEUS_NCCL_NET_PROPS_COMMON
  ncclNetVDeviceProps_v12_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
  int16_t railId;
  int16_t planeId;
} ncclNetProperties_v12_t;

typedef struct { int32_t maxConcurrentPeers, minConcurrentPeers, maxFlowsPerPeer, minFlowsPerPeer; } ncclNetCommAttr_v11_t;
typedef struct { ncclNetCommAttr_v11_t sendCommAttr, recvCommAttr; uint32_t op, algo, proto; } ncclNetAttr_v11_t;

/* v11 and v12 share the table; only the property and vdevice types differ. */
#define THESEUS_NCCL_NET_TABLE(PROPS, VPROPS)                                                                  \
  struct {                                                                                                     \
    const char* name;                                                                                          \
    ncclResult_t (*init)(void** ctx, uint64_t commId, ncclNetCommConfig_v11_t* config,                         \
                         ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);                  \
    ncclResult_t (*devices)(int* ndev);                                                                        \
    ncclResult_t (*getProperties)(int dev, PROPS* props);                                                      \
    ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);                               \
    ncclResult_t (*connect)(void* ctx, int dev, void* handle, void** sendComm,                                 \
                            ncclNetDeviceHandle_v11_t** sendDevComm);                                          \
    ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v11_t** recvDevComm);        \
    ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);                      \
    ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,         \
                                void** mhandle);                                                               \
    ncclResult_t (*deregMr)(void* comm, void* mhandle);                                                        \
    ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle,       \
                          void** request);                                                                     \
    ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,        \
                          void** phandles, void** request);                                                    \
    ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);   \
    ncclResult_t (*test)(void* request, int* done, int* sizes);                                                \
    ncclResult_t (*closeSend)(void* sendComm);                                                                 \
    ncclResult_t (*closeRecv)(void* recvComm);                                                                 \
    ncclResult_t (*closeListen)(void* listenComm);                                                             \
    ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);                               \
    ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);                                       \
    ncclResult_t (*makeVDevice)(int* d, VPROPS* props);                                                        \
    ncclResult_t (*finalize)(void* ctx);                                                                       \
    ncclResult_t (*setNetAttr)(void* ctx, ncclNetAttr_v11_t* netAttr);                                         \
  }
typedef THESEUS_NCCL_NET_TABLE(ncclNetProperties_v11_t, ncclNetVDeviceProps_v11_t) ncclNet_v11_t;
typedef THESEUS_NCCL_NET_TABLE(ncclNetProperties_v12_t, ncclNetVDeviceProps_v12_t) ncclNet_v12_t;

/* v10: init(logger, profiler) once per process; no context argument anywhere. */
typedef ncclNetCommConfig_v11_t ncclNetCommConfig_v10_t;
typedef ncclNetDeviceHandle_v11_t ncclNetDeviceHandle_v7_t; /* = v7 .. v12 */
typedef ncclNetVDeviceProps_v11_t ncclNetVDeviceProps_v9_t;  /* = v9, v10 */

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v10_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, ncclNetCommConfig_v10_t* config, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v7_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v7_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                        void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                        void** phandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v9_t* props);
} ncclNet_v10_t;

/* v9: init(logger); connect without a config; isend/irecv without profiler handles. */
typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v10_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v7_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v7_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                        void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v9_t* props);
} ncclNet_v9_t;

/* v8: int sizes in isend/irecv (regMr already size_t); no makeVDevice.
 * v7: as v8 with an int size in regMr. Properties: the common head (not read further). */
#define THESEUS_NCCL_NET_TABLE_V7(REGMR_SIZE)                                                                  \
  struct {                                                                                                     \
    const char* name;                                                                                          \
    ncclResult_t (*init)(ncclDebugLogger_t logFunction);                                                       \
    ncclResult_t (*devices)(int* ndev);                                                                        \
    ncclResult_t (*getProperties)(int dev, void* props);                                                       \
    ncclResult_t (*listen)(int dev, void* handle, void** listenComm);                                          \
    ncclResult_t (*connect)(int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v7_t** sendDevComm);   \
    ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v7_t** recvDevComm);         \
    ncclResult_t (*regMr)(void* comm, void* data, REGMR_SIZE size, int type, void** mhandle);                  \
    ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,         \
                                void** mhandle);                                                               \
    ncclResult_t (*deregMr)(void* comm, void* mhandle);                                                        \
    ncclResult_t (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle, void** request);       \
    ncclResult_t (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles,          \
                          void** request);                                                                     \
    ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);   \
    ncclResult_t (*test)(void* request, int* done, int* sizes);                                                \
    ncclResult_t (*closeSend)(void* sendComm);                                                                 \
    ncclResult_t (*closeRecv)(void* recvComm);                                                                 \
    ncclResult_t (*closeListen)(void* listenComm);                                                             \
    ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);                               \
    ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);                                       \
  }
typedef THESEUS_NCCL_NET_TABLE_V7(size_t) ncclNet_v8_t;
typedef THESEUS_NCCL_NET_TABLE_V7(int) ncclNet_v7_t;

/* v6: no device offload (no devComm arguments, no getDeviceMr/irecvConsumed). */
typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, void* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm);
  ncclResult_t (*regMr)(void* comm, void* data, int size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
} ncclNet_v6_t;

/* The heads the loader reads before it knows more (every version starts with these). */
typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, void* props);
} ncclNetHead_v10_t;
typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, void* props);
} ncclNetHead_v6_t;

#ifdef __cplusplus
}
#endif

#endif
