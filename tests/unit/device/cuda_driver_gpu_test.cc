// The CUDA driver leaf: the device captured at init is the caller's current
// CUDA device, found through an already-loaded driver only (a CPU-only process
// never loads it), and buffers are classified by where they live.
#include <cuda_runtime.h>

#include <gtest/gtest.h>

#include <vector>

#include "device/cuda_driver.h"

namespace theseus::device {
namespace {

TEST(CudaDriver, FollowsTheCallersCurrentDevice) {
  // Nothing in this process touched CUDA yet: the driver is not loaded, so "no device".
  EXPECT_EQ(CudaDriver::callerDevice(), -1);
  EXPECT_EQ(CudaDriver::visibleDevices(), -1);
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) GTEST_SKIP() << "no CUDA device";
  for (int d = n - 1; d >= 0; --d) {
    ASSERT_EQ(cudaSetDevice(d), cudaSuccess);
    ASSERT_EQ(cudaFree(nullptr), cudaSuccess);
    EXPECT_EQ(CudaDriver::callerDevice(), d) << "seen after the application started using CUDA";
  }
  EXPECT_EQ(CudaDriver::visibleDevices(), n);
}

TEST(CudaDriver, ClassifiesMemory) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) GTEST_SKIP() << "no CUDA device";
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaFree(nullptr), cudaSuccess);
  const CudaDriver* cuda = CudaDriver::get();
  ASSERT_NE(cuda, nullptr);
  void* dev = nullptr;
  void* pinned = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, 4096), cudaSuccess);
  ASSERT_EQ(cudaHostAlloc(&pinned, 4096, cudaHostAllocMapped), cudaSuccess);
  std::vector<char> pageable(4096);
  EXPECT_EQ(cuda->memoryKind(dev), MemoryKind::kDevice);
  EXPECT_EQ(cuda->memoryKind(pinned), MemoryKind::kHostPinned);
  EXPECT_EQ(cuda->memoryKind(pageable.data()), MemoryKind::kHost);
  EXPECT_EQ(cuda->memoryKind(nullptr), MemoryKind::kHost);
  // The enqueue path's single query (cuPointerGetAttributes: no error for memory CUDA does not know) agrees.
  EXPECT_EQ(cuda->memoryInfo(dev).kind, MemoryKind::kDevice);
  EXPECT_EQ(cuda->memoryInfo(static_cast<char*>(dev) + 100).device, 0);
  EXPECT_EQ(cuda->memoryInfo(pinned).kind, MemoryKind::kHostPinned);
  EXPECT_EQ(cuda->memoryInfo(pageable.data()).kind, MemoryKind::kHost);
  EXPECT_EQ(cuda->memoryInfo(nullptr).kind, MemoryKind::kHost);
  cudaFree(dev);
  cudaFreeHost(pinned);
}

}  // namespace
}  // namespace theseus::device
