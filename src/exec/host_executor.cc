// The host executor: plans on host memory, run on the calling thread with the
// host primitives (memcpy and the reduction kernels); complete on return.

#include "common/log.h"
#include "exec/device/device_executor.h"
#include "exec/executor.h"
#include "exec/progress.h"
#include "exec/staging.h"

namespace theseus::exec {
namespace {

class HostExecutor final : public Executor {
 public:
  constexpr HostExecutor() = default;
  const char* name() const override { return "host"; }
  bool serves(device::MemoryKindMask kinds) const override { return (kinds & ~device::kHostAccessibleKinds) == 0; }
  Status run(std::vector<Lane>& lanes, const ExecOptions& options) override {
    TH_CHECK(prepareLanes(lanes, device::kHostAccessibleKinds, "host"));
    return progressLanes(lanes, hostPrimitives(), options);
  }
};

constinit HostExecutor gHostExecutor;  // constant-initialised: no guard on the per-group path

}  // namespace

Status prepareLanes(std::vector<Lane>& lanes, device::MemoryKindMask accessible, const char* executor,
                    bool executorReadsScalars) {
  for (Lane& lane : lanes) {
    if (lane.memory & ~accessible)
      return invalidUsage("a buffer is device memory, which the %s executor cannot access", executor);
    if (!lane.deferredScalars) continue;
    for (Plan* p : lane.plans) {
      Reduction& r = p->reduction;
      if (r.scalarSource == nullptr) continue;
      if (executorReadsScalars && r.scalarMemory != device::MemoryKind::kHost) continue;  // device or pinned
      if (!device::hostAccessible(r.scalarMemory))
        return invalidUsage("%s: the PreMulSum scalar is in device memory, which the %s executor cannot read",
                            p->describe().c_str(), executor);
      TH_CHECK(resolveScalar(r, r.scalarSource).withContext(p->describe()));
    }
  }
  return Status::ok();
}

Executor& hostExecutor() { return gHostExecutor; }

Status execute(std::vector<Lane>& lanes, const ExecOptions& options) { return hostExecutor().run(lanes, options); }

Result<Executor*> executorFor(device::MemoryKindMask kinds, DeviceExecutorMode mode) {
  constexpr device::MemoryKindMask kKernelKinds =
      device::maskOf(device::MemoryKind::kDevice) | device::maskOf(device::MemoryKind::kHostPinned);
  if (mode == DeviceExecutorMode::kCuda && (kinds & kKernelKinds) != 0 && cudaDeviceExecutor() != nullptr &&
      cudaDeviceExecutor()->serves(kinds))
    return cudaDeviceExecutor();
  if ((kinds & ~device::kHostAccessibleKinds) == 0) {
    if (__builtin_expect(mode == DeviceExecutorMode::kEmulate, 0)) return &emulatedDeviceExecutor();
    return &gHostExecutor;
  }
  if (Executor* staging = stagingExecutor(); staging != nullptr && staging->serves(kinds)) return staging;
  return invalidUsage("no executor serves buffers in %s memory (is the CUDA driver loaded?)",
                      device::memoryKindName(device::MemoryKind::kDevice));
}

}  // namespace theseus::exec
