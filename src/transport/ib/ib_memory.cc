#include "transport/ib/ib_memory.h"

#include <fcntl.h>
#include <unistd.h>

namespace theseus::transport::ib {

IbMemory::IbMemory(void* data, size_t bytes, int dmaBufFd, uint64_t offset)
    : data_(data),
      bytes_(bytes),
      device_(true),
      dmaBuf_(true),
      dmaBufFd_(fcntl(dmaBufFd, F_DUPFD_CLOEXEC, 0)),
      dmaBufOffset_(offset) {}

IbMemory::~IbMemory() {
  for (const Registration& r : registrations_) r.cache->release(r.mr);
  if (dmaBufFd_ >= 0) close(dmaBufFd_);
}

Result<ibv_mr*> IbMemory::on(const IbDevice* dev) {
  std::lock_guard lock(mu_);
  for (const Registration& r : registrations_)
    if (r.cache == dev->mrs) return r.mr;
  if (dmaBuf_ && dmaBufFd_ < 0) return systemError("IB: the dma-buf descriptor could not be kept (out of descriptors)");
  TH_ASSIGN(ibv_mr* mr, dmaBuf_ ? dev->mrs->acquireDmaBuf(data_, bytes_, dmaBufFd_, dmaBufOffset_)
                                       : dev->mrs->acquire(data_, bytes_));
  registrations_.push_back({dev->mrs, mr});
  return mr;
}

}  // namespace theseus::transport::ib
