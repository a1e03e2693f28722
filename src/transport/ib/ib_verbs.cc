#include "transport/ib/ib_verbs.h"

#include <dlfcn.h>

#include <cstring>
#include <mutex>

#include "common/knobs.h"

namespace theseus::transport::ib {
namespace {

const StringKnob kVerbsLib("NCCL_IBVERBS_LIB", "libibverbs.so.1",
                           "The verbs library the IB network loads (name or path; rdma-core's libibverbs.so.1 by "
                           "default; tests name the test double)");

template <class F>
bool bindSymbol(void* handle, const char* name, F* out, std::string* missing) {
  void* sym = dlsym(handle, name);
  if (sym == nullptr) {
    if (missing != nullptr && missing->empty()) *missing = name;
    return false;
  }
  *out = reinterpret_cast<F>(sym);
  return true;
}

Result<const IbVerbs*> load() {
  const std::string path = kVerbsLib.get();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return systemError("IB: cannot load %s (%s)", path.c_str(), why != nullptr ? why : "unknown error");
  }
  auto* v = new IbVerbs();  // kept for the process's lifetime, as the library is
  v->path = path;
  std::string missing;
  bindSymbol(handle, "ibv_get_device_list", &v->getDeviceList, &missing);
  bindSymbol(handle, "ibv_free_device_list", &v->freeDeviceList, &missing);
  bindSymbol(handle, "ibv_get_device_name", &v->getDeviceName, &missing);
  bindSymbol(handle, "ibv_open_device", &v->openDevice, &missing);
  bindSymbol(handle, "ibv_close_device", &v->closeDevice, &missing);
  bindSymbol(handle, "ibv_query_device", &v->queryDevice, &missing);
  bindSymbol(handle, "ibv_query_port", &v->queryPortRaw, &missing);
  bindSymbol(handle, "ibv_query_gid", &v->queryGid, &missing);
  bindSymbol(handle, "_ibv_query_gid_ex", &v->queryGidEx, nullptr);
  bindSymbol(handle, "ibv_alloc_pd", &v->allocPd, &missing);
  bindSymbol(handle, "ibv_dealloc_pd", &v->deallocPd, &missing);
  bindSymbol(handle, "ibv_reg_mr", &v->regMr, &missing);
  bindSymbol(handle, "ibv_dereg_mr", &v->deregMr, &missing);
  bindSymbol(handle, "ibv_reg_dmabuf_mr", &v->regDmaBufMr, nullptr);
  bindSymbol(handle, "ibv_create_cq", &v->createCq, &missing);
  bindSymbol(handle, "ibv_destroy_cq", &v->destroyCq, &missing);
  bindSymbol(handle, "ibv_create_qp", &v->createQp, &missing);
  bindSymbol(handle, "ibv_modify_qp", &v->modifyQp, &missing);
  bindSymbol(handle, "ibv_destroy_qp", &v->destroyQp, &missing);
  bindSymbol(handle, "ibv_get_async_event", &v->getAsyncEvent, &missing);
  bindSymbol(handle, "ibv_ack_async_event", &v->ackAsyncEvent, &missing);
  bindSymbol(handle, "ibv_wc_status_str", &v->wcStatusStr, &missing);
  bindSymbol(handle, "ibv_event_type_str", &v->eventTypeStr, &missing);
  if (!missing.empty()) {
    dlclose(handle);
    std::string where = path;
    delete v;
    return systemError("IB: %s has no %s: not a usable libibverbs", where.c_str(), missing.c_str());
  }
  return static_cast<const IbVerbs*>(v);
}

}  // namespace

int IbVerbs::queryPort(ibv_context* ctx, uint8_t port, ibv_port_attr* attr) const {
  memset(attr, 0, sizeof(*attr));
  return queryPortRaw(ctx, port, reinterpret_cast<struct _compat_ibv_port_attr*>(attr));
}

const char* IbVerbs::statusText(ibv_wc_status status) const {
  const char* s = wcStatusStr != nullptr ? wcStatusStr(status) : nullptr;
  return s != nullptr ? s : "unknown status";
}

Result<const IbVerbs*> IbVerbs::get() {
  static std::once_flag once;
  static Result<const IbVerbs*>* loaded = nullptr;
  std::call_once(once, [] { loaded = new Result<const IbVerbs*>(load()); });
  return *loaded;
}

}  // namespace theseus::transport::ib
