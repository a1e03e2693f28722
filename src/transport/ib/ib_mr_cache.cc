#include "transport/ib/ib_mr_cache.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"

namespace theseus::transport::ib {

MrCache::~MrCache() {
  std::lock_guard lock(mu_);
  for (Entry& e : entries_) verbs_->deregMr(e.mr);
}

Result<ibv_mr*> MrCache::acquire(const void* data, size_t bytes) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t addr = reinterpret_cast<uintptr_t>(data);
  const uintptr_t begin = addr & ~(page - 1);
  const uintptr_t end = (addr + (bytes == 0 ? 1 : bytes) + page - 1) & ~(page - 1);
  std::lock_guard lock(mu_);
  for (Entry& e : entries_) {
    if (!e.dmaBuf && e.begin <= begin && end <= e.end) {
      ++e.refs;
      ++stats_.hits;
      return e.mr;
    }
  }
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  errno = 0;
  ibv_mr* mr = verbs_->regMr(pd_, reinterpret_cast<void*>(begin), end - begin, access);
  if (mr == nullptr)
    return errnoStatus(errno != 0 ? errno : ENOMEM, "IB: ibv_reg_mr of %zu bytes at %p failed",
                       static_cast<size_t>(end - begin), reinterpret_cast<void*>(begin));
  ++stats_.registrations;
  entries_.push_back(Entry{begin, end, mr, 1, false});
  stats_.live = entries_.size();
  TH_INFO(log::kNet | log::kReg, "IB: registered %zu bytes at %p (lkey 0x%x, rkey 0x%x)",
          static_cast<size_t>(end - begin), reinterpret_cast<void*>(begin), mr->lkey, mr->rkey);
  return mr;
}

Result<ibv_mr*> MrCache::acquireDmaBuf(const void* data, size_t bytes, int fd, uint64_t offset) {
  if (verbs_->regDmaBufMr == nullptr)
    return invalidUsage("IB: this libibverbs has no ibv_reg_dmabuf_mr (rdma-core 34 or later registers dma-bufs)");
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t end = begin + bytes;
  std::lock_guard lock(mu_);
  for (Entry& e : entries_) {
    if (e.dmaBuf && e.begin == begin && e.end == end) {
      ++e.refs;
      ++stats_.hits;
      return e.mr;
    }
  }
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  errno = 0;
  ibv_mr* mr = verbs_->regDmaBufMr(pd_, offset, bytes, begin, fd, access);
  if (mr == nullptr)
    return errnoStatus(errno != 0 ? errno : ENOMEM, "IB: ibv_reg_dmabuf_mr of %zu bytes of device memory at %p failed",
                       bytes, data);
  ++stats_.registrations;
  entries_.push_back(Entry{begin, end, mr, 1, true});
  stats_.live = entries_.size();
  TH_INFO(log::kNet | log::kReg, "IB: registered %zu bytes of device memory at %p through its dma-buf (lkey 0x%x)",
          bytes, data, mr->lkey);
  return mr;
}

void MrCache::release(ibv_mr* mr) {
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].mr != mr) continue;
    if (--entries_[i].refs == 0) {
      if (verbs_->deregMr(mr) != 0) TH_WARN("IB: ibv_dereg_mr failed: %s", strerror(errno));
      entries_.erase(entries_.begin() + static_cast<long>(i));
      stats_.live = entries_.size();
    }
    return;
  }
  TH_WARN("IB: release of an MR this cache does not hold (%p)", static_cast<void*>(mr));
}

MrCache::Stats MrCache::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace theseus::transport::ib
