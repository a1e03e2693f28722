// perf_cuda.h without CUDA: no devices; the GPU-only calls explain why they fail.
#include "perf_cuda.h"

namespace theseus::perf::cuda {
namespace {
Status noCuda(const char* what) {
  return errorf(kExitError, "%s: this harness was built without CUDA", what);
}
}  // namespace

bool builtWithCuda() { return false; }
int deviceCount() { return 0; }
Status setDevice(int) { return noCuda("cudaSetDevice"); }
Status describeDevice(int, std::string*, std::string*) { return noCuda("cudaGetDeviceProperties"); }
int computeCapability(int) { return 0; }
Status streamCreate(cudaStream_t*) { return noCuda("cudaStreamCreate"); }
Status streamDestroy(cudaStream_t) { return noCuda("cudaStreamDestroy"); }
Status streamQuery(cudaStream_t, bool* done) {
  *done = true;
  return Status::ok();
}
Status deviceAlloc(void**, size_t) { return noCuda("cudaMalloc"); }
Status deviceFree(void*) { return noCuda("cudaFree"); }
Status copyToDevice(void*, const void*, size_t, cudaStream_t) { return noCuda("cudaMemcpy"); }
Status copyToHost(void*, const void*, size_t, cudaStream_t) { return noCuda("cudaMemcpy"); }

}  // namespace theseus::perf::cuda
