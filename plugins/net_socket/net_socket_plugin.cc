// Theseus' socket network as an NCCL net plugin: NCCL's function tables
// v6..v12 over the version-independent core (net_socket.h). Every table is
// exported unless THESEUS_NET_SOCKET_ONLY=<version> picks one (the test
// variants), so a loader that reads the newest version it knows finds it.
#include <cstring>

#include "net_socket.h"

namespace ns = theseus_net_socket;

namespace {

char kName[] = "TheseusSocket";

// Properties of every version are written from the v12 values; older layouts
// are prefixes of it up to netDeviceVersion (v9+: the vdevice and byte limits
// follow, filled by their own writers).
template <class Props>
void fillCommon(int dev, Props* p) {
  const ns::DeviceInfo* d = ns::deviceInfo(dev);
  p->name = const_cast<char*>(d->name);
  p->pciPath = const_cast<char*>(d->pciPath);
  p->guid = static_cast<uint64_t>(d->index);
  p->ptrSupport = NCCL_PTR_HOST;
  p->regIsGlobal = 0;
  p->forceFlush = 0;
  p->speed = d->speedMbps;
  p->port = 0;
  p->latency = 0;
  p->maxComms = 65536;
  p->maxRecvs = 1;
  p->netDeviceType = NCCL_NET_DEVICE_HOST;
  p->netDeviceVersion = 0;
  p->vProps.ndevs = 1;
  p->vProps.devs[0] = dev;
  p->maxP2pBytes = static_cast<size_t>(1) << 31;
  p->maxCollBytes = static_cast<size_t>(1) << 31;
}

ncclResult_t propsV12(int dev, ncclNetProperties_v12_t* p) {
  if (ns::deviceInfo(dev) == nullptr) return ncclInvalidArgument;
  std::memset(p, 0, sizeof(*p));
  fillCommon(dev, p);
  p->maxMultiRequestSize = 1;
  p->railId = -1;
  p->planeId = -1;
  return ncclSuccess;
}
ncclResult_t propsV11(int dev, ncclNetProperties_v11_t* p) {
  if (ns::deviceInfo(dev) == nullptr) return ncclInvalidArgument;
  std::memset(p, 0, sizeof(*p));
  fillCommon(dev, p);
  p->maxMultiRequestSize = 1;
  return ncclSuccess;
}
ncclResult_t propsV10(int dev, ncclNetProperties_v10_t* p) {
  if (ns::deviceInfo(dev) == nullptr) return ncclInvalidArgument;
  std::memset(p, 0, sizeof(*p));
  fillCommon(dev, p);
  return ncclSuccess;
}
// v6..v8: name, pciPath, guid, ptrSupport, then (v8) regIsGlobal, the speed and limits, (v7+) the device type.
struct PropsV8 {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
};
struct PropsV7 {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
};
struct PropsV6 {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
};
ncclResult_t propsV8(int dev, void* raw) {
  const ns::DeviceInfo* d = ns::deviceInfo(dev);
  if (d == nullptr) return ncclInvalidArgument;
  PropsV8 p{const_cast<char*>(d->name), const_cast<char*>(d->pciPath), static_cast<uint64_t>(d->index),
            NCCL_PTR_HOST, 0, d->speedMbps, 0, 0.0f, 65536, 1, NCCL_NET_DEVICE_HOST, 0};
  std::memcpy(raw, &p, sizeof(p));
  return ncclSuccess;
}
ncclResult_t propsV7(int dev, void* raw) {
  const ns::DeviceInfo* d = ns::deviceInfo(dev);
  if (d == nullptr) return ncclInvalidArgument;
  PropsV7 p{const_cast<char*>(d->name), const_cast<char*>(d->pciPath), static_cast<uint64_t>(d->index),
            NCCL_PTR_HOST, d->speedMbps, 0, 0.0f, 65536, 1, NCCL_NET_DEVICE_HOST, 0};
  std::memcpy(raw, &p, sizeof(p));
  return ncclSuccess;
}
ncclResult_t propsV6(int dev, void* raw) {
  const ns::DeviceInfo* d = ns::deviceInfo(dev);
  if (d == nullptr) return ncclInvalidArgument;
  PropsV6 p{const_cast<char*>(d->name), const_cast<char*>(d->pciPath), static_cast<uint64_t>(d->index),
            NCCL_PTR_HOST, d->speedMbps, 0, 0.0f, 65536, 1};
  std::memcpy(raw, &p, sizeof(p));
  return ncclSuccess;
}

ncclResult_t devices(int* n) {
  *n = ns::deviceCount();
  return ncclSuccess;
}

// Version glue.
int contextToken;
ncclResult_t initV11(void** ctx, uint64_t, ncclNetCommConfig_v11_t*, ncclDebugLogger_t log, ncclProfilerCallback_t) {
  *ctx = &contextToken;
  return ns::init(log);
}
ncclResult_t initV10(ncclDebugLogger_t log, ncclProfilerCallback_t) { return ns::init(log); }
ncclResult_t initOld(ncclDebugLogger_t log) { return ns::init(log); }
ncclResult_t finalize(void*) { return ncclSuccess; }
ncclResult_t setNetAttr(void*, ncclNetAttr_v11_t*) { return ncclSuccess; }

ncclResult_t listenV11(void*, int dev, void* handle, void** lc) { return ns::listen(dev, handle, lc); }
ncclResult_t connectV11(void*, int dev, void* handle, void** sc, ncclNetDeviceHandle_v11_t** devComm) {
  if (devComm != nullptr) *devComm = nullptr;
  return ns::connect(dev, handle, sc);
}
ncclResult_t connectV10(int dev, ncclNetCommConfig_v10_t*, void* handle, void** sc, ncclNetDeviceHandle_v7_t** dc) {
  if (dc != nullptr) *dc = nullptr;
  return ns::connect(dev, handle, sc);
}
ncclResult_t connectV7(int dev, void* handle, void** sc, ncclNetDeviceHandle_v7_t** dc) {
  if (dc != nullptr) *dc = nullptr;
  return ns::connect(dev, handle, sc);
}
ncclResult_t acceptV7(void* lc, void** rc, ncclNetDeviceHandle_v7_t** dc) {
  if (dc != nullptr) *dc = nullptr;
  return ns::accept(lc, rc);
}
ncclResult_t regMrInt(void* comm, void* data, int size, int type, void** mh) {
  return ns::regMr(comm, data, static_cast<size_t>(size), type, mh);
}
ncclResult_t regMrDmaBuf(void*, void*, size_t, int, uint64_t, int, void**) { return ncclInternalError; }
ncclResult_t isendV10(void* sc, void* data, size_t size, int tag, void* mh, void*, void** req) {
  return ns::isend(sc, data, size, tag, mh, req);
}
ncclResult_t isendV9(void* sc, void* data, size_t size, int tag, void* mh, void** req) {
  return ns::isend(sc, data, size, tag, mh, req);
}
ncclResult_t isendInt(void* sc, void* data, int size, int tag, void* mh, void** req) {
  return ns::isend(sc, data, static_cast<size_t>(size), tag, mh, req);
}
ncclResult_t irecvV10(void* rc, int n, void** data, size_t* sizes, int* tags, void** mh, void**, void** req) {
  return ns::irecv(rc, n, data, sizes, tags, mh, req);
}
ncclResult_t irecvV9(void* rc, int n, void** data, size_t* sizes, int* tags, void** mh, void** req) {
  return ns::irecv(rc, n, data, sizes, tags, mh, req);
}
ncclResult_t irecvInt(void* rc, int n, void** data, int* sizes, int* tags, void** mh, void** req) {
  if (n != 1) return ns::irecv(rc, n, data, nullptr, tags, mh, req);
  size_t size = static_cast<size_t>(sizes[0]);
  return ns::irecv(rc, n, data, &size, tags, mh, req);
}

}  // namespace

#ifndef THESEUS_NET_SOCKET_ONLY
#define THESEUS_NET_SOCKET_ONLY 0
#endif
#define TH_WANT(v) (THESEUS_NET_SOCKET_ONLY == 0 || THESEUS_NET_SOCKET_ONLY == (v))
#define TH_EXPORT extern "C" __attribute__((visibility("default")))

#if TH_WANT(12)
TH_EXPORT const ncclNet_v12_t ncclNetPlugin_v12 = {
    kName,     initV11,     devices,      propsV12,    listenV11, connectV11, acceptV7,   ns::regMr,
    regMrDmaBuf, ns::deregMr, isendV10,   irecvV10,    ns::iflush, ns::test,  ns::closeComm, ns::closeComm,
    ns::closeListen, nullptr, nullptr,    nullptr,     finalize,  setNetAttr};
#endif
#if TH_WANT(11)
TH_EXPORT const ncclNet_v11_t ncclNetPlugin_v11 = {
    kName,     initV11,     devices,      propsV11,    listenV11, connectV11, acceptV7,   ns::regMr,
    regMrDmaBuf, ns::deregMr, isendV10,   irecvV10,    ns::iflush, ns::test,  ns::closeComm, ns::closeComm,
    ns::closeListen, nullptr, nullptr,    nullptr,     finalize,  setNetAttr};
#endif
#if TH_WANT(10)
TH_EXPORT const ncclNet_v10_t ncclNetPlugin_v10 = {
    kName,     initV10,     devices,      propsV10,    ns::listen, connectV10, acceptV7,  ns::regMr,
    regMrDmaBuf, ns::deregMr, isendV10,   irecvV10,    ns::iflush, ns::test,  ns::closeComm, ns::closeComm,
    ns::closeListen, nullptr, nullptr,    nullptr};
#endif
#if TH_WANT(9)
TH_EXPORT const ncclNet_v9_t ncclNetPlugin_v9 = {
    kName,     initOld,     devices,      propsV10,    ns::listen, connectV7, acceptV7,   ns::regMr,
    regMrDmaBuf, ns::deregMr, isendV9,    irecvV9,     ns::iflush, ns::test,  ns::closeComm, ns::closeComm,
    ns::closeListen, nullptr, nullptr,    nullptr};
#endif
#if TH_WANT(8)
TH_EXPORT const ncclNet_v8_t ncclNetPlugin_v8 = {
    kName,     initOld,     devices,      propsV8,     ns::listen, connectV7, acceptV7,   ns::regMr,
    regMrDmaBuf, ns::deregMr, isendInt,   irecvInt,    ns::iflush, ns::test,  ns::closeComm, ns::closeComm,
    ns::closeListen, nullptr, nullptr};
#endif
#if TH_WANT(7)
TH_EXPORT const ncclNet_v7_t ncclNetPlugin_v7 = {
    kName,     initOld,     devices,      propsV7,     ns::listen, connectV7, acceptV7,   regMrInt,
    regMrDmaBuf, ns::deregMr, isendInt,   irecvInt,    ns::iflush, ns::test,  ns::closeComm, ns::closeComm,
    ns::closeListen, nullptr, nullptr};
#endif
#if TH_WANT(6)
TH_EXPORT const ncclNet_v6_t ncclNetPlugin_v6 = {
    kName,     initOld,     devices,      propsV6,     ns::listen, ns::connect, ns::accept, regMrInt,
    regMrDmaBuf, ns::deregMr, isendInt,   irecvInt,    ns::iflush, ns::test,  ns::closeComm, ns::closeComm,
    ns::closeListen};
#endif
