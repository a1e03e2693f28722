// Memory registrations of one protection domain, shared by every connection
// of the process that uses the HCA.
//
// Registering memory pins it and programs the HCA: it costs far more than a
// message, so a range is registered once — page-aligned, covering the
// request — and every later registration inside it takes a reference to the
// same MR. The last release deregisters it (a freed and reused address must
// never keep a stale registration). Registrations are made with local write,
// remote write and remote read access.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <mutex>
#include <vector>

#include "common/status.h"
#include "transport/ib/ib_verbs.h"

namespace theseus::transport::ib {

class MrCache {
 public:
  MrCache(const IbVerbs* verbs, ibv_pd* pd) : verbs_(verbs), pd_(pd) {}
  ~MrCache();
  MrCache(const MrCache&) = delete;
  MrCache& operator=(const MrCache&) = delete;

  Result<ibv_mr*> acquire(const void* data, size_t bytes);
  // Device memory through its dma-buf (GPUDirect RDMA): `fd` from `offset` holds [data, data + bytes),
  // registered exactly (data is the MR's iova) and shared only by the same range.
  Result<ibv_mr*> acquireDmaBuf(const void* data, size_t bytes, int fd, uint64_t offset);
  void release(ibv_mr* mr);

  struct Stats {
    uint64_t registrations = 0;  // ibv_reg_mr and ibv_reg_dmabuf_mr calls
    uint64_t hits = 0;           // acquisitions served by an existing MR
    size_t live = 0;             // MRs registered now
  };
  Stats stats() const;

 private:
  struct Entry {
    uintptr_t begin;
    uintptr_t end;
    ibv_mr* mr;
    int refs;
    bool dmaBuf = false;
  };
  const IbVerbs* verbs_;
  ibv_pd* pd_;
  mutable std::mutex mu_;
  std::vector<Entry> entries_;
  Stats stats_;
};

}  // namespace theseus::transport::ib
