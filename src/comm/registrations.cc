#include "comm/registrations.h"

namespace theseus::comm {

Status Registrations::registerBuffer(void* buff, size_t size, void** handle) {
  if (buff == nullptr && size > 0) return invalidArgument("ncclCommRegister: buffer is NULL");
  std::lock_guard<std::mutex> lock(mu_);
  buffers_.push_back(std::make_unique<Range>(buff, size));
  *handle = buffers_.back().get();
  return Status::ok();
}

Status Registrations::deregisterBuffer(void* handle) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = buffers_.begin(); it != buffers_.end(); ++it) {
    if (it->get() == handle) {
      buffers_.erase(it);
      return Status::ok();
    }
  }
  return invalidUsage("ncclCommDeregister: could not find handle %p", handle);
}

Status Registrations::registerWindow(void* buff, size_t size, ncclWindow_t* win, int flags) {
  if (flags != NCCL_WIN_DEFAULT && flags != NCCL_WIN_COLL_SYMMETRIC)
    return invalidArgument("ncclCommWindowRegister: invalid flags 0x%x", flags);
  std::lock_guard<std::mutex> lock(mu_);
  windows_.push_back(std::make_unique<Range>(buff, size));
  *win = reinterpret_cast<ncclWindow_t>(windows_.back().get());
  return Status::ok();
}

Status Registrations::deregisterWindow(ncclWindow_t win) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = windows_.begin(); it != windows_.end(); ++it) {
    if (reinterpret_cast<ncclWindow_t>(it->get()) == win) {
      windows_.erase(it);
      return Status::ok();
    }
  }
  return invalidUsage("ncclCommWindowDeregister: unknown window %p", static_cast<void*>(win));
}

}  // namespace theseus::comm
