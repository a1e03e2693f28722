#include "comm/classify.h"

#include <algorithm>
#include <array>

#include "comm/communicator.h"
#include "common/knobs.h"
#include "common/readable.h"
#include "device/cuda_driver.h"
#include "exec/device/device_executor.h"
#include "exec/reduce.h"
#include "exec/staging.h"
#include "schedule/ir.h"

namespace theseus::comm {
namespace {

const BoolKnob kCheckPointers(
    "NCCL_CHECK_POINTERS", false,
    "1: in a process without CUDA too, every buffer is checked to be readable memory before every call runs (two "
    "system calls per buffer), so a freed or made-up pointer fails with ncclInvalidArgument instead of crashing; with "
    "CUDA loaded, buffers CUDA does not know are always checked, those of recent calls taken as still readable");

// An operation's buffer with the bytes it spans, and whether this rank uses it.
struct Buf {
  const void* p;
  size_t bytes;
  const char* name;
  bool used;  // false for a buffer only the root uses (broadcast's and scatter's input, reduce's and gather's output)
};
std::array<Buf, 2> buffersOf(const OpDesc& op, int n, int rank) {
  const size_t esz = exec::typeSize(op.type);
  const bool coll = op.kind == OpDesc::Kind::kCollective;
  const size_t sendBytes = op.count * esz * (coll ? schedule::inputBlocks(op.collective, n) : 1);
  const size_t recvBytes = op.count * esz * (coll ? schedule::outputBlocks(op.collective, n) : 1);
  using C = schedule::Collective;
  const bool nonRoot = coll && rank != op.root;
  const bool sendUsed = !(nonRoot && (op.collective == C::kBroadcast || op.collective == C::kScatter));
  const bool recvUsed = !(nonRoot && (op.collective == C::kReduce || op.collective == C::kGather));
  return {Buf{op.sendbuff, sendBytes, "sendbuff", sendUsed}, Buf{op.recvbuff, recvBytes, "recvbuff", recvUsed}};
}

Status notReadable(const Buf& b, int rank) {
  return invalidArgument("%s %p (%zu bytes, rank %d) is neither memory CUDA knows nor readable host memory "
                         "of this process: freed, or never allocated?",
                         b.name, b.p, b.bytes, rank);
}

// NCCL_CHECK_POINTERS in a process without CUDA: every buffer a rank uses must be readable.
Status checkHostPointers(const std::vector<CommOps>& work) {
  for (const auto& w : work)
    for (const auto& op : w.ops)
      for (const Buf& b : buffersOf(op, w.comm->nranks(), w.comm->rank()))
        if (b.p != nullptr && b.used && !rangeIsReadable(b.p, b.bytes)) return notReadable(b, w.comm->rank());
  return Status::ok();
}

}  // namespace

// Where each operation's buffers live (processes that never loaded the CUDA
// driver pay one cheap check per group), and what only that tells: a device
// buffer of another device than the communicator's, a buffer that is no memory
// at all (CUDA does not know it and it is not readable: a freed device buffer,
// which the host path would crash on), a stream of another context, and a
// group that mixes device buffers with pageable host memory (no kernel can
// reach that memory; NCCL would fault). Each is refused before anything runs.
// Each stream's capture state is read once per group into `captures`
// (refuseCapture and the executor use it), and each stream is checked once per
// group and device: a group of many operations on one stream asks the driver
// about it twice, not twice per operation.
Status classifyGroup(std::vector<CommOps>& work, std::vector<device::StreamCapture>* captures,
                     device::MemoryKindMask* kinds, bool* captured) {
  captures->clear();
  *kinds = 0;
  *captured = false;
  const device::CudaDriver* cuda = device::CudaDriver::get();
  if (cuda == nullptr) {  // no device memory can exist
    for (auto& w : work) w.kinds = 0;
    static const bool checkPointers = kCheckPointers.get();
    return checkPointers ? checkHostPointers(work) : Status::ok();
  }
  const OpDesc* pageable = nullptr;
  const OpDesc* onDevice = nullptr;
  struct Checked {
    cudaStream_t stream;
    int device;
  };
  thread_local std::vector<Checked> checked;  // (stream, communicator's device) pairs already checked
  checked.clear();
  thread_local ReadableRanges readable;  // host buffers found readable lately: a warm call makes no system call
  for (auto& w : work) {
    w.kinds = 0;
    const bool cudaRunsPinned = w.comm->deviceExecutor() == exec::DeviceExecutorMode::kCuda;
    const OpDesc* kernelOp = nullptr;  // one whose buffers the CUDA executor runs (device or pinned)
    const OpDesc* pageableOp = nullptr;
    for (auto& op : w.ops) {
      const device::CudaDriver::MemoryInfo send = cuda->memoryInfo(op.sendbuff);
      const device::CudaDriver::MemoryInfo recv = op.recvbuff == op.sendbuff ? send : cuda->memoryInfo(op.recvbuff);
      const std::array<Buf, 2> bufs = buffersOf(op, w.comm->nranks(), w.comm->rank());
      // A buffer this rank does not use takes the kind of the one it uses: only used buffers decide how
      // the operation is lowered (its peers, whose unused buffers may be anything, lower it alike).
      op.sendMemory = bufs[0].used || !bufs[1].used ? send.kind : recv.kind;
      op.recvMemory = bufs[1].used || !bufs[0].used ? recv.kind : send.kind;
      const device::CudaDriver::MemoryInfo infos[] = {send, recv};
      for (int i = 0; i < 2; ++i) {
        const Buf& b = bufs[i];
        if (b.p == nullptr || b.bytes == 0) continue;
        if (b.used) {
          *kinds |= device::maskOf(infos[i].kind);
          w.kinds |= device::maskOf(infos[i].kind);
          if (infos[i].kind == device::MemoryKind::kDevice ||
              (cudaRunsPinned && infos[i].kind == device::MemoryKind::kHostPinned))
            kernelOp = &op;
          if (infos[i].kind == device::MemoryKind::kHost) pageableOp = &op;
        }
        if (infos[i].kind == device::MemoryKind::kHost) {
          if (b.used && !readable.check(b.p, b.bytes)) return notReadable(b, w.comm->rank());
          pageable = &op;
        }
        if (infos[i].kind != device::MemoryKind::kDevice) continue;
        onDevice = &op;
        const int dev = infos[i].device;
        if (w.comm->cudaDev() >= 0 && dev >= 0 && dev != w.comm->cudaDev())
          return invalidArgument("%s %p is memory of CUDA device %d, but the communicator (rank %d) belongs to device %d",
                                 b.name, b.p, dev, w.comm->rank(), w.comm->cudaDev());
      }
      if (op.stream == nullptr) continue;  // the legacy stream: valid on any device, never captured
      const device::StreamCapture* capture = device::findCapture(captures, op.stream);
      if (capture == nullptr) {
        captures->push_back(cuda->captureState(op.stream));
        capture = &captures->back();
        *captured |= capture->status != device::StreamCapture::Status::kNone;
      }
      // The stream must be the communicator's device's (NCCL's rule; within a group the calling thread's
      // current device does not matter: one thread may drive communicators on several devices).
      // Not while the stream is being captured: on an H200 (driver 580) cuStreamGetDevice refuses a capturing
      // stream and invalidates the capture (tests/gpu/capture_probe.cu; cudaStreamEndCapture then fails), so a
      // captured operation's stream is checked by the kernel launch itself (CUDA refuses there a stream of
      // another device's context).
      if (onDevice != &op || capture->status != device::StreamCapture::Status::kNone) continue;
      const int commDev = w.comm->cudaDev();
      if (std::any_of(checked.begin(), checked.end(),
                      [&](const Checked& c) { return c.stream == op.stream && c.device == commDev; }))
        continue;
      const int sdev = cuda->streamDevice(op.stream);
      if (sdev >= 0 && commDev >= 0 && sdev != commDev)
        return invalidUsage("the stream %p belongs to CUDA device %d, but the communicator (rank %d) belongs to "
                            "device %d", static_cast<void*>(op.stream), sdev, w.comm->rank(), commDev);
      if (sdev == -2 && !cuda->streamInCurrentContext(op.stream))  // a driver that cannot tell the device
        return invalidUsage("the stream %p belongs to another CUDA context than the calling thread's",
                            static_cast<void*>(op.stream));
      checked.push_back({op.stream, commDev});
    }
    // The CUDA executor runs this communicator's operations on device and pinned memory over device FIFOs,
    // the host executor those on pageable memory over host connections: one group cannot be both.
    if (kernelOp != nullptr && pageableOp != nullptr && kernelOp != pageableOp)
      return invalidUsage("a group on one communicator (rank %d) mixes operations on device or pinned host memory, "
                          "which run on the GPU, with an operation on pageable host memory (buffer %p), which runs on "
                          "the CPU; put them in separate groups, or use device or pinned buffers throughout",
                          w.comm->rank(),
                          pageableOp->sendMemory == device::MemoryKind::kHost ? pageableOp->sendbuff
                                                                            : pageableOp->recvbuff);
  }
  if (onDevice != nullptr && pageable != nullptr)
    return invalidUsage("a group mixes device buffers and pageable host memory (one operation's buffer at %p): device "
                        "code cannot reach pageable memory; use device buffers, or pinned host memory "
                        "(cudaHostAlloc/cudaHostRegister)",
                        pageable->sendMemory == device::MemoryKind::kHost ? pageable->sendbuff : pageable->recvbuff);
  return Status::ok();
}

// A group on streams being captured into a CUDA graph, for an executor that
// runs it when called (host memory, the staging path): a replay could not
// repeat it. Refused before anything runs, so the communicator stays usable.
Status refuseCapture(const std::vector<CommOps>& work, const std::vector<device::StreamCapture>& captures,
                     device::MemoryKindMask memory, const std::string& whyStaged) {
  for (const auto& w : work)
    for (const auto& op : w.ops) {
      const device::StreamCapture* c = device::findCapture(&captures, op.stream);
      if (c == nullptr || c->status == device::StreamCapture::Status::kNone) continue;
      if ((memory & ~device::kHostAccessibleKinds) == 0)
        return invalidUsage("an operation on host memory (buffer %p) is being captured into a CUDA graph: "
                            "host-memory operations run on the CPU when called, so a replay could not repeat "
                            "them; capture operations on device buffers (the CUDA executor)",
                            op.sendbuff != nullptr ? op.sendbuff : op.recvbuff);
      return exec::stagingCaptureError(whyStaged);
    }
  return Status::ok();
}

}  // namespace theseus::comm
