#include "comm/registrations.h"

#include <unordered_set>

namespace theseus::comm {
namespace {

// Every live window of the process, so handles passed without their
// communicator can be checked before use.
std::mutex& liveMutex() {
  static auto* m = new std::mutex;
  return *m;
}
std::unordered_set<const Window*>& live() {
  static auto* s = new std::unordered_set<const Window*>;
  return *s;
}

constexpr int kKnownWindowFlags = NCCL_WIN_COLL_SYMMETRIC | NCCL_WIN_STRICT_ORDERING;

}  // namespace

Registrations::~Registrations() {
  std::lock_guard<std::mutex> lock(liveMutex());
  for (const auto& w : windows_) live().erase(w.get());
}

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

Status Registrations::registerWindow(Communicator* comm, int rank, int nranks, void* buff, size_t size,
                                     ncclWindow_t* win, int flags) {
  if ((flags & ~kKnownWindowFlags) != 0)
    return invalidArgument("ncclCommWindowRegister: invalid flags 0x%x (NCCL_WIN_DEFAULT, NCCL_WIN_COLL_SYMMETRIC, "
                           "NCCL_WIN_STRICT_ORDERING)", flags);
  auto w = std::make_unique<Window>();
  w->comm = comm;
  w->userPtr = buff;
  w->size = size;
  w->flags = flags;
  w->rank = rank;
  w->nranks = nranks;
  std::lock_guard<std::mutex> lock(mu_);
  {
    std::lock_guard<std::mutex> liveLock(liveMutex());
    live().insert(w.get());
  }
  *win = reinterpret_cast<ncclWindow_t>(w.get());
  windows_.push_back(std::move(w));
  return Status::ok();
}

Status Registrations::deregisterWindow(ncclWindow_t win) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = windows_.begin(); it != windows_.end(); ++it) {
    if (reinterpret_cast<ncclWindow_t>(it->get()) == win) {
      {
        std::lock_guard<std::mutex> liveLock(liveMutex());
        live().erase(it->get());
      }
      windows_.erase(it);
      return Status::ok();
    }
  }
  return invalidUsage("ncclCommWindowDeregister: unknown window %p", static_cast<void*>(win));
}

Result<const Window*> Registrations::window(ncclWindow_t win) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& w : windows_)
    if (reinterpret_cast<ncclWindow_t>(w.get()) == win) return static_cast<const Window*>(w.get());
  return invalidArgument("window %p was not registered on this communicator (or was deregistered)",
                         static_cast<void*>(win));
}

Result<Window> windowOf(ncclWindow_t win) {
  if (win == nullptr) return invalidArgument("window is NULL");
  std::lock_guard<std::mutex> lock(liveMutex());
  auto it = live().find(reinterpret_cast<const Window*>(win));
  if (it == live().end())
    return invalidArgument("window %p is not a registered window (never registered, or deregistered)",
                           static_cast<void*>(win));
  return **it;
}

}  // namespace theseus::comm
