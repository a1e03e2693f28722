#include "comm/registrations.h"

#include <atomic>
#include <unordered_set>

#include "common/log.h"
#include "device/cuda_driver.h"
#include "transport/shared_memory_registry.h"

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

// Says once per process and call what a registration does here, for the
// buffer kind the caller registered (docs/nccl-compatibility.md).
void noteEffect(const char* call, const void* buff, size_t size) {
  static std::atomic<bool> notedShared{false}, notedOther{false}, notedDevice{false};
  const device::CudaDriver* cuda = device::CudaDriver::get();
  if (buff != nullptr && cuda != nullptr && cuda->isDevicePointer(buff)) {
    if (!notedDevice.exchange(true))
      TH_INFO(log::kReg, "%s: device memory; with the CUDA executor, local peers' kernels read it in "
              "place through CUDA IPC (VMM memory: a file descriptor) once they mapped it (from their next group on)",
              call);
    return;
  }
  transport::SharedRegionRef ref;
  const bool shared = buff != nullptr && transport::SharedMemoryRegistry::instance().find(buff, size, &ref);
  std::atomic<bool>& noted = shared ? notedShared : notedOther;
  if (noted.exchange(true)) return;
  if (shared)
    TH_INFO(log::kReg, "%s: the buffer comes from ncclMemAlloc, which local peers already read in place; "
            "registering it changes nothing", call);
  else
    TH_INFO(log::kReg, "%s: recorded; the IB network (and net plugins with THESEUS_NET_ZERO_COPY=1) send from "
            "it without a copy; local peers cannot map memory that ncclMemAlloc did not allocate (allocate with "
            "ncclMemAlloc for in-place reads between local ranks)", call);
}

}  // namespace

Registrations::~Registrations() {
  std::lock_guard<std::mutex> lock(liveMutex());
  for (const auto& w : windows_) live().erase(w.get());
}

Status Registrations::registerBuffer(void* buff, size_t size, void** handle) {
  if (buff == nullptr && size > 0) return invalidArgument("ncclCommRegister: buffer is NULL");
  noteEffect("ncclCommRegister", buff, size);
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
  noteEffect("ncclCommWindowRegister", buff, size);
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
