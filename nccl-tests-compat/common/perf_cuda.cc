// CUDA runtime implementation of perf_cuda.h (built when the toolkit is found;
// linked with the static runtime so the binaries start without a driver).
#include "perf_cuda.h"

#include <cuda_runtime.h>

namespace theseus::perf::cuda {
namespace {

Status cudaCheck(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::ok();
  return errorf(kExitError, "%s failed: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

}  // namespace

bool builtWithCuda() { return true; }

int deviceCount() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();  // no driver or no device: host mode
      return 0;
    }
    return n;
  }();
  return count;
}

Status setDevice(int device) { return cudaCheck(cudaSetDevice(device), "cudaSetDevice"); }

Status describeDevice(int device, std::string* name, std::string* busId) {
  cudaDeviceProp prop{};
  PERF_CHECK(cudaCheck(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties"));
  *name = prop.name;
  *busId = strprintf("%04x:%02x:%02x", prop.pciDomainID, prop.pciBusID, prop.pciDeviceID);
  return Status::ok();
}

int computeCapability(int device) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess)
    return 0;
  return major * 10 + minor;
}

Status streamCreate(cudaStream_t* stream) {
  return cudaCheck(cudaStreamCreateWithFlags(stream, cudaStreamNonBlocking), "cudaStreamCreate");
}

Status streamDestroy(cudaStream_t stream) { return cudaCheck(cudaStreamDestroy(stream), "cudaStreamDestroy"); }

Status streamQuery(cudaStream_t stream, bool* done) {
  cudaError_t e = cudaStreamQuery(stream);
  if (e == cudaErrorNotReady) {
    *done = false;
    return Status::ok();
  }
  *done = true;
  return cudaCheck(e, "cudaStreamQuery");
}

Status deviceAlloc(void** ptr, size_t bytes) { return cudaCheck(cudaMalloc(ptr, bytes), "cudaMalloc"); }
Status deviceFree(void* ptr) { return cudaCheck(cudaFree(ptr), "cudaFree"); }

Status copyToDevice(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  PERF_CHECK(cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync(HtoD)"));
  return cudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

Status copyToHost(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  PERF_CHECK(cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync(DtoH)"));
  return cudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

}  // namespace theseus::perf::cuda
