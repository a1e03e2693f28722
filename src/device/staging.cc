#include "device/staging.h"

#include <algorithm>
#include <memory>

#include "comm/communicator.h"
#include "device/cuda_driver.h"
#include "exec/reduce.h"
#include "schedule/ir.h"
#include "transport/shared_memory_registry.h"

namespace theseus::device {
namespace {

// Staging memory, reused across calls on this thread (grows, never shrinks).
class Pool {
 public:
  ~Pool() {
    for (auto& b : blocks_) (void)transport::freeShared(b.ptr);
  }
  void reset() { used_ = 0; }
  Result<char*> take(size_t bytes) {
    bytes = (bytes + 255) & ~size_t(255);
    while (used_ < blocks_.size() && blocks_[used_].size < bytes) ++used_;  // skip blocks too small
    if (used_ == blocks_.size()) {
      void* p;
      TH_ASSIGN(p, transport::allocShared(std::max<size_t>(bytes, 1 << 20)));
      blocks_.push_back({p, std::max<size_t>(bytes, 1 << 20)});
    }
    return static_cast<char*>(blocks_[used_++].ptr);
  }

 private:
  struct Block {
    void* ptr;
    size_t size;
  };
  std::vector<Block> blocks_;
  size_t used_ = 0;
};

thread_local Pool tPool;

// Bytes of the send and receive buffers of an operation on `rank` of `n`.
void bufferBytes(const comm::OpDesc& op, int n, size_t* send, size_t* recv) {
  size_t esz = exec::typeSize(op.type);
  if (op.kind != comm::OpDesc::Kind::kCollective) {
    *send = *recv = op.count * esz;
    return;
  }
  *send = op.count * schedule::inputBlocks(op.collective, n) * esz;
  *recv = op.count * schedule::outputBlocks(op.collective, n) * esz;
}

}  // namespace

Status Staging::stageIn(std::vector<comm::CommOps>& work) {
  staged_.clear();
  const CudaDriver* cuda = CudaDriver::get();
  if (cuda == nullptr) return Status::ok();
  tPool.reset();
  for (auto& w : work) {
    int n = w.comm->nranks();
    for (auto& op : w.ops) {
      bool devSend = cuda->isDevicePointer(op.sendbuff);
      bool devRecv = cuda->isDevicePointer(op.recvbuff);
      if (!devSend && !devRecv) continue;
      if (cuda->isCapturing(op.stream))
        return invalidUsage("operations on device buffers cannot be captured into a CUDA graph yet: Theseus runs "
                            "them through host memory (synchronously)");
      TH_CHECK(cuda->synchronize(op.stream).withContext("waiting for the operation's stream"));
      size_t sendBytes, recvBytes;
      bufferBytes(op, n, &sendBytes, &recvBytes);
      bool sameBuffer = op.sendbuff == op.recvbuff;
      char* hostSend = nullptr;
      if (devSend && sendBytes > 0) {
        TH_ASSIGN(hostSend, tPool.take(std::max(sendBytes, sameBuffer ? recvBytes : 0)));
        TH_CHECK(cuda->copyToHost(hostSend, op.sendbuff, sendBytes));
        op.sendbuff = hostSend;
      }
      if (devRecv && recvBytes > 0) {
        char* hostRecv = sameBuffer && hostSend != nullptr ? hostSend : nullptr;
        if (hostRecv == nullptr) {
          TH_ASSIGN(hostRecv, tPool.take(recvBytes));
        }
        staged_.push_back({op.recvbuff, hostRecv, recvBytes});
        op.recvbuff = hostRecv;
      }
    }
  }
  return Status::ok();
}

Status Staging::stageOut() {
  if (staged_.empty()) return Status::ok();
  const CudaDriver* cuda = CudaDriver::get();
  for (const Staged& s : staged_) TH_CHECK(cuda->copyToDevice(s.deviceRecv, s.hostRecv, s.recvBytes));
  staged_.clear();
  return Status::ok();
}

}  // namespace theseus::device
