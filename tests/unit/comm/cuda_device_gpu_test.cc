// The device captured at init is the caller's current CUDA device, found
// through an already-loaded driver only (a CPU-only process never loads it).
#include <cuda_runtime.h>

#include <gtest/gtest.h>

#include "comm/cuda_device.h"

namespace theseus::comm {
namespace {

TEST(CudaDevice, FollowsTheCallersCurrentDevice) {
  // Nothing in this process touched CUDA yet: the driver is not loaded, so "no device".
  EXPECT_EQ(callerCudaDevice(), -1);
  EXPECT_EQ(cudaDeviceCount(), -1);
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) GTEST_SKIP() << "no CUDA device";
  for (int d = n - 1; d >= 0; --d) {
    ASSERT_EQ(cudaSetDevice(d), cudaSuccess);
    ASSERT_EQ(cudaFree(nullptr), cudaSuccess);
    EXPECT_EQ(callerCudaDevice(), d) << "seen after the application started using CUDA";
  }
  EXPECT_EQ(cudaDeviceCount(), n);
}

}  // namespace
}  // namespace theseus::comm
