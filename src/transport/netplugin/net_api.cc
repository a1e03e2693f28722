#include "transport/netplugin/net_api.h"

#include <climits>

#include "common/plugin_library.h"
#include "transport/netplugin/nccl_net_abi.h"

namespace theseus::transport::netplugin {
namespace {

// The members the backend calls, by name, for the check in bind().
template <class T>
const char* firstMissing(const T* t) {
  if (t->listen == nullptr) return "listen";
  if (t->connect == nullptr) return "connect";
  if (t->accept == nullptr) return "accept";
  if (t->regMr == nullptr) return "regMr";
  if (t->deregMr == nullptr) return "deregMr";
  if (t->isend == nullptr) return "isend";
  if (t->irecv == nullptr) return "irecv";
  if (t->test == nullptr) return "test";
  if (t->closeSend == nullptr) return "closeSend";
  if (t->closeRecv == nullptr) return "closeRecv";
  if (t->closeListen == nullptr) return "closeListen";
  return nullptr;
}

}  // namespace

// One switch per call: v11 and v12 share the table (only property types differ).
#define TH_NET_DISPATCH(EXPR_V11, EXPR_V10, EXPR_V9, EXPR_V8, EXPR_V7, EXPR_V6) \
  plugin::CallScope scope(name_.c_str());                                       \
  switch (version_) {                                                           \
    case 12:                                                                    \
    case 11: { auto* t = static_cast<const ncclNet_v11_t*>(table_); return EXPR_V11; } \
    case 10: { auto* t = static_cast<const ncclNet_v10_t*>(table_); return EXPR_V10; } \
    case 9: { auto* t = static_cast<const ncclNet_v9_t*>(table_); return EXPR_V9; }    \
    case 8: { auto* t = static_cast<const ncclNet_v8_t*>(table_); return EXPR_V8; }    \
    case 7: { auto* t = static_cast<const ncclNet_v7_t*>(table_); return EXPR_V7; }    \
    default: { auto* t = static_cast<const ncclNet_v6_t*>(table_); return EXPR_V6; }   \
  }

Result<NetApi> NetApi::bind(const void* descriptor, int version, void* context, const std::string& name) {
  NetApi api;
  api.table_ = descriptor;
  api.version_ = version;
  api.context_ = context;
  api.name_ = name;
  const char* missing = nullptr;
  switch (version) {
    case 12:
    case 11: missing = firstMissing(static_cast<const ncclNet_v11_t*>(descriptor)); break;
    case 10: missing = firstMissing(static_cast<const ncclNet_v10_t*>(descriptor)); break;
    case 9: missing = firstMissing(static_cast<const ncclNet_v9_t*>(descriptor)); break;
    case 8: missing = firstMissing(static_cast<const ncclNet_v8_t*>(descriptor)); break;
    case 7: missing = firstMissing(static_cast<const ncclNet_v7_t*>(descriptor)); break;
    case 6: missing = firstMissing(static_cast<const ncclNet_v6_t*>(descriptor)); break;
    default: return invalidArgument("net plugin '%s': version %d is not one Theseus calls", name.c_str(), version);
  }
  if (missing != nullptr)
    return invalidArgument("net plugin '%s' (ncclNetPlugin_v%d): its %s member is NULL", name.c_str(), version,
                           missing);
  return api;
}

std::string NetApi::label() const {
  return (builtIn_ ? "network '" : "NCCL net plugin '") + name_ + "'";
}

std::string NetApi::detail() const {
  const char* why = lastError_ != nullptr ? lastError_() : nullptr;
  return why != nullptr && *why != '\0' ? std::string(": ") + why : std::string();
}

size_t NetApi::maxMessageBytes() const { return version_ <= 8 ? size_t(INT_MAX) : size_t(1) << 40; }

ncclResult_t NetApi::listen(int dev, void* handle, void** listenComm) const {
  TH_NET_DISPATCH(t->listen(context_, dev, handle, listenComm), t->listen(dev, handle, listenComm),
                  t->listen(dev, handle, listenComm), t->listen(dev, handle, listenComm),
                  t->listen(dev, handle, listenComm), t->listen(dev, handle, listenComm))
}

ncclResult_t NetApi::connect(int dev, void* handle, void** sendComm) const {
  ncclNetDeviceHandle_v7_t* devComm = nullptr;
  ncclNetCommConfig_v10_t config{NCCL_NET_TRAFFIC_CLASS_UNDEF};
  TH_NET_DISPATCH(t->connect(context_, dev, handle, sendComm, &devComm),
                  t->connect(dev, &config, handle, sendComm, &devComm), t->connect(dev, handle, sendComm, &devComm),
                  t->connect(dev, handle, sendComm, &devComm), t->connect(dev, handle, sendComm, &devComm),
                  t->connect(dev, handle, sendComm))
}

ncclResult_t NetApi::accept(void* listenComm, void** recvComm) const {
  ncclNetDeviceHandle_v7_t* devComm = nullptr;
  TH_NET_DISPATCH(t->accept(listenComm, recvComm, &devComm), t->accept(listenComm, recvComm, &devComm),
                  t->accept(listenComm, recvComm, &devComm), t->accept(listenComm, recvComm, &devComm),
                  t->accept(listenComm, recvComm, &devComm), t->accept(listenComm, recvComm))
}

ncclResult_t NetApi::regMr(void* comm, void* data, size_t size, int type, void** mhandle) const {
  if (version_ <= 7 && size > size_t(INT_MAX)) return ncclInvalidArgument;
  const int small = static_cast<int>(size);
  TH_NET_DISPATCH(t->regMr(comm, data, size, type, mhandle), t->regMr(comm, data, size, type, mhandle),
                  t->regMr(comm, data, size, type, mhandle), t->regMr(comm, data, size, type, mhandle),
                  t->regMr(comm, data, small, type, mhandle), t->regMr(comm, data, small, type, mhandle))
}

bool NetApi::hasRegMrDmaBuf() const {
  TH_NET_DISPATCH(t->regMrDmaBuf != nullptr, t->regMrDmaBuf != nullptr, t->regMrDmaBuf != nullptr,
                  t->regMrDmaBuf != nullptr, t->regMrDmaBuf != nullptr, t->regMrDmaBuf != nullptr)
}

ncclResult_t NetApi::regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                                 void** mhandle) const {
  if (!hasRegMrDmaBuf()) return ncclInternalError;
  TH_NET_DISPATCH(t->regMrDmaBuf(comm, data, size, type, offset, fd, mhandle),
                  t->regMrDmaBuf(comm, data, size, type, offset, fd, mhandle),
                  t->regMrDmaBuf(comm, data, size, type, offset, fd, mhandle),
                  t->regMrDmaBuf(comm, data, size, type, offset, fd, mhandle),
                  t->regMrDmaBuf(comm, data, size, type, offset, fd, mhandle),
                  t->regMrDmaBuf(comm, data, size, type, offset, fd, mhandle))
}

ncclResult_t NetApi::deregMr(void* comm, void* mhandle) const {
  TH_NET_DISPATCH(t->deregMr(comm, mhandle), t->deregMr(comm, mhandle), t->deregMr(comm, mhandle),
                  t->deregMr(comm, mhandle), t->deregMr(comm, mhandle), t->deregMr(comm, mhandle))
}

ncclResult_t NetApi::isend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request) const {
  if (size > maxMessageBytes()) return ncclInvalidArgument;
  const int small = static_cast<int>(size);
  TH_NET_DISPATCH(t->isend(sendComm, data, size, tag, mhandle, nullptr, request),
                  t->isend(sendComm, data, size, tag, mhandle, nullptr, request),
                  t->isend(sendComm, data, size, tag, mhandle, request),
                  t->isend(sendComm, data, small, tag, mhandle, request),
                  t->isend(sendComm, data, small, tag, mhandle, request),
                  t->isend(sendComm, data, small, tag, mhandle, request))
}

ncclResult_t NetApi::irecv(void* recvComm, void* data, size_t size, int tag, void* mhandle, void** request) const {
  if (size > maxMessageBytes()) return ncclInvalidArgument;
  void* datas[1] = {data};
  size_t sizes[1] = {size};
  int smallSizes[1] = {static_cast<int>(size)};
  int tags[1] = {tag};
  void* mhandles[1] = {mhandle};
  void* phandles[1] = {nullptr};
  TH_NET_DISPATCH(t->irecv(recvComm, 1, datas, sizes, tags, mhandles, phandles, request),
                  t->irecv(recvComm, 1, datas, sizes, tags, mhandles, phandles, request),
                  t->irecv(recvComm, 1, datas, sizes, tags, mhandles, request),
                  t->irecv(recvComm, 1, datas, smallSizes, tags, mhandles, request),
                  t->irecv(recvComm, 1, datas, smallSizes, tags, mhandles, request),
                  t->irecv(recvComm, 1, datas, smallSizes, tags, mhandles, request))
}

ncclResult_t NetApi::rawTest(void* request, int* done, int* sizes) const {
  TH_NET_DISPATCH(t->test(request, done, sizes), t->test(request, done, sizes), t->test(request, done, sizes),
                  t->test(request, done, sizes), t->test(request, done, sizes), t->test(request, done, sizes))
}

ncclResult_t NetApi::test(void* request, int* done, size_t* size) const {
  int sizes[1] = {0};
  ncclResult_t r = rawTest(request, done, sizes);
  if (r == ncclSuccess && *done && size != nullptr) *size = sizes[0] < 0 ? 0 : static_cast<size_t>(sizes[0]);
  return r;
}

bool NetApi::hasIflush() const {
  TH_NET_DISPATCH(t->iflush != nullptr, t->iflush != nullptr, t->iflush != nullptr, t->iflush != nullptr,
                  t->iflush != nullptr, t->iflush != nullptr)
}

ncclResult_t NetApi::iflush(void* recvComm, void* data, int size, void* mhandle, void** request) const {
  *request = nullptr;
  if (!hasIflush()) return ncclInternalError;
  void* datas[1] = {data};
  int sizes[1] = {size};
  void* mhandles[1] = {mhandle};
  TH_NET_DISPATCH(t->iflush(recvComm, 1, datas, sizes, mhandles, request),
                  t->iflush(recvComm, 1, datas, sizes, mhandles, request),
                  t->iflush(recvComm, 1, datas, sizes, mhandles, request),
                  t->iflush(recvComm, 1, datas, sizes, mhandles, request),
                  t->iflush(recvComm, 1, datas, sizes, mhandles, request),
                  t->iflush(recvComm, 1, datas, sizes, mhandles, request))
}

ncclResult_t NetApi::closeSend(void* sendComm) const {
  TH_NET_DISPATCH(t->closeSend(sendComm), t->closeSend(sendComm), t->closeSend(sendComm), t->closeSend(sendComm),
                  t->closeSend(sendComm), t->closeSend(sendComm))
}

ncclResult_t NetApi::closeRecv(void* recvComm) const {
  TH_NET_DISPATCH(t->closeRecv(recvComm), t->closeRecv(recvComm), t->closeRecv(recvComm), t->closeRecv(recvComm),
                  t->closeRecv(recvComm), t->closeRecv(recvComm))
}

ncclResult_t NetApi::closeListen(void* listenComm) const {
  TH_NET_DISPATCH(t->closeListen(listenComm), t->closeListen(listenComm), t->closeListen(listenComm),
                  t->closeListen(listenComm), t->closeListen(listenComm), t->closeListen(listenComm))
}

#undef TH_NET_DISPATCH

}  // namespace theseus::transport::netplugin
