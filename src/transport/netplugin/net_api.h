// The data calls of one NCCL net plugin, whatever its version.
//
// NCCL's net ABI changed shape seven times (v6..v12): a context argument from
// v11 on, a comm config in v10's connect, profiler handles in v10+ isend/irecv,
// int sizes up to v8, device-offload arguments from v7. NetApi binds the
// descriptor of the version the loader found and offers one set of calls —
// the subset the backend needs: listen/connect/accept (non-blocking:
// a null comm means "not yet, call again"), memory registration (host memory,
// device memory by address or dma-buf for GPUDirect RDMA sends), single
// isend/irecv requests (a null request means "retry later"), test and the
// closes. Calls are marked with the plugin's name for its logger (CallScope).
#pragma once

#include <cstddef>
#include <string>

#include "common/status.h"
#include "nccl.h"

namespace theseus::transport::netplugin {

class NetApi {
 public:
  // Checks that every member the backend calls is present; an error names the first missing one.
  static Result<NetApi> bind(const void* descriptor, int version, void* context, const std::string& name);
  NetApi() = default;

  int version() const { return version_; }
  const std::string& name() const { return name_; }
  // "NCCL net plugin 'X'", or "network 'IB'" for a network built into Theseus.
  std::string label() const;
  // A built-in network's own account of the last call that failed on this thread (": why"), else "".
  std::string detail() const;
  // For built-in networks (NetPlugin::internal).
  void markBuiltIn(const char* (*lastError)()) {
    builtIn_ = true;
    lastError_ = lastError;
  }
  // Largest message one isend/irecv takes (sizes are int up to v8).
  size_t maxMessageBytes() const;

  ncclResult_t listen(int dev, void* handle, void** listenComm) const;
  ncclResult_t connect(int dev, void* handle, void** sendComm) const;
  ncclResult_t accept(void* listenComm, void** recvComm) const;
  ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle) const;
  // Device memory through a dma-buf descriptor (GPUDirect RDMA); only when hasRegMrDmaBuf().
  bool hasRegMrDmaBuf() const;
  ncclResult_t regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                           void** mhandle) const;
  ncclResult_t deregMr(void* comm, void* mhandle) const;
  ncclResult_t isend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request) const;
  ncclResult_t irecv(void* recvComm, void* data, size_t size, int tag, void* mhandle, void** request) const;
  ncclResult_t test(void* request, int* done, size_t* size) const;
  // Makes a completed receive into GPU memory visible to the GPU (a null request: nothing to wait
  // for); only when hasIflush().
  bool hasIflush() const;
  ncclResult_t iflush(void* recvComm, void* data, int size, void* mhandle, void** request) const;
  ncclResult_t closeSend(void* sendComm) const;
  ncclResult_t closeRecv(void* recvComm) const;
  ncclResult_t closeListen(void* listenComm) const;

 private:
  ncclResult_t rawTest(void* request, int* done, int* sizes) const;
  const void* table_ = nullptr;
  int version_ = 0;
  void* context_ = nullptr;
  std::string name_;
  bool builtIn_ = false;
  const char* (*lastError_)() = nullptr;
};

}  // namespace theseus::transport::netplugin
