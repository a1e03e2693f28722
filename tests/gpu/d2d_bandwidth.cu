// The roofline gpu-check quotes next to Theseus' busbw: device-to-device
// cudaMemcpy bandwidth (bytes copied per second) for one buffer size.
//   d2d_bandwidth [bytes]   (default 256 MiB)
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  size_t bytes = argc > 1 ? strtoull(argv[1], nullptr, 10) : (size_t(256) << 20);
  void *a, *b;
  if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) {
    fprintf(stderr, "d2d_bandwidth: cudaMalloc of %zu bytes failed\n", bytes);
    return 1;
  }
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  for (int i = 0; i < 3; ++i) cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
  const int iters = 20;
  cudaEventRecord(t0);
  for (int i = 0; i < iters; ++i) cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice);
  cudaEventRecord(t1);
  cudaEventSynchronize(t1);
  float ms = 0;
  cudaEventElapsedTime(&ms, t0, t1);
  printf("d2d_bandwidth %zu bytes: %.1f GB/s\n", bytes, double(bytes) * iters / (ms * 1e-3) / 1e9);
  return 0;
}
