// The CUDA driver leaf: the device captured at init is the caller's current
// CUDA device, found through an already-loaded driver only (a CPU-only process
// never loads it), and buffers are classified by where they live.
#include <cuda_runtime.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <vector>

#include "device/cuda_driver.h"
#include "device/host_registry.h"
#include "device/vmm.h"

// Present only in the CUDA test double (tests/cuda_double), where libcuda is loaded from the start.
extern "C" __attribute__((weak)) uint64_t fakeCudaSynchronizations();

namespace theseus::device {
namespace {

// The driver with device 0 current on this thread (what the application does first), and the device count;
// nullptr when there is no CUDA device.
const CudaDriver* onDevice0(int* devices) {
  if (cudaGetDeviceCount(devices) != cudaSuccess || *devices < 1) return nullptr;
  EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(cudaFree(nullptr), cudaSuccess);
  const CudaDriver* cuda = CudaDriver::get();
  EXPECT_NE(cuda, nullptr);
  return cuda;
}

TEST(CudaDriver, FollowsTheCallersCurrentDevice) {
  // Nothing in this process touched CUDA yet: the driver is not loaded, so "no device" (the double is
  // linked in, so loaded from the start).
  EXPECT_EQ(CudaDriver::callerDevice(), -1);
  if (!fakeCudaSynchronizations) {
    EXPECT_EQ(CudaDriver::visibleDevices(), -1);
  }
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
  const CudaDriver* cuda = onDevice0(&n);
  if (cuda == nullptr) GTEST_SKIP() << "no CUDA device";
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

// Host memory registered for the GPU through the registry, as the CUDA executor registers a device
// FIFO's segment: first its control area, later the rest; then released before the memory goes, and
// the same addresses mapped again are registered anew (a stale registration would make them look
// registered already). A range the driver had registered before is left as the registry found it.
TEST(HostRegistry, RegistrationsEndWithTheirMemory) {
  int n = 0;
  const CudaDriver* cuda = onDevice0(&n);
  if (cuda == nullptr) GTEST_SKIP() << "no CUDA device";
  const size_t page = 4096, bytes = 16 * page;
  auto mapAt = [&](void* hint) {
    void* m = mmap(hint, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | (hint ? MAP_FIXED : 0), -1, 0);
    EXPECT_NE(m, MAP_FAILED);
    return static_cast<char*>(m);
  };
  const size_t before = registeredHostBytes();
  char* m = mapAt(nullptr);
  EXPECT_EQ(cuda->memoryKind(m), MemoryKind::kHost);
  ASSERT_TRUE(registerHostRange(0, m, 4 * page).isOk());  // the control area
  EXPECT_EQ(cuda->memoryKind(m + page), MemoryKind::kHostPinned);
  EXPECT_EQ(cuda->memoryKind(m + 8 * page), MemoryKind::kHost);
  ASSERT_TRUE(registerHostRange(0, m, bytes).isOk());  // then all of it: only the rest is registered
  EXPECT_EQ(cuda->memoryKind(m + 8 * page), MemoryKind::kHostPinned);
  ASSERT_TRUE(registerHostRange(0, m, 2 * page).isOk());  // covered already
  EXPECT_EQ(registeredHostBytes() - before, bytes);
  releaseHostRange(m + page, page);  // any overlap releases the whole registration
  EXPECT_EQ(registeredHostBytes(), before);
  EXPECT_EQ(cuda->memoryKind(m), MemoryKind::kHost);
  EXPECT_EQ(cuda->memoryKind(m + 8 * page), MemoryKind::kHost);
  releaseHostRange(m, bytes);  // nothing left: harmless
  munmap(m, bytes);

  char* again = mapAt(m);  // the same addresses, new pages
  ASSERT_EQ(again, m);
  ASSERT_TRUE(registerHostRange(0, again, bytes).isOk());
  EXPECT_EQ(cuda->memoryKind(again + 8 * page), MemoryKind::kHostPinned);
  releaseHostRange(again, bytes);
  EXPECT_EQ(cuda->memoryKind(again), MemoryKind::kHost);

  // Registered by the application before: used, never unregistered by the registry.
  ASSERT_EQ(cudaHostRegister(again, bytes, cudaHostRegisterMapped), cudaSuccess);
  ASSERT_TRUE(registerHostRange(0, again, bytes).isOk());
  releaseHostRange(again, bytes);
  EXPECT_EQ(cuda->memoryKind(again), MemoryKind::kHostPinned);
  EXPECT_EQ(cudaHostUnregister(again), cudaSuccess);
  munmap(again, bytes);
  EXPECT_EQ(registeredHostBytes(), before);

  // A device that does not exist: a clear error, nothing recorded.
  char* other = mapAt(nullptr);
  Status bad = registerHostRange(n + 7, other, bytes);
  EXPECT_FALSE(bad.isOk());
  EXPECT_NE(bad.message().find("bytes of host memory for the GPU"), std::string::npos) << bad.message();
  EXPECT_EQ(registeredHostBytes(), before);
  munmap(other, bytes);
}

// ncclMemAlloc's memory (device/vmm.h): device memory that legacy CUDA IPC cannot share, exported as a file
// descriptor and imported again (here in the same process, at a second address: the same pages), unmapped and
// freed; a pointer it did not allocate is left alone.
TEST(Vmm, ShareableAllocationsTravelAsFileDescriptors) {
  int n = 0;
  const CudaDriver* cuda = onDevice0(&n);
  if (cuda == nullptr) GTEST_SKIP() << "no CUDA device";
  const Vmm* vmm = Vmm::get();
  ASSERT_NE(vmm, nullptr);
  if (!vmm->shareableOn(0)) GTEST_SKIP() << "device 0 has no VMM allocations shareable as file descriptors";
  const size_t bytes = 3 << 20;  // not a multiple of the granularity: rounded up
  auto a = vmm->allocate(bytes);
  ASSERT_TRUE(a.isOk()) << a.status().message();
  void* p = a.value();
  EXPECT_EQ(cuda->memoryKind(p), MemoryKind::kDevice);
  EXPECT_EQ(cuda->memoryInfo(p).device, 0);
  EXPECT_FALSE(vmm->legacyIpcCapable(p));
  void* base = nullptr;
  size_t mapped = 0;
  ASSERT_TRUE(cuda->allocationRange(static_cast<char*>(p) + 100, &base, &mapped).isOk());
  EXPECT_EQ(base, p);
  EXPECT_GE(mapped, bytes);
  std::vector<int> host(bytes / sizeof(int));
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<int>(i * 7);
  ASSERT_EQ(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);

  auto fd = vmm->exportFd(p);
  ASSERT_TRUE(fd.isOk()) << fd.status().message();
  auto m = vmm->importFd(fd.value(), mapped, 0);
  close(fd.value());
  ASSERT_TRUE(m.isOk()) << m.status().message();
  EXPECT_NE(m.value().base, p);
  std::vector<int> back(host.size());
  ASSERT_EQ(cudaMemcpy(back.data(), m.value().base, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, host);
  EXPECT_TRUE(vmm->unmap(m.value()).isOk());

  void* legacy = nullptr;
  ASSERT_EQ(cudaMalloc(&legacy, 4096), cudaSuccess);
  EXPECT_TRUE(vmm->legacyIpcCapable(legacy));
  auto notOurs = vmm->free(legacy);
  ASSERT_TRUE(notOurs.isOk());
  EXPECT_FALSE(notOurs.value());
  EXPECT_FALSE(vmm->exportFd(legacy).isOk());
  EXPECT_EQ(cudaFree(legacy), cudaSuccess);
  auto freed = vmm->free(p);
  ASSERT_TRUE(freed.isOk()) << freed.status().message();
  EXPECT_TRUE(freed.value());
  EXPECT_EQ(cuda->memoryKind(p), MemoryKind::kHost);  // gone
}

}  // namespace
}  // namespace theseus::device
