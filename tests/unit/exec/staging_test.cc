// The staging executor on a fake device: "device memory" is host memory the
// plans mark as device, and the fake DeviceMemory counts what staging copies.
// Grouped operations that reuse a buffer see each other's results (one mirror
// per merged range), deferred scalars are read from the device, results go
// back only when the group succeeded, and captured streams are refused before
// anything is touched.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "exec/executor.h"
#include "exec/staging.h"

namespace theseus::exec {
namespace {

using device::MemoryKind;
using schedule::Op;

class FakeDevice final : public DeviceMemory {
 public:
  Status toHost(void* dst, const void* src, size_t bytes) const override {
    ++toHostCalls;
    memcpy(dst, src, bytes);
    return Status::ok();
  }
  Status toDevice(void* dst, const void* src, size_t bytes, cudaStream_t stream) const override {
    ++toDeviceCalls;
    memcpy(dst, src, bytes);
    events.push_back({'c', stream});
    return Status::ok();
  }
  Status synchronize(cudaStream_t stream) const override {
    synced.push_back(stream);
    events.push_back({'s', stream});
    return Status::ok();
  }
  // Every copy back to the device went on a stream that was synchronised after it (so the call returns with
  // the results in place, whatever streams the caller's next work is on).
  bool everyCopyWaitedFor() const {
    for (size_t i = 0; i < events.size(); ++i) {
      if (events[i].first != 'c') continue;
      bool waited = false;
      for (size_t j = i + 1; j < events.size(); ++j) waited |= events[j].first == 's' && events[j].second == events[i].second;
      if (!waited) return false;
    }
    return true;
  }
  bool capturing(cudaStream_t) const override { return capture; }
  mutable int toHostCalls = 0, toDeviceCalls = 0;
  mutable std::vector<cudaStream_t> synced;
  mutable std::vector<std::pair<char, cudaStream_t>> events;  // 'c' copy to the device on a stream, 's' sync
  bool capture = false;
};

cudaStream_t streamOf(uintptr_t v) { return reinterpret_cast<cudaStream_t>(v); }

// One rank, one local copy step `src -> dst` of `n` floats (scaled by a PreMulSum when `scale`).
Plan copyPlan(const float* src, float* dst, size_t n, cudaStream_t stream, const float* deviceScalar = nullptr) {
  Plan p;
  p.rank = 0;
  p.sliceBytes = 4096;
  p.elemBytes = sizeof(float);
  p.chunked = false;
  p.rounds = 1;
  p.opName = "copy";
  p.scheduleName = "handmade";
  PlanStep st;
  st.op = Op::kCopy;
  st.hasSrc = st.hasDst = true;
  st.src = reinterpret_cast<const char*>(src);
  st.dst = reinterpret_cast<char*>(dst);
  st.bytes = n * sizeof(float);
  if (deviceScalar != nullptr) {
    p.reduction = deferredPreMulSum(ncclFloat32, deviceScalar, MemoryKind::kDevice).value();
    st.scaleSrc = true;
  }
  p.steps.push_back(st);
  p.addBuffer(src, n * sizeof(float), MemoryKind::kDevice, false, stream);
  p.addBuffer(dst, n * sizeof(float), MemoryKind::kDevice, true, stream);
  return p;
}

std::vector<Lane> laneOf(std::vector<Plan>& plans) {
  std::vector<Lane> lanes(1);
  for (Plan& p : plans) {
    lanes[0].plans.push_back(&p);
    lanes[0].memory |= p.memory;
    lanes[0].deferredScalars |= p.reduction.scalarSource != nullptr;
  }
  return lanes;
}

TEST(Staging, GroupedOperationsSeeEachOthersResults) {
  const size_t n = 10000;  // several slices
  std::vector<float> device(3 * n + 1);
  float *a = device.data(), *b = a + n, *c = b + n, *scalar = c + n;
  for (size_t i = 0; i < n; ++i) {
    a[i] = float(i);
    b[i] = -1.0f;  // stale: the first operation overwrites it before the second reads it
    c[i] = -2.0f;
  }
  *scalar = 3.0f;
  FakeDevice dev;
  auto staging = makeStagingExecutor(dev);
  std::vector<Plan> plans;
  plans.push_back(copyPlan(a, b, n, streamOf(1)));           // b = a
  plans.push_back(copyPlan(b, c, n, streamOf(2), scalar));   // c = 3 * b
  std::vector<Lane> lanes = laneOf(plans);
  // This process never loaded the CUDA driver: the real staging executor is not offered.
  EXPECT_FALSE(executorFor(lanes[0].memory, DeviceExecutorMode::kOff).isOk());
  Status st = staging->run(lanes, {});
  ASSERT_TRUE(st.isOk()) << st.message();
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(b[i], float(i)) << i;
    ASSERT_EQ(c[i], 3.0f * float(i)) << i;
  }
  // a, b and c are adjacent but do not overlap: three mirrors filled once each, plus the scalar.
  EXPECT_EQ(dev.toHostCalls, 4);
  EXPECT_EQ(dev.toDeviceCalls, 2);  // the written ranges, b and c
  EXPECT_EQ(dev.synced.size(), 4u);  // each stream before the inputs are read and after its results went back
  EXPECT_TRUE(dev.everyCopyWaitedFor());
}

TEST(Staging, OverlappingRangesShareOneMirror) {
  const size_t n = 1000;
  std::vector<float> device(4 * n, -1.0f);  // a = [0, 2n), b = [2n, 3n), c = [3n, 4n)
  for (size_t i = 0; i < 2 * n; ++i) device[i] = float(i);
  float *a = device.data(), *b = a + 2 * n, *c = b + n;
  FakeDevice dev;
  auto staging = makeStagingExecutor(dev);
  std::vector<Plan> plans;
  plans.push_back(copyPlan(a, b, n, streamOf(1)));          // reads a[0, n)
  plans.push_back(copyPlan(a + n / 2, c, n, streamOf(1)));  // reads a[n/2, 3n/2): overlaps the first read
  std::vector<Lane> lanes = laneOf(plans);
  Status st = staging->run(lanes, {});
  ASSERT_TRUE(st.isOk()) << st.message();
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(b[i], float(i)) << i;
    ASSERT_EQ(c[i], float(n / 2 + i)) << i;
  }
  EXPECT_EQ(dev.toHostCalls, 3);    // a's two ranges merged into one mirror; b and c only touch
  EXPECT_EQ(dev.toDeviceCalls, 2);  // b and c; a is only read
  EXPECT_EQ(dev.synced.size(), 2u);  // the one stream, before and after
  EXPECT_TRUE(dev.everyCopyWaitedFor());
}

TEST(Staging, CapturedStreamsAreRefusedBeforeAnythingMoves) {
  const size_t n = 64;
  std::vector<float> device(2 * n, 5.0f);
  for (size_t i = 0; i < n; ++i) device[i] = 1.0f;
  FakeDevice dev;
  dev.capture = true;
  auto staging = makeStagingExecutor(dev);
  std::vector<Plan> plans;
  plans.push_back(copyPlan(device.data(), device.data() + n, n, streamOf(9)));
  std::vector<Lane> lanes = laneOf(plans);
  Status st = staging->run(lanes, {});
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("cannot be captured into a CUDA graph"), std::string::npos) << st.message();
  EXPECT_EQ(dev.toHostCalls + dev.toDeviceCalls, 0);
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(device[n + i], 5.0f);
}

TEST(Staging, ABadDeferredScalarLeavesTheDeviceUntouched) {
  const size_t n = 64;
  std::vector<int64_t> device(2 * n + 1, 7);
  device[2 * n] = (int64_t(1) << 53) + 1;  // beyond what a double holds exactly
  FakeDevice dev;
  auto staging = makeStagingExecutor(dev);
  Plan p = copyPlan(reinterpret_cast<float*>(device.data()), reinterpret_cast<float*>(device.data() + n), n * 2,
                    streamOf(1));
  p.reduction = deferredPreMulSum(ncclInt64, &device[2 * n], MemoryKind::kDevice).value();
  p.elemBytes = 8;
  p.steps[0].scaleSrc = true;
  std::vector<Plan> plans;
  plans.push_back(std::move(p));
  std::vector<Lane> lanes = laneOf(plans);
  Status st = staging->run(lanes, {});
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("2^53"), std::string::npos) << st.message();
  EXPECT_EQ(dev.toDeviceCalls, 0);
  for (size_t i = 0; i < 2 * n; ++i) EXPECT_EQ(device[i], 7);
}

TEST(Staging, TheHostExecutorRefusesDeviceBuffers) {
  std::vector<float> device(16, 1.0f);
  std::vector<Plan> plans;
  plans.push_back(copyPlan(device.data(), device.data() + 8, 8, nullptr));
  std::vector<Lane> lanes = laneOf(plans);
  Status st = execute(lanes);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("device memory"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace theseus::exec
