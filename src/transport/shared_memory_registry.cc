#include "transport/shared_memory_registry.h"

#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <mutex>

#include "common/knobs.h"
#include "common/log.h"

namespace theseus::transport {
namespace {

const BoolKnob kPrefault("THESEUS_MEM_PREFAULT", true,
                         "Pre-fault ncclMemAlloc host memory and shared scratch when allocating them (first "
                         "collectives then run at full speed)");

}  // namespace

SharedMemoryRegistry& SharedMemoryRegistry::instance() {
  // Never destroyed: buffers may be freed from atexit handlers or other statics.
  static SharedMemoryRegistry* registry = new SharedMemoryRegistry();
  return *registry;
}

std::string SharedMemoryRegistry::regionName(uint64_t id) {
  char name[48];
  snprintf(name, sizeof(name), "theseus-%016" PRIx64, id);
  return name;
}

std::string SharedMemoryRegistry::locatorFor(const SharedRegionRef& ref) {
  return "fd:" + std::to_string(ref.pid) + ":" + std::to_string(ref.fd) + ":" + regionName(ref.id);
}

Result<SharedMemoryRegistry::Region> SharedMemoryRegistry::makeRegion(size_t size, bool prefault) {
  Region r;
  // Creator pid in the high bits, a never-repeating counter below: unique on the host.
  r.id = (static_cast<uint64_t>(getpid()) << 32) | (nextCounter_++ & 0xffffffffu);
  TH_ASSIGN(r.segment, ShmSegment::createMemfd(regionName(r.id), size));
  TH_CHECK(r.segment->reserve(0, r.segment->size()));
  if (prefault) r.segment->populate();
  return r;
}

Result<void*> SharedMemoryRegistry::allocate(size_t size) {
  if (size == 0) return invalidArgument("cannot allocate 0 bytes of shared memory");
  if (size > (size_t(1) << 46)) return invalidArgument("shared-memory allocation of %zu bytes is too large", size);
  std::unique_lock lock(mu_);
  TH_ASSIGN(Region r, makeRegion(size, kPrefault.get()));
  void* base = r.segment->base();
  TH_TRACE(log::kAlloc, "shared region %s: %zu bytes at %p", regionName(r.id).c_str(), r.segment->size(), base);
  regions_.emplace(reinterpret_cast<uintptr_t>(base), std::move(r));
  return base;
}

Status SharedMemoryRegistry::free(void* ptr) {
  std::unique_lock lock(mu_);
  auto addr = reinterpret_cast<uintptr_t>(ptr);
  auto it = regions_.find(addr);
  if (it == regions_.end()) {
    auto after = regions_.upper_bound(addr);
    if (after != regions_.begin()) {
      auto& [base, region] = *std::prev(after);
      if (addr < base + region.segment->size())
        return invalidArgument("%p lies inside the allocation at %p; free the pointer the allocation returned", ptr,
                               reinterpret_cast<void*>(base));
    }
    return invalidArgument("%p was not allocated by ncclMemAlloc (or was already freed)", ptr);
  }
  regions_.erase(it);  // unmaps; peers' mappings keep the memory until they drop them
  return Status::ok();
}

bool SharedMemoryRegistry::find(const void* p, size_t bytes, SharedRegionRef* out) const {
  auto addr = reinterpret_cast<uintptr_t>(p);
  std::shared_lock lock(mu_);
  auto after = regions_.upper_bound(addr);
  if (after == regions_.begin()) return false;
  const auto& [base, region] = *std::prev(after);
  size_t size = region.segment->size();
  if (addr - base >= size || bytes > size - (addr - base)) return false;
  out->pid = static_cast<pid_t>(region.id >> 32);  // the creator (this process), without a getpid() syscall
  out->fd = region.segment->fd();
  out->id = region.id;
  out->offset = addr - base;
  out->regionBytes = size;
  return true;
}

size_t SharedMemoryRegistry::regionCount() const {
  std::shared_lock lock(mu_);
  return regions_.size();
}

Result<std::string> SharedMemoryRegistry::probeLocator() {
  std::unique_lock lock(mu_);
  if (probe_ == nullptr) {
    TH_ASSIGN(Region r, makeRegion(pageSize(), false));
    probe_ = std::move(r.segment);
    probeId_ = r.id;
  }
  SharedRegionRef ref;
  ref.pid = getpid();
  ref.fd = probe_->fd();
  ref.id = probeId_;
  return locatorFor(ref);
}

Result<void*> allocShared(size_t size) { return SharedMemoryRegistry::instance().allocate(size); }
Status freeShared(void* ptr) { return SharedMemoryRegistry::instance().free(ptr); }

}  // namespace theseus::transport
