// What regMr hands out: one buffer's registrations, one per protection domain
// the connection has used.
//
// A connection starts on its home HCA port and may move to another HCA of the
// host when that port fails (ib_comm.h); the buffer's keys are per protection
// domain, so the registration in the new HCA's domain is made the first time
// the connection uses the buffer there (through that HCA's MR cache, so a
// range is still registered once per HCA) and kept until deregMr.
#pragma once

#include <infiniband/verbs.h>

#include <mutex>
#include <vector>

#include "common/status.h"
#include "transport/ib/ib_devices.h"

namespace theseus::transport::ib {

class IbMemory {
 public:
  // Host memory, or device memory the HCA reaches by its address (nvidia-peermem).
  IbMemory(void* data, size_t bytes, bool device = false) : data_(data), bytes_(bytes), device_(device) {}
  // Device memory through a dma-buf: a duplicate of `fd` is kept, for the registration on another
  // HCA after a move.
  IbMemory(void* data, size_t bytes, int dmaBufFd, uint64_t offset);
  ~IbMemory();
  // GPU memory: the CPU cannot read it, so messages from it cannot take the TCP fallback.
  bool device() const { return device_; }
  IbMemory(const IbMemory&) = delete;
  IbMemory& operator=(const IbMemory&) = delete;

  // The buffer's registration in `dev`'s protection domain, made on first use.
  Result<ibv_mr*> on(const IbDevice* dev);

 private:
  struct Registration {
    MrCache* cache;
    ibv_mr* mr;
  };
  std::mutex mu_;
  void* data_;
  size_t bytes_;
  bool device_ = false;
  bool dmaBuf_ = false;
  int dmaBufFd_ = -1;  // dmaBuf_: our duplicate (-1: duplicating it failed)
  uint64_t dmaBufOffset_ = 0;
  std::vector<Registration> registrations_;  // one per MR cache (protection domain); usually one
};

}  // namespace theseus::transport::ib
