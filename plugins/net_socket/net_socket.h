// Theseus' socket net plugin: the version-independent part (devices, the
// connection handshake, requests over non-blocking TCP). net_socket_plugin.cc
// wraps it in NCCL's function tables v6..v12.
//
// Devices: the IPv4 interfaces that are up, chosen as NCCL's Socket network
// chooses them (NCCL_SOCKET_IFNAME: comma-separated prefixes, "^" excludes,
// "=" matches exactly; by default every interface except loopback and
// docker*, and loopback when nothing else is up).
//
// Connection set-up, never blocking (NCCL's rule: a null comm means "call
// again"): listen() binds a socket on the device's address and writes
// {magic, address} into the handle. connect() keeps its stage in the caller's
// handle (NCCL's plugins do the same): a non-blocking connect, then a hello
// {magic, nonce} once writable. accept() takes a pending connection and
// reads its hello.
//
// Messages, per connection in order: [Header{magic, tag, bytes}][payload].
// isend/irecv queue a request (at most kMaxRequests per comm; a full queue
// answers request = NULL, "retry"); test() moves what the socket takes without
// blocking, oldest request first, and reports a request done once its bytes
// are all written or read. A receive checks the magic, that the tag is the
// one posted and that the message fits ("truncated" otherwise); EOF or a
// reset is ncclRemoteError. Host memory only (regMr refuses CUDA pointers).
#pragma once

#include <cstddef>
#include <cstdint>

#include "transport/netplugin/nccl_net_abi.h"

namespace theseus_net_socket {

inline constexpr int kMaxRequests = 32;

struct DeviceInfo {
  const char* name;
  const char* pciPath;  // null when the interface has no PCI device
  int speedMbps;
  int index;
};

ncclResult_t init(ncclDebugLogger_t logger);
int deviceCount();
const DeviceInfo* deviceInfo(int dev);  // null when out of range

ncclResult_t listen(int dev, void* handle, void** listenComm);
ncclResult_t connect(int dev, void* handle, void** sendComm);
ncclResult_t accept(void* listenComm, void** recvComm);
ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle);
ncclResult_t deregMr(void* comm, void* mhandle);
ncclResult_t isend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request);
ncclResult_t irecv(void* recvComm, int n, void** data, const size_t* sizes, const int* tags, void** mhandles,
                   void** request);
ncclResult_t iflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
ncclResult_t test(void* request, int* done, int* sizes);
ncclResult_t closeComm(void* comm);
ncclResult_t closeListen(void* listenComm);

}  // namespace theseus_net_socket
