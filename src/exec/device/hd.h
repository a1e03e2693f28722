// Code shared by the device executor's interpreter on a GPU and its host
// emulation in CI: one source, compiled by nvcc for the device and by the
// host compiler for host threads.
//
//   TH_HD              __host__ __device__ under nvcc, nothing otherwise
//   loadAcquire/storeRelease/fetchAdd
//                      flag accesses with acquire/release semantics at system
//                      scope: a flag written by one GPU (or the CPU, or another
//                      process through mapped memory) orders everything written
//                      before it for whoever reads it with acquire. On the device
//                      these are libcu++ cuda::atomic_ref<T, thread_scope_system>
//                      operations (ld.acquire.sys / st.release.sys); on the host
//                      std::atomic_ref with the same orders.
//   spinPause          what a waiting loop does between polls
//   bitCast            memcpy-based bit casts (valid on both sides)
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <atomic>

#if defined(__CUDACC__)
#include <cuda/atomic>
#define TH_HD __host__ __device__
#else
#define TH_HD
#endif

namespace theseus::exec::dev {

template <class To, class From>
TH_HD inline To bitCast(const From& from) {
  static_assert(sizeof(To) == sizeof(From));
  To to;
  memcpy(&to, &from, sizeof(To));
  return to;
}

#if defined(__CUDA_ARCH__)
template <class T>
__device__ inline T loadAcquire(T* p) {
  return cuda::atomic_ref<T, cuda::thread_scope_system>(*p).load(cuda::memory_order_acquire);
}
template <class T>
__device__ inline void storeRelease(T* p, T v) {
  cuda::atomic_ref<T, cuda::thread_scope_system>(*p).store(v, cuda::memory_order_release);
}
template <class T>
__device__ inline T loadRelaxed(T* p) {
  return cuda::atomic_ref<T, cuda::thread_scope_system>(*p).load(cuda::memory_order_relaxed);
}
__device__ inline void spinPause() { __nanosleep(64); }
#else
template <class T>
inline T loadAcquire(T* p) {
  return std::atomic_ref<T>(*p).load(std::memory_order_acquire);
}
template <class T>
inline void storeRelease(T* p, T v) {
  std::atomic_ref<T>(*p).store(v, std::memory_order_release);
}
template <class T>
inline T loadRelaxed(T* p) {
  return std::atomic_ref<T>(*p).load(std::memory_order_relaxed);
}
inline void spinPause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
#endif

}  // namespace theseus::exec::dev
