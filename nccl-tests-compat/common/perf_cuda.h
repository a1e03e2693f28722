// The harness' only contact with CUDA, through the CUDA runtime API.
// perf_cuda.cc is compiled when the CUDA toolkit is found; otherwise
// perf_cuda_none.cc reports "no GPU" and the harness runs on host memory.
#pragma once

#include <cstddef>
#include <string>

#include "nccl.h"
#include "perf_status.h"

namespace theseus::perf::cuda {

// Number of visible GPUs; 0 when built without CUDA or when no driver/GPU.
int deviceCount();
bool builtWithCuda();

Status setDevice(int device);
// "NVIDIA H200" and "0000:18:00"-style PCI id.
Status describeDevice(int device, std::string* name, std::string* busId);
// Compute capability major * 10 + minor.
int computeCapability(int device);

Status streamCreate(cudaStream_t* stream);
Status streamDestroy(cudaStream_t stream);
// True when all work on the stream has completed.
Status streamQuery(cudaStream_t stream, bool* done);

Status deviceAlloc(void** ptr, size_t bytes);
Status deviceFree(void* ptr);
// Copies ordered on `stream` (the rank's stream, or NULL) and complete on
// return: a plain cudaMemcpy from pageable memory may return before its DMA
// lands and does not order against non-blocking streams.
Status copyToDevice(void* dst, const void* src, size_t bytes, cudaStream_t stream);
Status copyToHost(void* dst, const void* src, size_t bytes, cudaStream_t stream);

}  // namespace theseus::perf::cuda
