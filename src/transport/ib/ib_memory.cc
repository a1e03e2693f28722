#include "transport/ib/ib_memory.h"

namespace theseus::transport::ib {

IbMemory::~IbMemory() {
  for (const Registration& r : registrations_) r.cache->release(r.mr);
}

Result<ibv_mr*> IbMemory::on(const IbDevice* dev) {
  std::lock_guard lock(mu_);
  for (const Registration& r : registrations_)
    if (r.cache == dev->mrs) return r.mr;
  TH_ASSIGN(ibv_mr* mr, dev->mrs->acquire(data_, bytes_));
  registrations_.push_back({dev->mrs, mr});
  return mr;
}

}  // namespace theseus::transport::ib
