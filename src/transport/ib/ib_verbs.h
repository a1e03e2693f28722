// libibverbs, loaded on first use (never linked): libnccl.so.2 runs on
// machines without rdma-core, and tests swap in the test double
// (tests/ib_double) by path. NCCL_IBVERBS_LIB names the library (default
// libibverbs.so.1, found by the dynamic loader's rules).
//
// Only the exported functions are bound here. The data-path calls of
// <infiniband/verbs.h> (ibv_post_send, ibv_post_recv, ibv_poll_cq) are inline
// functions that go through the context's ops table, so they are called as
// the header defines them. ibv_query_port is called through its exported
// symbol with a full, zeroed ibv_port_attr, as the header's inline wrapper
// does for providers without the extended query.
#pragma once

#include <infiniband/verbs.h>

#include <string>

#include "common/status.h"

namespace theseus::transport::ib {

struct IbVerbs {
  ibv_device** (*getDeviceList)(int* n) = nullptr;
  void (*freeDeviceList)(ibv_device** list) = nullptr;
  const char* (*getDeviceName)(ibv_device* dev) = nullptr;
  ibv_context* (*openDevice)(ibv_device* dev) = nullptr;
  int (*closeDevice)(ibv_context* ctx) = nullptr;
  int (*queryDevice)(ibv_context* ctx, ibv_device_attr* attr) = nullptr;
  int (*queryPortRaw)(ibv_context* ctx, uint8_t port, struct _compat_ibv_port_attr* attr) = nullptr;
  int (*queryGid)(ibv_context* ctx, uint8_t port, int index, ibv_gid* gid) = nullptr;
  // Optional (rdma-core >= 32): the GID's type (IB, RoCE v1, RoCE v2).
  int (*queryGidEx)(ibv_context* ctx, uint32_t port, uint32_t index, ibv_gid_entry* entry, uint32_t flags,
                    size_t size) = nullptr;
  ibv_pd* (*allocPd)(ibv_context* ctx) = nullptr;
  int (*deallocPd)(ibv_pd* pd) = nullptr;
  ibv_mr* (*regMr)(ibv_pd* pd, void* addr, size_t length, int access) = nullptr;
  int (*deregMr)(ibv_mr* mr) = nullptr;
  // Optional (rdma-core >= 34): device memory registered through its dma-buf (GPUDirect RDMA).
  ibv_mr* (*regDmaBufMr)(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd, int access) = nullptr;
  ibv_cq* (*createCq)(ibv_context* ctx, int cqe, void* cqContext, ibv_comp_channel* channel, int vector) = nullptr;
  int (*destroyCq)(ibv_cq* cq) = nullptr;
  ibv_qp* (*createQp)(ibv_pd* pd, ibv_qp_init_attr* attr) = nullptr;
  int (*modifyQp)(ibv_qp* qp, ibv_qp_attr* attr, int mask) = nullptr;
  int (*destroyQp)(ibv_qp* qp) = nullptr;
  int (*getAsyncEvent)(ibv_context* ctx, ibv_async_event* event) = nullptr;
  void (*ackAsyncEvent)(ibv_async_event* event) = nullptr;
  const char* (*wcStatusStr)(ibv_wc_status status) = nullptr;
  const char* (*eventTypeStr)(ibv_event_type type) = nullptr;

  int queryPort(ibv_context* ctx, uint8_t port, ibv_port_attr* attr) const;
  const char* statusText(ibv_wc_status status) const;
  std::string path;  // what was loaded

  // The process's verbs library, loaded once; an error (logged by the caller) when
  // there is none or it lacks a required function.
  static Result<const IbVerbs*> get();
};

}  // namespace theseus::transport::ib
