#include "exec/staging.h"

#include <algorithm>
#include <vector>

#include "common/log.h"
#include "device/cuda_driver.h"
#include "exec/reduce.h"
#include "transport/shared_memory_registry.h"

namespace theseus::exec {
namespace {

using device::MemoryKind;

// Mirror memory, reused across groups on this thread (grows, never shrinks).
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
      size_t size = std::max<size_t>(bytes, 1 << 20);
      void* p;
      TH_ASSIGN(p, transport::allocShared(size));
      blocks_.push_back({p, size});
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

// One merged device range and its host mirror.
struct Mirror {
  const char* device = nullptr;
  size_t bytes = 0;
  char* host = nullptr;
};

// The mirror holding device address p (p may be one past a range's end only
// for an empty piece, which is never dereferenced), or null.
const Mirror* mirrorOf(const std::vector<Mirror>& mirrors, const void* p) {
  const char* c = static_cast<const char*>(p);
  auto it = std::upper_bound(mirrors.begin(), mirrors.end(), c,
                             [](const char* v, const Mirror& m) { return v < m.device; });
  if (it == mirrors.begin()) return nullptr;
  --it;
  return c <= it->device + it->bytes ? &*it : nullptr;
}

template <typename T>
void rebase(const std::vector<Mirror>& mirrors, T*& p) {
  if (p == nullptr) return;
  if (const Mirror* m = mirrorOf(mirrors, p))
    p = reinterpret_cast<T*>(m->host + (reinterpret_cast<const char*>(p) - m->device));
}

class StagingExecutor final : public Executor {
 public:
  explicit StagingExecutor(const DeviceMemory& memory) : memory_(memory) {}
  const char* name() const override { return "staging"; }
  bool serves(device::MemoryKindMask) const override { return true; }
  Status run(std::vector<Lane>& lanes, const ExecOptions& options) override;

 private:
  Status waitForStreams(std::vector<Lane>& lanes) const;
  Status mirror(std::vector<Lane>& lanes, Pool& pool, std::vector<Mirror>* mirrors) const;
  Status copyBack(const std::vector<Lane>& lanes, const std::vector<Mirror>& mirrors,
                  const std::vector<std::vector<PlanBuffer>>& original) const;
  const DeviceMemory& memory_;
};

Status StagingExecutor::waitForStreams(std::vector<Lane>& lanes) const {
  std::vector<cudaStream_t> streams;
  for (Lane& lane : lanes)
    for (Plan* p : lane.plans)
      for (const PlanBuffer& b : p->buffers)
        if (b.memory == MemoryKind::kDevice && std::find(streams.begin(), streams.end(), b.stream) == streams.end())
          streams.push_back(b.stream);
  for (cudaStream_t s : streams)
    if (memory_.capturing(s))
      return stagingCaptureError();
  for (cudaStream_t s : streams) TH_CHECK(memory_.synchronize(s).withContext("waiting for the operation's stream"));
  return Status::ok();
}

Status StagingExecutor::mirror(std::vector<Lane>& lanes, Pool& pool, std::vector<Mirror>* mirrors) const {
  std::vector<Mirror> ranges;
  for (Lane& lane : lanes)
    for (Plan* p : lane.plans)
      for (const PlanBuffer& b : p->buffers)
        if (b.memory == MemoryKind::kDevice) ranges.push_back(Mirror{b.base, b.bytes, nullptr});
  std::sort(ranges.begin(), ranges.end(), [](const Mirror& a, const Mirror& b) { return a.device < b.device; });
  for (const Mirror& r : ranges) {
    if (!mirrors->empty() && r.device < mirrors->back().device + mirrors->back().bytes) {
      Mirror& m = mirrors->back();
      m.bytes = std::max<size_t>(m.bytes, static_cast<size_t>(r.device + r.bytes - m.device));
    } else {
      mirrors->push_back(r);
    }
  }
  for (Mirror& m : *mirrors) {
    TH_ASSIGN(m.host, pool.take(m.bytes));
    TH_CHECK(memory_.toHost(m.host, m.device, m.bytes).withContext("staging a device buffer in host memory"));
  }
  // Point every plan at the mirrors; deferred scalars in device memory are read now.
  for (Lane& lane : lanes) {
    lane.memory = 0;
    for (Plan* p : lane.plans) {
      for (PlanStep& st : p->steps) {
        rebase(*mirrors, st.src);
        rebase(*mirrors, st.dst);
      }
      rebase(*mirrors, p->divideDst);
      for (PlanBuffer& b : p->buffers) {
        if (b.memory != MemoryKind::kDevice) continue;
        rebase(*mirrors, b.base);
        b.memory = MemoryKind::kHost;
      }
      if (p->memory & device::maskOf(MemoryKind::kDevice))
        p->memory = (p->memory & ~device::maskOf(MemoryKind::kDevice)) | device::maskOf(MemoryKind::kHost);
      lane.memory |= p->memory;
      Reduction& r = p->reduction;
      if (r.scalarSource != nullptr && r.scalarMemory == MemoryKind::kDevice) {
        alignas(8) unsigned char value[8] = {};
        TH_CHECK(memory_.toHost(value, r.scalarSource, typeSize(r.type)).withContext("reading the PreMulSum scalar"));
        TH_CHECK(resolveScalar(r, value).withContext(p->describe()));
      }
    }
  }
  return Status::ok();
}

// The results go back on each operation's stream and the call returns once they landed: the caller's next work
// on that stream (or any stream, after the call) sees them (why not a synchronous copy: CudaDriver::copyToDeviceOn;
// the first GPU run read stale results that way).
Status StagingExecutor::copyBack(const std::vector<Lane>& lanes, const std::vector<Mirror>& mirrors,
                                 const std::vector<std::vector<PlanBuffer>>& original) const {
  std::vector<cudaStream_t> streams;
  size_t k = 0;
  for (const Lane& lane : lanes) {
    for (size_t i = 0; i < lane.plans.size(); ++i, ++k) {
      for (const PlanBuffer& b : original[k]) {
        if (b.memory != MemoryKind::kDevice || !b.written) continue;
        const Mirror* m = mirrorOf(mirrors, b.base);
        if (m == nullptr) return internalError("staging: no mirror for a device buffer");
        TH_CHECK(memory_.toDevice(const_cast<char*>(b.base), m->host + (b.base - m->device), b.bytes, b.stream)
                     .withContext("copying results back to the device"));
        if (std::find(streams.begin(), streams.end(), b.stream) == streams.end()) streams.push_back(b.stream);
      }
    }
  }
  for (cudaStream_t s : streams) TH_CHECK(memory_.synchronize(s).withContext("waiting for the results' copy"));
  return Status::ok();
}

Status StagingExecutor::run(std::vector<Lane>& lanes, const ExecOptions& options) {
  thread_local Pool pool;
  thread_local std::vector<std::vector<PlanBuffer>> original;  // the device buffers, before mirroring
  pool.reset();
  original.clear();
  for (const Lane& lane : lanes)
    for (const Plan* p : lane.plans) original.push_back(p->buffers);
  TH_CHECK(waitForStreams(lanes));
  std::vector<Mirror> mirrors;
  TH_CHECK(mirror(lanes, pool, &mirrors));
  TH_CHECK(hostExecutor().run(lanes, options));
  return copyBack(lanes, mirrors, original);
}

// The CUDA driver as DeviceMemory.
class DriverMemory final : public DeviceMemory {
 public:
  explicit DriverMemory(const device::CudaDriver& cuda) : cuda_(cuda) {}
  Status toHost(void* dst, const void* src, size_t bytes) const override { return cuda_.copyToHost(dst, src, bytes); }
  Status toDevice(void* dst, const void* src, size_t bytes, cudaStream_t stream) const override {
    return cuda_.copyToDeviceOn(dst, src, bytes, stream);
  }
  Status synchronize(cudaStream_t stream) const override { return cuda_.synchronize(stream); }
  bool capturing(cudaStream_t stream) const override { return cuda_.isCapturing(stream); }

 private:
  const device::CudaDriver& cuda_;
};

}  // namespace

std::unique_ptr<Executor> makeStagingExecutor(const DeviceMemory& memory) {
  return std::make_unique<StagingExecutor>(memory);
}

Status stagingCaptureError(const std::string& why) {
  return invalidUsage("this group takes the staging path (device buffers copied through host memory when called%s%s), "
                      "which cannot be captured into a CUDA graph: only the CUDA executor "
                      "(THESEUS_DEVICE_EXECUTOR=auto or cuda; device or pinned buffers) captures operations",
                      why.empty() ? "" : ": ", why.c_str());
}

Executor* stagingExecutor() {
  const device::CudaDriver* cuda = device::CudaDriver::get();
  if (cuda == nullptr) return nullptr;
  static DriverMemory memory(*cuda);  // the driver, once found, stays for the life of the process
  static StagingExecutor executor(memory);
  return &executor;
}

}  // namespace theseus::exec
