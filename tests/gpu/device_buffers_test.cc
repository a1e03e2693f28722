// GPU tests (CTest label "gpu"; never run in CPU CI): collectives and
// point-to-point on CUDA device buffers, through the host staging path, with
// the results checked on the host. Every rank process uses GPU 0 (one GPU is
// enough: each process has its own context).
#include <cuda_runtime.h>
#include <dirent.h>
#include <sys/stat.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <ctime>
#include <functional>
#include <new>
#include <regex>
#include <unistd.h>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "mp_test.h"
#include "test_files.h"
#include "theseus/theseus.h"

namespace {

#define CUDA_OK(call)                                                                        \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) {                                                                 \
      fprintf(stderr, "[rank %d] %s failed: %s\n", ctx.rank, #call, cudaGetErrorString(e_)); \
      return 1;                                                                              \
    }                                                                                        \
  } while (0)

// What every rank function starts with: GPU 0, a stream, the communicator.
#define OPEN_DEVICE_RANK(stream, comm)                                  \
  CUDA_OK(cudaSetDevice(0));                                            \
  cudaStream_t stream;                                                  \
  CUDA_OK(cudaStreamCreate(&stream));                                   \
  ncclComm_t comm;                                                      \
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank))

bool haveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// Every operator new of a thread — libnccl's included — counts here (warm_enqueue: the enqueue
// path runs on the calling thread; Theseus' own threads allocate as they please).
thread_local long tAllocations = 0;

double threadCpuUs() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

}  // namespace

// The replacements pair malloc with free; GCC cannot see that operator new is ours.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(size_t n) {
  ++tAllocations;
  if (void* p = malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { free(p); }
void operator delete[](void* p) noexcept { free(p); }
void operator delete(void* p, size_t) noexcept { free(p); }
void operator delete[](void* p, size_t) noexcept { free(p); }

// The CUDA test double counts the calls that wait for the device; absent on a real GPU.
extern "C" __attribute__((weak)) uint64_t fakeCudaSynchronizations();
extern "C" __attribute__((weak)) uint64_t fakeCudaEventQueries();
extern "C" __attribute__((weak)) uint64_t fakeCudaCallsOnThisThread();
extern "C" __attribute__((weak)) uint64_t fakeCudaRegisteredHostBytes();

THESEUS_RANK_FN(device_collectives) {
  OPEN_DEVICE_RANK(stream, comm);
  int dev = -2;
  RANK_NCCL(ncclCommCuDevice(comm, &dev));
  RANK_CHECK(dev == 0);

  const size_t count = (1 << 20) + 3;
  std::vector<float> host(count * ctx.nranks);
  for (size_t i = 0; i < count; ++i) host[i] = float((i % 13) + ctx.rank);
  float *in, *out;
  CUDA_OK(cudaMalloc(&in, count * sizeof(float)));
  CUDA_OK(cudaMalloc(&out, count * ctx.nranks * sizeof(float)));
  CUDA_OK(cudaMemcpyAsync(in, host.data(), count * sizeof(float), cudaMemcpyHostToDevice, stream));

  // Allreduce (queued after the copy on the same stream).
  RANK_NCCL(ncclAllReduce(in, out, count, ncclFloat, ncclSum, comm, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaMemcpy(host.data(), out, count * sizeof(float), cudaMemcpyDeviceToHost));
  int n = ctx.nranks;
  for (size_t i = 0; i < count; ++i) RANK_CHECK(host[i] == float(n * (i % 13) + n * (n - 1) / 2));

  // Allgather.
  RANK_NCCL(ncclAllGather(in, out, count, ncclFloat, comm, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaMemcpy(host.data(), out, count * n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; i += 997) RANK_CHECK(host[r * count + i] == float((i % 13) + r));

  // ncclMemAlloc gives device memory when a GPU is in use; in-place allreduce on it.
  void* m = nullptr;
  RANK_NCCL(ncclMemAlloc(&m, count * sizeof(float)));
  cudaPointerAttributes attr{};
  CUDA_OK(cudaPointerGetAttributes(&attr, m));
  RANK_CHECK(attr.type == cudaMemoryTypeDevice);
  CUDA_OK(cudaMemcpy(m, in, count * sizeof(float), cudaMemcpyDeviceToDevice));
  RANK_NCCL(ncclAllReduce(m, m, count, ncclFloat, ncclMax, comm, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaMemcpy(host.data(), m, count * sizeof(float), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < count; ++i) RANK_CHECK(host[i] == float((i % 13) + n - 1));
  RANK_NCCL(ncclMemFree(m));

  // Grouped send/recv ring on device buffers.
  int next = (ctx.rank + 1) % n, prev = (ctx.rank + n - 1) % n;
  RANK_NCCL(ncclGroupStart());
  RANK_NCCL(ncclSend(in, count, ncclFloat, next, comm, stream));
  RANK_NCCL(ncclRecv(out, count, ncclFloat, prev, comm, stream));
  RANK_NCCL(ncclGroupEnd());
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaMemcpy(host.data(), out, count * sizeof(float), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < count; i += 101) RANK_CHECK(host[i] == float((i % 13) + prev));

  CUDA_OK(cudaFree(in));
  CUDA_OK(cudaFree(out));
  RANK_NCCL(ncclCommDestroy(comm));
  CUDA_OK(cudaStreamDestroy(stream));
  return 0;
}

// PreMulSum with the scalar in device memory (ncclScalarDevice, as PyTorch
// passes it), written on the stream just before the collective; and grouped
// operations where the second reads what the first wrote into a device buffer.
THESEUS_RANK_FN(device_scalar_and_reuse) {
  OPEN_DEVICE_RANK(stream, comm);
  const int n = ctx.nranks;
  const size_t count = 100003;
  std::vector<float> host(count);
  for (size_t i = 0; i < count; ++i) host[i] = float(i % 5 + ctx.rank);
  float *in, *mid, *out, *scalar;
  CUDA_OK(cudaMalloc(&in, count * sizeof(float)));
  CUDA_OK(cudaMalloc(&mid, count * sizeof(float)));
  CUDA_OK(cudaMalloc(&out, count * sizeof(float)));
  CUDA_OK(cudaMalloc(&scalar, sizeof(float)));
  CUDA_OK(cudaMemcpyAsync(in, host.data(), count * sizeof(float), cudaMemcpyHostToDevice, stream));
  CUDA_OK(cudaMemsetAsync(mid, 0xff, count * sizeof(float), stream));  // stale contents a wrong path would read
  ncclRedOp_t op;
  RANK_NCCL(ncclRedOpCreatePreMulSum(&op, scalar, ncclFloat32, ncclScalarDevice, comm));
  for (float s : {0.5f, 4.0f}) {
    CUDA_OK(cudaMemcpyAsync(scalar, &s, sizeof(float), cudaMemcpyHostToDevice, stream));  // queued before the call
    RANK_NCCL(ncclGroupStart());
    RANK_NCCL(ncclAllReduce(in, mid, count, ncclFloat32, op, comm, stream));       // mid = s * sum(in)
    RANK_NCCL(ncclAllReduce(mid, out, count, ncclFloat32, ncclSum, comm, stream));  // out = n * mid
    RANK_NCCL(ncclGroupEnd());
    CUDA_OK(cudaStreamSynchronize(stream));
    std::vector<float> got(count);
    CUDA_OK(cudaMemcpy(got.data(), out, count * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; i += 7) {
      double sum = 0;
      for (int r = 0; r < n; ++r) sum += double(s) * double(i % 5 + r);
      RANK_CHECK(got[i] == float(double(n) * float(sum)));
    }
  }
  RANK_NCCL(ncclRedOpDestroy(op, comm));
  CUDA_OK(cudaFree(in));
  CUDA_OK(cudaFree(mid));
  CUDA_OK(cudaFree(out));
  CUDA_OK(cudaFree(scalar));
  RANK_NCCL(ncclCommDestroy(comm));
  CUDA_OK(cudaStreamDestroy(stream));
  return 0;
}

// The staging executor (synchronous copies through host memory), which device buffers take with
// THESEUS_DEVICE_EXECUTOR=off.
theseus::test::SpawnOptions stagingPath() {
  theseus::test::SpawnOptions o;
  o.env["THESEUS_DEVICE_EXECUTOR"] = "off";
  return o;
}

TEST(Gpu, DeviceScalarPreMulSumAndGroupedReuse) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  for (int n : {1, 2, 4}) EXPECT_RANKS_OK(theseus::test::runRanks("device_scalar_and_reuse", n, stagingPath()));
}

TEST(Gpu, DeviceBufferCollectives) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  for (int n : {1, 2, 4}) EXPECT_RANKS_OK(theseus::test::runRanks("device_collectives", n, stagingPath()));
}

// The same through the CUDA executor (the interpreter kernel on the stream): what device buffers get by
// default (THESEUS_DEVICE_EXECUTOR=auto) when every rank uses CUDA.
theseus::test::SpawnOptions cudaExecutor() {
  theseus::test::SpawnOptions o;
  o.timeoutSec = 180;
  return o;
}

TEST(GpuCudaExecutor, DeviceBufferCollectives) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  for (int n : {1, 2, 4}) EXPECT_RANKS_OK(theseus::test::runRanks("device_collectives", n, cudaExecutor()));
}

TEST(GpuCudaExecutor, DeviceScalarPreMulSumAndGroupedReuse) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  for (int n : {1, 2}) EXPECT_RANKS_OK(theseus::test::runRanks("device_scalar_and_reuse", n, cudaExecutor()));
}

// Operations captured into a CUDA graph by the CUDA executor and replayed many
// times: an out-of-place allreduce, an in-place average, a grouped allgather and
// reduce-scatter and a PreMulSum whose device scalar changes between replays,
// with new inputs written on the stream before every replay and every result
// checked; eager operations between replays on the same communicator; the
// decision log names each captured collective's schedule. Then the latency of
// an 8-byte allreduce, eager and graph-replayed (printed, for gpu-check).
THESEUS_RANK_FN(capture_replay) {
  OPEN_DEVICE_RANK(stream, comm);
  const int n = ctx.nranks;
  const size_t count = 300007;
  float *in, *out, *inplace, *gathered, *scattered, *scalar;
  CUDA_OK(cudaMalloc(&in, count * sizeof(float)));
  CUDA_OK(cudaMalloc(&out, count * sizeof(float)));
  CUDA_OK(cudaMalloc(&inplace, count * sizeof(float)));
  CUDA_OK(cudaMalloc(&gathered, count * n * sizeof(float)));
  CUDA_OK(cudaMalloc(&scattered, count * sizeof(float)));
  CUDA_OK(cudaMalloc(&scalar, sizeof(float)));
  ncclRedOp_t premul;
  RANK_NCCL(ncclRedOpCreatePreMulSum(&premul, scalar, ncclFloat32, ncclScalarDevice, comm));
  // THESEUS_TEST_REGISTER=1: the buffers are registered, so peers read them in place (zero-copy) in the
  // replays and eager operations that run after they mapped them.
  std::vector<void*> registered;
  if (getenv("THESEUS_TEST_REGISTER") != nullptr) {
    const std::pair<void*, size_t> bufs[] = {{in, count}, {out, count}, {inplace, count}, {gathered, count * n},
                                             {scattered, count}};
    for (const auto& b : bufs) {
      registered.push_back(nullptr);
      RANK_NCCL(ncclCommRegister(comm, b.first, b.second * sizeof(float), &registered.back()));
    }
  }

  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  RANK_NCCL(ncclAllReduce(in, out, count, ncclFloat32, ncclSum, comm, stream));
  RANK_NCCL(ncclAllReduce(inplace, inplace, count, ncclFloat32, ncclAvg, comm, stream));
  RANK_NCCL(ncclGroupStart());
  RANK_NCCL(ncclAllGather(in, gathered, count, ncclFloat32, comm, stream));
  RANK_NCCL(ncclReduceScatter(gathered, scattered, count, ncclFloat32, premul, comm, stream));
  RANK_NCCL(ncclGroupEnd());
  cudaGraph_t graph;
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));

  std::vector<float> host(count), got(count * n);
  for (int replay = 0; replay < 12; ++replay) {
    const float s = 0.25f * float(replay + 1);
    for (size_t i = 0; i < count; ++i) host[i] = float((i + replay) % 11 + ctx.rank);
    CUDA_OK(cudaMemcpyAsync(in, host.data(), count * sizeof(float), cudaMemcpyHostToDevice, stream));
    CUDA_OK(cudaMemcpyAsync(inplace, host.data(), count * sizeof(float), cudaMemcpyHostToDevice, stream));
    CUDA_OK(cudaMemcpyAsync(scalar, &s, sizeof(float), cudaMemcpyHostToDevice, stream));
    CUDA_OK(cudaGraphLaunch(exec, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    const float rankSum = float(n * (n - 1) / 2);
    CUDA_OK(cudaMemcpy(got.data(), out, count * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; i += 3) RANK_CHECK(got[i] == float(n * ((i + replay) % 11)) + rankSum);
    CUDA_OK(cudaMemcpy(got.data(), inplace, count * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; i += 3) {
      const float avg = (float(n * ((i + replay) % 11)) + rankSum) / float(n);
      RANK_CHECK(std::fabs(got[i] - avg) <= 1e-5f * std::fabs(avg) + 1e-6f);
    }
    CUDA_OK(cudaMemcpy(got.data(), gathered, count * n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; i += 101) RANK_CHECK(got[r * count + i] == float((i + replay) % 11 + r));
    // scattered[i] = s * sum over ranks of gathered block `rank`, i.e. s * n * (input of rank `rank`).
    CUDA_OK(cudaMemcpy(got.data(), scattered, count * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; i += 7) {
      float want = 0;
      for (int r = 0; r < n; ++r) want += s * float((i + replay) % 11 + ctx.rank);
      RANK_CHECK(std::fabs(got[i] - want) <= 1e-5f * std::fabs(want));
    }
    if (replay % 4 == 3) {  // an eager operation between replays, on the same communicator and FIFOs
      RANK_NCCL(ncclAllReduce(in, out, count, ncclFloat32, ncclMax, comm, stream));
      CUDA_OK(cudaStreamSynchronize(stream));
      CUDA_OK(cudaMemcpy(got.data(), out, count * sizeof(float), cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < count; i += 5) RANK_CHECK(got[i] == float((i + replay) % 11 + n - 1));
    }
  }
  // The decision log names the captured collectives' schedules.
  size_t needed = 0;
  RANK_NCCL(theseusGetDecisionLog(comm, nullptr, 0, &needed));
  std::string log(needed, '\0');
  RANK_NCCL(theseusGetDecisionLog(comm, log.data(), log.size(), &needed));
  RANK_CHECK(log.find("\"captured\":{\"bytes\":" + std::to_string(count * sizeof(float)) +
                      ",\"collective\":\"allreduce\"") != std::string::npos);

  // Latency of an 8-byte allreduce: eager, and 100 of them captured into one graph and replayed.
  float* small;
  CUDA_OK(cudaMalloc(&small, 2 * sizeof(float)));
  auto timeIt = [&](auto&& body, int iters) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) body();
    cudaStreamSynchronize(stream);
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  };
  for (int i = 0; i < 50; ++i) RANK_NCCL(ncclAllReduce(small, small, 2, ncclFloat32, ncclSum, comm, stream));
  const double eagerUs = timeIt([&] { (void)ncclAllReduce(small, small, 2, ncclFloat32, ncclSum, comm, stream); },
                                1000) / 1000;
  cudaGraph_t smallGraph;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < 100; ++i) RANK_NCCL(ncclAllReduce(small, small, 2, ncclFloat32, ncclSum, comm, stream));
  CUDA_OK(cudaStreamEndCapture(stream, &smallGraph));
  cudaGraphExec_t smallExec;
  CUDA_OK(cudaGraphInstantiate(&smallExec, smallGraph, 0));
  CUDA_OK(cudaGraphLaunch(smallExec, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  const double replayUs = timeIt([&] { (void)cudaGraphLaunch(smallExec, stream); }, 20) / (20 * 100);
  if (ctx.rank == 0)
    printf("[capture_replay] %d ranks: 8 B allreduce %.2f us eager, %.2f us graph-replayed\n", n, eagerUs, replayUs);
  CUDA_OK(cudaGraphExecDestroy(smallExec));
  CUDA_OK(cudaGraphDestroy(smallGraph));
  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphDestroy(graph));
  // The graphs' images are freed at the next group; the communicator keeps working.
  RANK_NCCL(ncclAllReduce(small, small, 2, ncclFloat32, ncclSum, comm, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  RANK_NCCL(ncclRedOpDestroy(premul, comm));
  for (void* h : registered) RANK_NCCL(ncclCommDeregister(comm, h));
  for (float* p : {in, out, inplace, gathered, scattered, scalar, small}) CUDA_OK(cudaFree(p));
  RANK_NCCL(ncclCommDestroy(comm));
  CUDA_OK(cudaStreamDestroy(stream));
  return 0;
}

// A group far larger than usual (DDP's bucketed gradients, FSDP's per-layer
// shards): 96 allreduces and 32 send/recv pairs fused by one
// ncclGroupStart/End, eager and captured into a graph replayed with new
// inputs. Every operation of the group is one plan of the lane, so the image
// of a captured group (each plan's pristine header included) grows with it.
THESEUS_RANK_FN(large_group) {
  OPEN_DEVICE_RANK(stream, comm);
  const int n = ctx.nranks;
  const int nops = 96, npairs = 32;
  const size_t count = 257;
  float *bufs, *sends, *recvs;
  CUDA_OK(cudaMalloc(&bufs, nops * count * sizeof(float)));
  CUDA_OK(cudaMalloc(&sends, npairs * count * sizeof(float)));
  CUDA_OK(cudaMalloc(&recvs, npairs * count * sizeof(float)));
  const int next = (ctx.rank + 1) % n, prev = (ctx.rank + n - 1) % n;
  auto enqueue = [&]() -> ncclResult_t {
    ncclGroupStart();
    for (int k = 0; k < nops; ++k) ncclAllReduce(bufs + k * count, bufs + k * count, count, ncclFloat32, ncclSum,
                                                 comm, stream);
    for (int k = 0; k < npairs; ++k) {
      ncclSend(sends + k * count, count, ncclFloat32, next, comm, stream);
      ncclRecv(recvs + k * count, count, ncclFloat32, prev, comm, stream);
    }
    return ncclGroupEnd();
  };
  std::vector<float> in(nops * count), pin(npairs * count), got(nops * count);
  auto fill = [&](int round) -> int {
    for (size_t i = 0; i < in.size(); ++i) in[i] = float((i + round) % 13 + ctx.rank);
    for (size_t i = 0; i < pin.size(); ++i) pin[i] = float((i * 3 + round) % 17 + 100 * ctx.rank);
    CUDA_OK(cudaMemcpyAsync(bufs, in.data(), in.size() * sizeof(float), cudaMemcpyHostToDevice, stream));
    CUDA_OK(cudaMemcpyAsync(sends, pin.data(), pin.size() * sizeof(float), cudaMemcpyHostToDevice, stream));
    return 0;
  };
  auto check = [&](int round) -> int {
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(got.data(), bufs, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < got.size(); i += 5) RANK_CHECK(got[i] == float(n * ((i + round) % 13) + n * (n - 1) / 2));
    CUDA_OK(cudaMemcpy(got.data(), recvs, pin.size() * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < pin.size(); i += 3) RANK_CHECK(got[i] == float((i * 3 + round) % 17 + 100 * prev));
    return 0;
  };
  if (fill(0) != 0) return 1;
  RANK_NCCL(enqueue());
  if (check(0) != 0) return 1;
  cudaGraph_t graph;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  RANK_NCCL(enqueue());
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int round = 1; round <= 3; ++round) {
    if (fill(round) != 0) return 1;
    CUDA_OK(cudaGraphLaunch(exec, stream));
    if (check(round) != 0) return 1;
  }
  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphDestroy(graph));
  for (float* p : {bufs, sends, recvs}) CUDA_OK(cudaFree(p));
  RANK_NCCL(ncclCommDestroy(comm));
  CUDA_OK(cudaStreamDestroy(stream));
  return 0;
}

// Two ranks as threads of one process on one GPU (nccl-tests -t 2), one running far ahead: rank 0
// enqueues 24 allreduces before rank 1 enqueues any, as NCCL allows (an enqueue returns once queued).
// Rank 0's kernels wait for rank 1's, so rank 0's enqueues must not wait for them, and rank 1's must not
// wait behind rank 0's. The executor's shared slots used to run out here and a thread waited for one,
// holding the executor's lock, on a kernel only the other thread's next launch could release (found
// looking into a -t 2 hang on an H200; the CUDA double reproduces this one).
THESEUS_RANK_FN(threads_run_ahead) {
  ncclUniqueId id;
  RANK_NCCL(ncclGetUniqueId(&id));
  ncclComm_t comms[2] = {nullptr, nullptr};
  constexpr int kOps = 24;
  constexpr size_t kCount = 4096;
  std::atomic<int> enqueued{0}, ready{0};
  int failures[2] = {0, 0};
  auto rankMain = [&](int r) {
    auto fail = [&](const char* what) {
      fprintf(stderr, "[thread rank %d] %s\n", r, what);
      failures[r] = 1;
    };
    cudaStream_t stream;
    float* bufs;
    if (cudaSetDevice(0) != cudaSuccess || ncclCommInitRank(&comms[r], 2, id, r) != ncclSuccess) {
      fail("cannot set up the rank");
      _exit(1);  // the other thread waits for this one: do not join it
    }
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess ||
        cudaMalloc(&bufs, kOps * kCount * sizeof(float)) != cudaSuccess) {
      fail("cannot create a stream or buffers");
      _exit(1);  // the other thread waits for this one: do not join it
    }
    std::vector<float> host(kOps * kCount);
    for (size_t i = 0; i < host.size(); ++i) host[i] = float(i % 97 + r);
    if (cudaMemcpy(bufs, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) {
      fail("cudaMemcpy");
      _exit(1);  // the other thread waits for this one: do not join it
    }
    // Both ranks set up before rank 0 starts (the CUDA double's synchronous copies wait for every stream,
    // non-blocking ones too, which CUDA's do not).
    ready.fetch_add(1);
    while (ready.load() < 2) std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (r == 1) {  // wait until rank 0 has queued all of its operations (bounded: they must return)
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (enqueued.load() < kOps && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (enqueued.load() < kOps) {
        fail("rank 0's enqueues did not return within 30 s while rank 1 waited");
        _exit(1);  // rank 0's thread is stuck in the library: do not wait for it
      }
    }
    for (int k = 0; k < kOps; ++k) {
      if (ncclAllReduce(bufs + k * kCount, bufs + k * kCount, kCount, ncclFloat32, ncclSum, comms[r], stream) !=
          ncclSuccess)
        return fail(ncclGetLastError(comms[r]));
      if (r == 0) enqueued.fetch_add(1);
    }
    if (cudaStreamSynchronize(stream) != cudaSuccess ||
        cudaMemcpy(host.data(), bufs, host.size() * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess)
      return fail("synchronising the stream");
    for (size_t i = 0; i < host.size(); ++i)
      if (host[i] != float(2 * (i % 97) + 1)) return fail("wrong allreduce result");
    cudaFree(bufs);
    cudaStreamDestroy(stream);
    if (ncclCommDestroy(comms[r]) != ncclSuccess) fail("ncclCommDestroy");
  };
  std::thread t0(rankMain, 0), t1(rankMain, 1);
  t0.join();
  t1.join();
  if (failures[0] || failures[1]) _exit(1);  // kernels of a failed run may still spin: do not wait for them
  return 0;
}

// Once a communicator is warm, the enqueue path of the CUDA executor makes no
// allocation and no synchronisation (NCCL's promise that a call returns once
// queued): 8-byte and 1 MiB allreduces, a grouped pair and a send/recv ring,
// enqueued in batches of 8 (the executor's ring of image slots, so it never
// has to wait for a slot), the stream synchronised between batches outside
// the measured window. Prints the host CPU time per enqueue (target 5 us).
THESEUS_RANK_FN(warm_enqueue) {
  OPEN_DEVICE_RANK(stream, comm);
  const int n = ctx.nranks, next = (ctx.rank + 1) % n, prev = (ctx.rank + n - 1) % n;
  const size_t big = 1 << 18;
  float *small, *a, *b;
  CUDA_OK(cudaMalloc(&small, 2 * sizeof(float)));
  CUDA_OK(cudaMalloc(&a, big * sizeof(float)));
  CUDA_OK(cudaMalloc(&b, big * sizeof(float)));
  // maxCalls: CUDA calls per enqueue on the double (the steady state: each buffer's pointer query, the stream's
  // capture state and device, two capture-mode exchanges, cudaGetDevice, an event query, launch and record),
  // with one and a half calls of slack for events asked just before their kernels ended.
  struct Shape {
    const char* name;
    double maxCalls;
    std::function<ncclResult_t()> enqueue;
  };
  const std::vector<Shape> shapes = {
      {"allreduce 8 B", 10.5, [&] { return ncclAllReduce(small, small, 2, ncclFloat32, ncclSum, comm, stream); }},
      {"allreduce 1 MiB", 11.5, [&] { return ncclAllReduce(a, b, big, ncclFloat32, ncclSum, comm, stream); }},
      {"grouped allreduce + allgather", 12.5,
       [&] {
         ncclGroupStart();
         ncclAllReduce(small, small, 2, ncclFloat32, ncclSum, comm, stream);
         ncclAllGather(a, b, big / n, ncclFloat32, comm, stream);
         return ncclGroupEnd();
       }},
      {"send/recv ring", 11.5, [&] {
         ncclGroupStart();
         ncclSend(a, big, ncclFloat32, next, comm, stream);
         ncclRecv(b, big, ncclFloat32, prev, comm, stream);
         return ncclGroupEnd();
       }}};
  const int batches = 25, perBatch = 8;
  // Earlier groups are collected oldest first up to the first still running: not one query per group in flight,
  // and none for a group whose blocks have not reported (its pinned results say it runs). So about one query
  // per group, the one that finds it done; the slack covers groups asked between their blocks' last write and
  // their kernel's end, and those in flight before the window. On one rank an 8-byte kernel ends so soon
  // that on the double (a block is a host thread) the enqueue often finds the previous group reported but its
  // kernel not yet ended, so it asks again at the next: 1.65-1.8 queries per enqueue on a loaded machine, as
  // many as without the pinned-results check (1.83). So one rank is bounded by two per enqueue (not one per
  // group in flight); two ranks, where the mutation gives 1.87, by one and a half.
  const uint64_t maxQueries = static_cast<uint64_t>(batches * perBatch) * (n == 1 ? 4 : 3) / 2 + 8;
  for (const Shape& shape : shapes) {
    for (int i = 0; i < 16; ++i) RANK_NCCL(shape.enqueue());  // warm: slots, images, connections
    CUDA_OK(cudaStreamSynchronize(stream));
    long allocations = 0;
    uint64_t syncs = 0, queries = ~0ull, calls = 0;
    double cpuUs = 0;
    // On the double a block is a host thread: on a loaded machine the window between its last write and its
    // kernel's end grows, and with it the queries that find a reported group not yet ended. So three windows
    // are measured, alike on every rank; queries, calls and CPU count in the window with the fewest queries,
    // allocations and synchronisations in every one.
    for (int window = 0; window < 3; ++window) {
      uint64_t windowQueries = 0, windowCalls = 0;
      double windowUs = 0;
      for (int k = 0; k < batches; ++k) {
        const long a0 = tAllocations;
        const uint64_t s0 = fakeCudaSynchronizations ? fakeCudaSynchronizations() : 0;
        const uint64_t q0 = fakeCudaEventQueries ? fakeCudaEventQueries() : 0;
        const uint64_t c0 = fakeCudaCallsOnThisThread ? fakeCudaCallsOnThisThread() : 0;
        const double t0 = threadCpuUs();
        for (int i = 0; i < perBatch; ++i) RANK_NCCL(shape.enqueue());
        windowUs += threadCpuUs() - t0;
        windowCalls += (fakeCudaCallsOnThisThread ? fakeCudaCallsOnThisThread() : 0) - c0;
        syncs += (fakeCudaSynchronizations ? fakeCudaSynchronizations() : 0) - s0;
        windowQueries += (fakeCudaEventQueries ? fakeCudaEventQueries() : 0) - q0;
        allocations += tAllocations - a0;
        CUDA_OK(cudaStreamSynchronize(stream));
      }
      if (windowQueries < queries) {
        queries = windowQueries;
        calls = windowCalls;
        cpuUs = windowUs;
      }
    }
    if (ctx.rank == 0 || allocations != 0 || syncs != 0) {
      char counted[160] = "";  // what only the CUDA double counts
      if (fakeCudaCallsOnThisThread)
        snprintf(counted, sizeof(counted), ", %llu synchronisations, %.2f event queries and %.2f CUDA calls per enqueue",
                 static_cast<unsigned long long>(syncs), double(queries) / (batches * perBatch),
                 double(calls) / (batches * perBatch));
      printf("[warm_enqueue] %d ranks, %s: %.2f us host CPU per enqueue, %ld allocations%s in %d enqueues\n", n,
             shape.name, cpuUs / (batches * perBatch), allocations, counted, batches * perBatch);
    }
    RANK_CHECK(allocations == 0);
    RANK_CHECK(syncs == 0);
    RANK_CHECK(queries <= maxQueries);
    if (fakeCudaCallsOnThisThread) RANK_CHECK(double(calls) / (batches * perBatch) <= shape.maxCalls);
  }
  for (float* p : {small, a, b}) CUDA_OK(cudaFree(p));
  RANK_NCCL(ncclCommDestroy(comm));
  CUDA_OK(cudaStreamDestroy(stream));
  return 0;
}

// A peer that dies while the CUDA executor's kernel waits on it: the survivor's
// stream does not hang (the kernel learns of the failure through the
// communicator's abort word and stops once idle for a second), and the next
// call reports the failure. Rank 1 exits after one allreduce: killed (no word)
// or by exit() (its communicator says BYE: it left, which no plan can wait out either).
THESEUS_RANK_FN(peer_dies_on_device) {
  OPEN_DEVICE_RANK(stream, comm);
  const size_t count = 1 << 18;
  float* buf;
  CUDA_OK(cudaMalloc(&buf, count * sizeof(float)));
  RANK_NCCL(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  const bool clean = getenv("THESEUS_TEST_PEER_EXITS_CLEANLY") != nullptr;
  if (ctx.rank == 1) {  // gone, mid-job: killed, or exiting (its communicator says BYE at exit)
    if (clean) exit(0);
    _exit(0);
  }
  const auto t0 = std::chrono::steady_clock::now();
  ncclResult_t queued = ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, stream);
  CUDA_OK(cudaStreamSynchronize(stream));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  printf("[peer_dies_on_device] the survivor's stream finished %.2f s after the call (queued: %d)\n", waited,
         int(queued));
  RANK_CHECK(waited < 30);  // the stall timeout is 10 minutes: this is the peer failure at work
  ncclResult_t next = ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, stream);
  ncclResult_t async = ncclSuccess;
  RANK_NCCL(ncclCommGetAsyncError(comm, &async));
  RANK_CHECK(next == ncclRemoteError || queued == ncclRemoteError);
  if (!clean) RANK_CHECK(async == ncclRemoteError);  // a peer that left is no asynchronous error
  RANK_CHECK(strstr(ncclGetLastError(comm), "rank 1") != nullptr || strstr(ncclGetLastError(comm), "peer") != nullptr);
  RANK_NCCL(ncclCommAbort(comm));
  CUDA_OK(cudaFree(buf));
  CUDA_OK(cudaStreamDestroy(stream));
  return 0;
}

// Captures that cannot work are refused with a clear error, and the stream and
// communicator stay usable: device buffers on the staging path (it copies
// through host memory when called), and host memory with any executor.
THESEUS_RANK_FN(capture_refused) {
  OPEN_DEVICE_RANK(stream, comm);
  float* buf;
  CUDA_OK(cudaMalloc(&buf, 1024 * sizeof(float)));
  std::vector<float> host(1024, 1.0f);
  const char* setting = getenv("THESEUS_DEVICE_EXECUTOR");
  const bool cudaExecutor = setting == nullptr || strcmp(setting, "off") != 0;
  struct Case {
    void* buffer;
    const char* says;
  };
  std::vector<Case> cases = {{host.data(), "host memory"}};
  if (!cudaExecutor) cases.push_back({buf, "staging path"});
  for (const Case& c : cases) {
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    ncclResult_t r = ncclAllReduce(c.buffer, c.buffer, 1024, ncclFloat, ncclSum, comm, stream);
    cudaGraph_t graph;
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    RANK_CHECK(r == ncclInvalidUsage);
    RANK_CHECK(strstr(ncclGetLastError(comm), "CUDA graph") != nullptr);
    RANK_CHECK(strstr(ncclGetLastError(comm), c.says) != nullptr);
    if (graph != nullptr) CUDA_OK(cudaGraphDestroy(graph));
  }
  RANK_NCCL(ncclAllReduce(buf, buf, 1024, ncclFloat, ncclSum, comm, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  RANK_NCCL(ncclCommDestroy(comm));
  CUDA_OK(cudaFree(buf));
  CUDA_OK(cudaStreamDestroy(stream));
  return 0;
}

// Bad input that only memory classification shows (a pageable buffer next to a
// device one, a freed device buffer, another device's buffer or stream):
// nothing runs, and the communicator keeps working.
THESEUS_RANK_FN(bad_device_input) {
  CUDA_OK(cudaSetDevice(0));
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  float* dev;
  CUDA_OK(cudaMalloc(&dev, 4096 * sizeof(float)));
  std::vector<float> host(4096, 1.0f);
  // Device send buffer, pageable host receive buffer.
  RANK_CHECK(ncclAllReduce(dev, host.data(), 4096, ncclFloat, ncclSum, comm, nullptr) == ncclInvalidUsage);
  RANK_CHECK(strstr(ncclGetLastError(comm), "pageable host memory") != nullptr);
  // A freed device buffer is no memory at all (CUDA does not know it; the host cannot read it): refused, where
  // taking it for host memory would crash the host path.
  float* freed;
  CUDA_OK(cudaMalloc(&freed, 4096 * sizeof(float)));
  CUDA_OK(cudaFree(freed));
  RANK_CHECK(ncclAllReduce(freed, freed, 4096, ncclFloat, ncclSum, comm, nullptr) == ncclInvalidArgument);
  RANK_CHECK(strstr(ncclGetLastError(comm), "neither memory CUDA knows nor readable host memory") != nullptr);
  int ndev = 0;
  CUDA_OK(cudaGetDeviceCount(&ndev));
  if (ndev > 1) {  // a buffer of another device than the communicator's
    CUDA_OK(cudaSetDevice(1));
    float* other;
    CUDA_OK(cudaMalloc(&other, 4096 * sizeof(float)));
    CUDA_OK(cudaSetDevice(0));
    RANK_CHECK(ncclAllReduce(other, other, 4096, ncclFloat, ncclSum, comm, nullptr) == ncclInvalidArgument);
    RANK_CHECK(strstr(ncclGetLastError(comm), "CUDA device 1") != nullptr);
    CUDA_OK(cudaFree(other));
    // A stream of another device than the communicator's, whatever device is current.
    cudaStream_t otherStream;
    CUDA_OK(cudaSetDevice(1));
    CUDA_OK(cudaStreamCreate(&otherStream));
    for (int current : {0, 1}) {
      CUDA_OK(cudaSetDevice(current));
      RANK_CHECK(ncclAllReduce(dev, dev, 4096, ncclFloat, ncclSum, comm, otherStream) == ncclInvalidUsage);
      RANK_CHECK(strstr(ncclGetLastError(comm), "belongs to CUDA device 1, but the communicator") != nullptr);
    }
    CUDA_OK(cudaStreamDestroy(otherStream));
    CUDA_OK(cudaSetDevice(0));
  }
  // Still usable.
  RANK_NCCL(ncclAllReduce(dev, dev, 4096, ncclFloat, ncclSum, comm, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaFree(dev));
  RANK_NCCL(ncclCommDestroy(comm));
  return 0;
}

TEST(Gpu, BadDeviceInputIsRefusedBeforeAnythingRuns) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  for (const char* executor : {"off", "auto"}) {
    theseus::test::SpawnOptions twoDevices;  // on the CUDA test double: another device to misuse (a GPU has its own)
    twoDevices.env["THESEUS_FAKE_CUDA_DEVICES"] = "2";
    twoDevices.env["THESEUS_DEVICE_EXECUTOR"] = executor;
    SCOPED_TRACE(executor);
    for (int n : {1, 2}) EXPECT_RANKS_OK(theseus::test::runRanks("bad_device_input", n, twoDevices));
  }
}

TEST(Gpu, GraphCapturesThatCannotWorkAreRefusedClearly) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  EXPECT_RANKS_OK(theseus::test::runRanks("capture_refused", 1, stagingPath()));
  EXPECT_RANKS_OK(theseus::test::runRanks("capture_refused", 1, cudaExecutor()));
}

TEST(GpuCudaExecutor, AWarmEnqueueNeitherAllocatesNorSynchronises) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  // Leases long enough that the epoch clock's slow path (renewing the lease with the leader, at most
  // once per lease: an amortised cost of the hot-swap protocol, docs/epochs.md "Cost") stays out of
  // the measured windows.
  auto options = cudaExecutor();
  options.env["THESEUS_EPOCH_LEASE_MIN"] = "65536";
  options.env["THESEUS_EPOCH_LEASE_MS"] = "600000";
  for (int n : {1, 2}) EXPECT_RANKS_OK(theseus::test::runRanks("warm_enqueue", n, options));
}

TEST(GpuCudaExecutor, ThreadsOfOneProcessMayRunAheadOfEachOther) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  auto options = cudaExecutor();
  options.timeoutSec = 90;
  EXPECT_RANKS_OK(theseus::test::runRanks("threads_run_ahead", 1, options));
}

TEST(GpuCudaExecutor, APeerThatDiesDoesNotHangTheStream) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  for (bool clean : {false, true}) {
    auto options = cudaExecutor();
    if (clean) options.env["THESEUS_TEST_PEER_EXITS_CLEANLY"] = "1";
    auto rr = theseus::test::runRanks("peer_dies_on_device", 2, options);
    ASSERT_EQ(rr.exitCodes.size(), 2u) << rr.describe();
    EXPECT_EQ(rr.exitCodes[0], 0) << (clean ? "exit: " : "_exit: ") << rr.describe();
    EXPECT_EQ(rr.exitCodes[1], 0) << rr.describe();
  }
}

// Every operation on 4 channels, each a thread block of its own (THESEUS_DEVICE_CHANNEL_BYTES=0 gives small
// operations channels too; 3 blocks, so some block runs two channels): every collective, a device-scalar
// PreMulSum in a group whose second operation reads what the first wrote, captures and replays, and a warm
// enqueue that still neither allocates nor synchronises.
TEST(GpuCudaExecutor, ChannelsRunOnThreadBlocksOfTheirOwn) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  auto options = cudaExecutor();
  options.env["THESEUS_DEVICE_CHANNEL_BYTES"] = "0";
  options.env["THESEUS_DEVICE_CHANNELS"] = "4";
  options.env["THESEUS_DEVICE_BLOCKS"] = "3";
  for (int n : {2, 3}) {
    EXPECT_RANKS_OK(theseus::test::runRanks("device_collectives", n, options));
    EXPECT_RANKS_OK(theseus::test::runRanks("device_scalar_and_reuse", n, options));
  }
  EXPECT_RANKS_OK(theseus::test::runRanks("capture_replay", 2, options));
  options.env["THESEUS_EPOCH_LEASE_MIN"] = "65536";
  options.env["THESEUS_EPOCH_LEASE_MS"] = "600000";
  EXPECT_RANKS_OK(theseus::test::runRanks("warm_enqueue", 2, options));
}

TEST(GpuCudaExecutor, LargeGroupsRunAndReplay) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  for (int n : {1, 2}) EXPECT_RANKS_OK(theseus::test::runRanks("large_group", n, cudaExecutor()));
}

TEST(GpuCudaExecutor, CapturedOperationsReplayCorrectly) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  for (int n : {1, 2}) EXPECT_RANKS_OK(theseus::test::runRanks("capture_replay", n, cudaExecutor()));
  auto registered = cudaExecutor();  // the same with the buffers registered: replays read peers' buffers in place
  registered.env["THESEUS_TEST_REGISTER"] = "1";
  EXPECT_RANKS_OK(theseus::test::runRanks("capture_replay", 2, registered));
}

// Ranks spawned with `options` log at INFO, for `subsys`, to one file per process in `dir` (read back by
// ownLog in each rank).
void logTo(theseus::test::SpawnOptions* options, const char* dir, const char* subsys) {
  options->env["NCCL_DEBUG"] = "INFO";
  options->env["NCCL_DEBUG_SUBSYS"] = subsys;
  options->env["NCCL_DEBUG_FILE"] = std::string(dir) + "/log.%p";
}

// Zero-copy between local ranks: registered device buffers (ncclCommRegister,
// window registration, ncclMemAlloc memory registered) are read in place by
// the peers' kernels once they mapped them (the first group after a
// registration still copies through FIFO slots). Results are checked in every
// phase: registered, in place on a registered buffer, after deregistration
// (slots again) and with a window. The rank then finds in its own log
// (NCCL_DEBUG_FILE) that its peers did read its buffers in place and that it
// mapped theirs.
// This process's NCCL_DEBUG_FILE (a "%p" pattern), "" when there is none.
std::string ownLog() {
  const char* pattern = getenv("NCCL_DEBUG_FILE");
  if (pattern == nullptr) return "";
  std::string path = pattern;
  path.replace(path.find("%p"), 2, std::to_string(getpid()));
  FILE* f = fopen(path.c_str(), "r");
  if (f == nullptr) return "";
  std::string log;
  char buf[4096];
  for (size_t k; (k = fread(buf, 1, sizeof(buf), f)) > 0;) log.append(buf, k);
  fclose(f);
  return log;
}

// Whether a rank's log holds every '|'-separated text of THESEUS_TEST_EXPECT_LOG<suffix> and none of
// THESEUS_TEST_FORBID_LOG<suffix> (a text that starts with '~' is a regular expression); an empty log fails.
bool logMeetsExpectations(const std::string& log, const std::string& suffix = "") {
  if (log.empty()) {
    fprintf(stderr, "no log to check (NCCL_DEBUG_FILE)\n");
    return false;
  }
  auto found = [&](const std::string& t) {
    return t[0] == '~' ? std::regex_search(log, std::regex(t.substr(1))) : log.find(t) != std::string::npos;
  };
  auto each = [&](const std::string& variable, bool wanted) {
    const char* list = getenv(variable.c_str());
    std::string l = list != nullptr ? list : "";
    for (size_t at = 0; at < l.size();) {
      const size_t bar = std::min(l.find('|', at), l.size());
      if (bar > at && found(l.substr(at, bar - at)) != wanted) {
        fprintf(stderr, "log expectation failed (%s): %s\n", variable.c_str(), l.substr(at, bar - at).c_str());
        return false;
      }
      at = bar + 1;
    }
    return true;
  };
  return each("THESEUS_TEST_EXPECT_LOG" + suffix, true) && each("THESEUS_TEST_FORBID_LOG" + suffix, false);
}

THESEUS_RANK_FN(registered_zero_copy) {
  OPEN_DEVICE_RANK(stream, comm);
  const int n = ctx.nranks, next = (ctx.rank + 1) % n, prev = (ctx.rank + n - 1) % n;
  const size_t count = (1 << 18) + 5, bytes = count * sizeof(float);
  float *send, *recv;
  // THESEUS_TEST_MEMALLOC: every buffer from ncclMemAlloc (VMM memory, shared through file descriptors).
  const bool memAlloc = getenv("THESEUS_TEST_MEMALLOC") != nullptr;
  if (memAlloc) {
    RANK_NCCL(ncclMemAlloc(reinterpret_cast<void**>(&send), bytes));
    RANK_NCCL(ncclMemAlloc(reinterpret_cast<void**>(&recv), bytes));
  } else {
    CUDA_OK(cudaMalloc(&send, bytes));
    CUDA_OK(cudaMalloc(&recv, bytes));
  }
  std::vector<float> host(count), got(count);
  auto fill = [&](float* dst, int iter) -> int {
    for (size_t i = 0; i < count; ++i) host[i] = float((i % 13) + 100 * ctx.rank + iter);
    CUDA_OK(cudaMemcpy(dst, host.data(), bytes, cudaMemcpyHostToDevice));
    return 0;
  };
  // allreduce (out of place, or in place on `recv`) and a send/recv ring, every result checked.
  auto round = [&](float* src, float* dst, int iter, bool inPlace) -> int {
    if (fill(inPlace ? dst : src, iter) != 0) return 1;
    RANK_NCCL(ncclAllReduce(inPlace ? dst : src, dst, count, ncclFloat, ncclSum, comm, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(got.data(), dst, bytes, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; i += 31) {
      double want = 0;
      for (int r = 0; r < n; ++r) want += double((i % 13) + 100 * r + iter);
      RANK_CHECK(got[i] == float(want));
    }
    if (fill(src, iter) != 0) return 1;
    RANK_NCCL(ncclGroupStart());
    RANK_NCCL(ncclSend(src, count, ncclFloat, next, comm, stream));
    RANK_NCCL(ncclRecv(dst, count, ncclFloat, prev, comm, stream));
    RANK_NCCL(ncclGroupEnd());
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(got.data(), dst, bytes, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; i += 29) RANK_CHECK(got[i] == float((i % 13) + 100 * prev + iter));
    return 0;
  };
  // With ncclMemAlloc memory, a dozen more registrations first: their descriptors fill the peers' queues
  // (net.unix.max_dgram_qlen, often 10), so those of `send` and `recv` reach the peers only at later groups.
  std::vector<void*> extra(memAlloc ? 12 : 0), extraHandles(extra.size());
  for (size_t i = 0; i < extra.size(); ++i) {
    RANK_NCCL(ncclMemAlloc(&extra[i], 4096));
    RANK_NCCL(ncclCommRegister(comm, extra[i], 4096, &extraHandles[i]));
  }
  void *hs = nullptr, *hr = nullptr;
  RANK_NCCL(ncclCommRegister(comm, send, bytes, &hs));
  RANK_NCCL(ncclCommRegister(comm, recv, bytes, &hr));
  for (int iter = 0; iter < 4; ++iter) RANK_CHECK(round(send, recv, iter, iter == 3) == 0);
  RANK_NCCL(ncclCommDeregister(comm, hs));
  RANK_NCCL(ncclCommDeregister(comm, hr));
  for (size_t i = 0; i < extra.size(); ++i) {
    RANK_NCCL(ncclCommDeregister(comm, extraHandles[i]));
    RANK_NCCL(ncclMemFree(extra[i]));
  }
  for (int iter = 4; iter < 6; ++iter) RANK_CHECK(round(send, recv, iter, false) == 0);  // FIFO slots again
  // ncclMemAlloc memory as a window.
  void* win = nullptr;
  RANK_NCCL(ncclMemAlloc(&win, bytes));
  ncclWindow_t w;
  RANK_NCCL(ncclCommWindowRegister(comm, win, bytes, &w, 0));
  for (int iter = 6; iter < 9; ++iter) RANK_CHECK(round(static_cast<float*>(win), recv, iter, false) == 0);
  RANK_NCCL(ncclCommWindowDeregister(comm, w));
  RANK_NCCL(ncclMemFree(win));
  if (memAlloc) {
    RANK_NCCL(ncclMemFree(send));
    RANK_NCCL(ncclMemFree(recv));
  } else {
    CUDA_OK(cudaFree(send));
    CUDA_OK(cudaFree(recv));
  }
  RANK_NCCL(ncclCommDestroy(comm));
  CUDA_OK(cudaStreamDestroy(stream));
  if (n > 1) {
    const std::string log = ownLog();
    RANK_CHECK(!log.empty());
    RANK_CHECK(log.find("in place from its registered device buffers (zero-copy)") != std::string::npos);
    RANK_CHECK(log.find("registered device buffer") != std::string::npos &&
               log.find("in place (" + std::string(getenv("THESEUS_TEST_EXPECT_MAPPING"))) != std::string::npos);
  }
  return 0;
}

TEST(GpuCudaExecutor, RegisteredBuffersAreReadInPlaceByLocalPeers) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  char dir[] = "/tmp/theseus-zc-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  auto options = cudaExecutor();
  logTo(&options, dir, "REG");
  options.env["THESEUS_TEST_EXPECT_MAPPING"] = "CUDA IPC";
  for (int n : {1, 2, 4}) EXPECT_RANKS_OK(theseus::test::runRanks("registered_zero_copy", n, options));
  // ncclMemAlloc memory (CUDA's VMM API), which legacy CUDA IPC cannot share: its physical allocation goes to
  // the peers as a file descriptor, and they read it in place as well.
  options.env["THESEUS_TEST_MEMALLOC"] = "1";
  options.env["THESEUS_TEST_EXPECT_MAPPING"] = "CUDA VMM, file descriptor";
  for (int n : {2, 4}) EXPECT_RANKS_OK(theseus::test::runRanks("registered_zero_copy", n, options));
  std::string rm = std::string("rm -rf ") + dir;
  EXPECT_EQ(system(rm.c_str()), 0);
}

// Host memory registered for the GPU (device FIFOs with host slots, proxy rings, export tables) is
// unregistered by its owner before it is unmapped: the driver knows a registration by its address, so a
// later communicator whose segments land at the same addresses would otherwise be taken as registered
// and its kernels would reach the old pages. Communicators split off one after another, each used and
// destroyed (their segments tend to reuse the addresses just freed): results checked every time, and on
// the CUDA test double the registered bytes go back to what they were once each communicator is gone.
THESEUS_RANK_FN(destroyed_communicators_unregister) {
  OPEN_DEVICE_RANK(stream, comm);
  auto registered = [] { return fakeCudaRegisteredHostBytes ? fakeCudaRegisteredHostBytes() : 0; };
  const bool expectRegistered = fakeCudaRegisteredHostBytes && getenv("THESEUS_TEST_EXPECT_REGISTERED") != nullptr;
  const int n = ctx.nranks;
  const size_t count = (1 << 18) + 7;
  std::vector<float> host(count);
  float* buf;
  CUDA_OK(cudaMalloc(&buf, count * sizeof(float)));
  auto allreduce = [&](ncclComm_t c, int life) -> int {
    for (size_t i = 0; i < count; ++i) host[i] = float((i % 11) + ctx.rank + life);
    CUDA_OK(cudaMemcpy(buf, host.data(), count * sizeof(float), cudaMemcpyHostToDevice));
    RANK_NCCL(ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, c, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(host.data(), buf, count * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; i += 13) RANK_CHECK(host[i] == float(n * ((i % 11) + life) + n * (n - 1) / 2));
    return 0;
  };
  const uint64_t before = registered();
  for (int life = 0; life < 3; ++life) {
    ncclComm_t child;
    RANK_NCCL(ncclCommSplit(comm, 0, ctx.rank, &child, nullptr));
    RANK_CHECK(allreduce(child, life) == 0);
    const uint64_t during = registered();
    if (expectRegistered) RANK_CHECK(during > before);
    RANK_NCCL(ncclCommDestroy(child));
    if (registered() != before)
      fprintf(stderr, "[rank %d] communicator %d left %llu bytes registered (%llu while it lived)\n", ctx.rank, life,
              static_cast<unsigned long long>(registered() - before), static_cast<unsigned long long>(during - before));
    RANK_CHECK(registered() == before);
  }
  RANK_CHECK(allreduce(comm, 3) == 0);
  RANK_NCCL(ncclCommDestroy(comm));
  RANK_CHECK(registered() == before);
  CUDA_OK(cudaFree(buf));
  CUDA_OK(cudaStreamDestroy(stream));
  return 0;
}

TEST(GpuCudaExecutor, DestroyedCommunicatorsLeaveNothingRegistered) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  auto slotsInHostMemory = cudaExecutor();  // device FIFOs in the shared-memory inboxes
  slotsInHostMemory.env["NCCL_P2P_DISABLE"] = "1";
  slotsInHostMemory.env["THESEUS_TEST_EXPECT_REGISTERED"] = "1";
  auto proxied = cudaExecutor();  // every rank a host of its own: proxy rings
  proxied.env["THESEUS_TEST_HOST_PER_RANK"] = "1";
  proxied.env["THESEUS_TEST_EXPECT_REGISTERED"] = "1";
  for (const auto* options : {&slotsInHostMemory, &proxied})
    EXPECT_RANKS_OK(theseus::test::runRanks("destroyed_communicators_unregister", 2, *options));
  EXPECT_RANKS_OK(theseus::test::runRanks("destroyed_communicators_unregister", 2, cudaExecutor()));  // GPU slots
}

// GPUDirect RDMA (transport/fifo_proxy.h): every rank a host of its own, so every device FIFO goes
// through the proxy over the IB network (the libibverbs test double). Where the network registers
// GPU memory, the FIFOs keep their payload in GPU memory: the network sends from there and receives
// into there (a dma-buf of the range, which the IB double maps through its descriptor: wrong bytes
// if the descriptor or offset were wrong), and flushes receives where the GPU needs it.
// Collectives of 1 element to several MiB (8 channels, more messages in flight than the ring holds)
// and a send/recv ring, every result checked; then the log says which way the FIFOs went
// (THESEUS_TEST_EXPECT_LOG, "|"-separated, must all appear; THESEUS_TEST_FORBID_LOG must not; an
// entry starting with '~' is a regular expression). On a GPU, the IB double cannot map a real
// dma-buf, so the registration is refused and messages are copied: only results are checked there.
THESEUS_RANK_FN(gdr_fifos) {
  setenv("THESEUS_FAKE_IBV_HOST", ("host" + std::to_string(ctx.rank)).c_str(), 1);
  OPEN_DEVICE_RANK(stream, comm);
  const int n = ctx.nranks, next = (ctx.rank + 1) % n, prev = (ctx.rank + n - 1) % n;
  const size_t maxCount = (size_t{1} << 20) + 7;
  float *src, *dst;
  CUDA_OK(cudaMalloc(&src, maxCount * sizeof(float)));
  CUDA_OK(cudaMalloc(&dst, maxCount * n * sizeof(float)));
  std::vector<float> host(maxCount * n), got(maxCount * n);
  auto value = [](size_t i, int rank, int iter) { return float((i % 61) + 1000 * rank + iter); };
  int iter = 0;
  for (size_t count : {size_t{1}, size_t{3000}, maxCount}) {
    ++iter;
    for (size_t i = 0; i < count; ++i) host[i] = value(i, ctx.rank, iter);
    CUDA_OK(cudaMemcpy(src, host.data(), count * sizeof(float), cudaMemcpyHostToDevice));
    RANK_NCCL(ncclAllReduce(src, dst, count, ncclFloat, ncclSum, comm, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    if (const char* failure = getenv("THESEUS_TEST_EXPECT_FAILURE")) {
      // A failure of the network under the kernel: the kernel stops (it does not hang), and the
      // communicator's asynchronous error says why.
      ncclResult_t async = ncclSuccess;
      for (int i = 0; i < 1000 && async == ncclSuccess; ++i) {
        RANK_NCCL(ncclCommGetAsyncError(comm, &async));
        if (async == ncclSuccess) usleep(10000);
      }
      RANK_CHECK(async != ncclSuccess && async != ncclInProgress);
      // Its own failure, or (a rank whose data never came, as its peer stopped) the peer's.
      const std::string why = ncclGetLastError(comm);
      const bool named = why.find(failure) != std::string::npos || why.find("failed first") != std::string::npos;
      if (!named) fprintf(stderr, "[rank %d] async error: %s\n", ctx.rank, why.c_str());
      RANK_CHECK(named);
      usleep(1000000);  // every rank whose flush failed sees it before a peer's abort could come first
      RANK_NCCL(ncclCommAbort(comm));
      CUDA_OK(cudaFree(src));
      CUDA_OK(cudaFree(dst));
      CUDA_OK(cudaStreamDestroy(stream));
      return 0;
    }
    CUDA_OK(cudaMemcpy(got.data(), dst, count * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; ++i) {
      double want = 0;
      for (int r = 0; r < n; ++r) want += value(i, r, iter);
      RANK_CHECK(got[i] == float(want));
    }
    RANK_NCCL(ncclAllGather(src, dst, count, ncclFloat, comm, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(got.data(), dst, count * n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) RANK_CHECK(got[r * count + i] == value(i, r, iter));
    RANK_NCCL(ncclGroupStart());
    RANK_NCCL(ncclSend(src, count, ncclFloat, next, comm, stream));
    RANK_NCCL(ncclRecv(dst, count, ncclFloat, prev, comm, stream));
    RANK_NCCL(ncclGroupEnd());
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(got.data(), dst, count * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; ++i) RANK_CHECK(got[i] == value(i, prev, iter));
  }
  CUDA_OK(cudaFree(src));
  CUDA_OK(cudaFree(dst));
  RANK_NCCL(ncclCommDestroy(comm));
  CUDA_OK(cudaStreamDestroy(stream));
  if (fakeCudaCallsOnThisThread == nullptr) return 0;  // a real GPU: results only (above)
  RANK_CHECK(logMeetsExpectations(ownLog()));
  return 0;
}

TEST(GpuCudaExecutor, ProxiedFifosUseGpuMemoryThroughGpuDirectRdma) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  if (access(THESEUS_FAKE_IBVERBS, R_OK) != 0)  // binaries carried to another machine
    GTEST_SKIP() << "the libibverbs test double is not at " << THESEUS_FAKE_IBVERBS;
  char dir[] = "/tmp/theseus-gdr-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  auto base = cudaExecutor();
  base.env["NCCL_IBVERBS_LIB"] = THESEUS_FAKE_IBVERBS;
  base.env["THESEUS_FAKE_IBV_DIR"] = dir;
  base.env["NCCL_NET"] = "IB";
  base.env["NCCL_SHM_DISABLE"] = "1";
  base.env["THESEUS_TEST_HOST_PER_RANK"] = "1";
  logTo(&base, dir, "INIT,NET,REG");
  struct Case {
    const char* what;
    std::vector<std::pair<std::string, std::string>> env;
    std::string expect;
    std::string forbid;
  };
  // Send and receive FIFOs both in host memory, and nothing registered.
  const char* kNoGdr = "GPUDirect RDMA to rank|GPUDirect RDMA from rank|, in GPU memory: GPUDirect RDMA)";
  const char* kLanded = "~[1-9][0-9]* landed in GPU memory";
  const char* kFlushed = "~[1-9][0-9]* flushed";
  const std::string landedAndFlushed = std::string(kLanded) + "|" + kFlushed + "|";
  const Case cases[] = {
      {"GPUDirect RDMA through dma-bufs (an sm_90 GPU: receives not flushed)", {},
       std::string("GPUDirect RDMA to rank|GPUDirect RDMA from rank|(by dma-buf)|, in GPU memory: GPUDirect RDMA)|"
                   "not flushed|") + kLanded,
       std::string("copied through host memory|, in host memory)|") + kFlushed},
      {"NCCL_NET_GDR_READ=0 (sends staged, receives still GPUDirect)", {{"NCCL_NET_GDR_READ", "0"}},
       "GPUDirect RDMA from rank|~device FIFO from rank [0-9]+ channel [0-9]+ through a proxy \\([^)]*in GPU memory",
       "GPUDirect RDMA to rank"},
      {"NCCL_NET_GDR_LEVEL=LOC", {{"NCCL_NET_GDR_LEVEL", "LOC"}}, ", in host memory)", kNoGdr},
      {"a provider without dma-bufs", {{"THESEUS_FAKE_IBV_FAULT", "no_dmabuf"}}, ", in host memory)", kNoGdr},
      {"a driver without dma-bufs", {{"THESEUS_FAKE_CUDA_NO_DMABUF", "1"}}, ", in host memory)", kNoGdr},
      {"a registration the NIC refuses", {{"THESEUS_FAKE_IBV_FAULT", "dmabuf_fail"}},
       ", in GPU memory: GPUDirect RDMA)|could not be registered|copied through host memory",
       "GPUDirect RDMA to rank|GPUDirect RDMA from rank"},
      {"NCCL_NET_FORCE_FLUSH=1", {{"NCCL_NET_FORCE_FLUSH", "1"}},
       landedAndFlushed + "each flushed (NCCL_NET_FORCE_FLUSH=1)|GPUDirect RDMA from rank", ""},
      {"an sm_80 GPU (receives flushed)", {{"THESEUS_FAKE_CUDA_CC", "80"}},
       landedAndFlushed + "each flushed (a GPU before compute capability 9.0)|GPUDirect RDMA from rank", ""},
      {"an sm_80 GPU with NCCL_GDR_FLUSH_DISABLE=1", {{"THESEUS_FAKE_CUDA_CC", "80"}, {"NCCL_GDR_FLUSH_DISABLE", "1"}},
       std::string(kLanded) + "|each flushed (a GPU before compute capability 9.0)", kFlushed},
      {"flushes that fail (the kernel stops, the asynchronous error says why)",
       {{"THESEUS_FAKE_CUDA_CC", "80"}, {"THESEUS_FAKE_IBV_FAULT", "read_fail"},
        {"THESEUS_TEST_EXPECT_FAILURE", "flush"}},
       "", ""},
  };
  for (const Case& c : cases) {
    auto o = base;
    for (const auto& [k, v] : c.env) o.env[k] = v;
    o.env["THESEUS_TEST_EXPECT_LOG"] = c.expect;
    o.env["THESEUS_TEST_FORBID_LOG"] = c.forbid;
    for (int n : {2, 3}) {
      auto r = theseus::test::runRanks("gdr_fifos", n, o);
      EXPECT_TRUE(r.allOk()) << c.what << ", " << n << " ranks: " << r.describe();
      if (o.env.count("THESEUS_TEST_EXPECT_FAILURE") == 0) continue;
      // Some rank's log names the failed flush (no earlier case's can: none failed).
      std::string logs;
      if (DIR* d = opendir(dir)) {
        while (dirent* e = readdir(d))
          if (strncmp(e->d_name, "log.", 4) == 0) logs += theseus::test::readFile(std::string(dir) + "/" + e->d_name);
        closedir(d);
      }
      EXPECT_NE(logs.find("test (flush) from rank"), std::string::npos) << c.what << ", " << n << " ranks";
    }
  }
  std::string rm = std::string("rm -rf ") + dir;
  EXPECT_EQ(system(rm.c_str()), 0);
}

// THESEUS_DEVICE_EXECUTOR=auto (the default) gives a communicator the CUDA
// executor only when every one of its ranks uses CUDA. A rank whose process
// sees no device (the test hides it: CUDA_VISIBLE_DEVICES empty on a GPU,
// THESEUS_FAKE_CUDA_DEVICES=0 on the double) joins with host buffers; then
// every rank's device buffers take the staging path, and a capture on a rank
// with device buffers is refused, with the reason, before the call numbers
// anything: the next allreduce still matches on every rank. Each rank checks
// its results, that its capture is accepted and replays correctly or is
// refused (naming THESEUS_TEST_REFUSAL_SAYS) as THESEUS_TEST_EXPECT_CUDA_EXECUTOR
// says, and on the double its own
// log (THESEUS_TEST_EXPECT_LOG / THESEUS_TEST_FORBID_LOG).
THESEUS_RANK_FN(executor_choice) {
  int ndev = 0;
  const bool gpu = cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0;
  const bool expectCuda = getenv("THESEUS_TEST_EXPECT_CUDA_EXECUTOR") != nullptr;
  cudaStream_t stream = nullptr;
  if (gpu) {  // GPU 0, or THESEUS_TEST_DEVICE_PER_RANK: one per rank as far as they go
    CUDA_OK(cudaSetDevice(getenv("THESEUS_TEST_DEVICE_PER_RANK") != nullptr ? ctx.rank % ndev : 0));
    CUDA_OK(cudaStreamCreate(&stream));
  }
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  const int n = ctx.nranks;
  const size_t count = 4099;
  std::vector<float> host(count);
  float* buf = host.data();
  if (gpu) CUDA_OK(cudaMalloc(&buf, count * sizeof(float)));
  auto fill = [&]() -> int {  // every element rank + 1, in stream order
    std::fill(host.begin(), host.end(), float(ctx.rank + 1));
    if (gpu) CUDA_OK(cudaMemcpyAsync(buf, host.data(), count * sizeof(float), cudaMemcpyHostToDevice, stream));
    return 0;
  };
  auto check = [&]() -> int {  // the allreduce's sum, read after the stream's work
    if (gpu) {
      CUDA_OK(cudaStreamSynchronize(stream));
      CUDA_OK(cudaMemcpy(host.data(), buf, count * sizeof(float), cudaMemcpyDeviceToHost));
    }
    for (size_t i = 0; i < count; ++i) RANK_CHECK(host[i] == float(n * (n + 1) / 2));
    return 0;
  };
  RANK_CHECK(fill() == 0);
  RANK_NCCL(ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, comm, stream));
  RANK_CHECK(check() == 0);
  if (gpu) {
    RANK_CHECK(fill() == 0);
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    ncclResult_t r = ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, comm, stream);
    cudaGraph_t graph = nullptr;
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    if (expectCuda) {
      RANK_NCCL(r);
      cudaGraphExec_t exec;
      CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
      CUDA_OK(cudaGraphLaunch(exec, stream));
      RANK_CHECK(check() == 0);
      CUDA_OK(cudaGraphExecDestroy(exec));
    } else {
      RANK_CHECK(r == ncclInvalidUsage);
      RANK_CHECK(strstr(ncclGetLastError(comm), "cannot be captured") != nullptr);
      RANK_CHECK(strstr(ncclGetLastError(comm), getenv("THESEUS_TEST_REFUSAL_SAYS")) != nullptr);
    }
    if (graph != nullptr) CUDA_OK(cudaGraphDestroy(graph));
  }
  RANK_CHECK(fill() == 0);  // in step with the peers: a refused capture numbered nothing
  RANK_NCCL(ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, comm, stream));
  RANK_CHECK(check() == 0);
  RANK_NCCL(ncclCommDestroy(comm));
  if (gpu) {
    CUDA_OK(cudaFree(buf));
    CUDA_OK(cudaStreamDestroy(stream));
  }
  if (fakeCudaCallsOnThisThread == nullptr) return 0;  // a real GPU: results only (above)
  RANK_CHECK(logMeetsExpectations(ownLog(), gpu ? "" : "_HOST"));
  return 0;
}

TEST(Gpu, TheDefaultExecutorIsCudaWhereEveryRankUsesCuda) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  char dir[] = "/tmp/theseus-choice-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  theseus::test::SpawnOptions base;
  logTo(&base, dir, "INIT");
  base.timeoutSec = 90;
  {
    SCOPED_TRACE("every rank uses CUDA: the CUDA executor, by default and when named");
    auto o = base;
    o.env["THESEUS_TEST_EXPECT_CUDA_EXECUTOR"] = "1";
    o.env["THESEUS_TEST_EXPECT_LOG"] = "device buffers: the CUDA executor (asynchronous";
    o.env["THESEUS_TEST_FORBID_LOG"] = "staged through host memory";
    for (int n : {1, 2}) EXPECT_RANKS_OK(theseus::test::runRanks("executor_choice", n, o));
    o.env["THESEUS_DEVICE_EXECUTOR"] = "cuda";
    EXPECT_RANKS_OK(theseus::test::runRanks("executor_choice", 2, o));
  }
  {
    SCOPED_TRACE("THESEUS_DEVICE_EXECUTOR=off: the staging path, which names the knob");
    auto o = base;
    o.env["THESEUS_DEVICE_EXECUTOR"] = "off";
    o.env["THESEUS_TEST_REFUSAL_SAYS"] = "THESEUS_DEVICE_EXECUTOR=off";
    o.env["THESEUS_TEST_EXPECT_LOG"] =
        "device buffers: the staging executor (THESEUS_DEVICE_EXECUTOR=off)|~device buffers of allreduce #0 \\[[a-z_]+\\] "
        "16396 B on rank [01] are staged through host memory, synchronously \\(THESEUS_DEVICE_EXECUTOR=off\\)";
    o.env["THESEUS_TEST_FORBID_LOG"] = "the CUDA executor (asynchronous";
    // A capture on the staging path is refused on 2 ranks: it must not put rank 0 out of step with rank 1.
    for (int n : {1, 2}) EXPECT_RANKS_OK(theseus::test::runRanks("executor_choice", n, o));
  }
  {
    SCOPED_TRACE("rank 1 does not use CUDA: the staging path on every rank, named in the log and in the refusal");
    auto o = base;
    o.env["THESEUS_TEST_REFUSAL_SAYS"] = "rank 1 of the communicator does not use CUDA";
    o.env["THESEUS_TEST_EXPECT_LOG"] =
        "device buffers: the staging executor (rank 1 of the communicator does not use CUDA|~device buffers of "
        "allreduce #0 .* are staged through host memory, synchronously \\(rank 1 of the communicator does not use CUDA";
    o.env["THESEUS_TEST_EXPECT_LOG_HOST"] = "device buffers: the staging executor (rank 1 of the communicator";
    o.env["THESEUS_TEST_FORBID_LOG"] = "the CUDA executor (asynchronous";
    o.env["THESEUS_TEST_FORBID_LOG_HOST"] = "staged through host memory";
    o.prefix = [](int rank) {
      if (rank != 1) return std::vector<std::string>{};
      return std::vector<std::string>{"env", "CUDA_VISIBLE_DEVICES=", "THESEUS_FAKE_CUDA_DEVICES=0"};
    };
    EXPECT_RANKS_OK(theseus::test::runRanks("executor_choice", 2, o));
    EXPECT_RANKS_OK(theseus::test::runRanks("executor_choice", 3, o));
  }
}

// Ranks in different processes on one GPU: said once at WARN without MPS (their kernels time-slice), at INFO
// with an MPS control daemon; not said for ranks on GPUs of their own. The log is checked on the double (its
// devices have made-up PCI bus ids); a GPU machine checks the results.
TEST(Gpu, ProcessesSharingAGpuAreToldAboutMps) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  char dir[] = "/tmp/theseus-mps-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string pipes = std::string(dir) + "/pipes";
  ASSERT_EQ(mkdir(pipes.c_str(), 0700), 0);
  theseus::test::SpawnOptions o;
  logTo(&o, dir, "INIT");
  o.env["CUDA_MPS_PIPE_DIRECTORY"] = pipes;
  o.env["THESEUS_TEST_EXPECT_CUDA_EXECUTOR"] = "1";
  {
    SCOPED_TRACE("one GPU, no MPS");
    auto w = o;
    w.env["THESEUS_TEST_EXPECT_LOG"] =
        "~rank [01] shares GPU 0000:10:00.0 with rank [01] of another process, and no MPS control daemon was found";
    EXPECT_RANKS_OK(theseus::test::runRanks("executor_choice", 2, w));
  }
  {
    SCOPED_TRACE("one GPU, MPS");
    auto w = o;
    FILE* control = fopen((pipes + "/control").c_str(), "w");
    ASSERT_NE(control, nullptr);
    fclose(control);
    w.env["THESEUS_TEST_EXPECT_LOG"] = "~rank [01] shares GPU 0000:10:00.0 with rank [01] of another process; MPS is running";
    w.env["THESEUS_TEST_FORBID_LOG"] = "no MPS control daemon";
    EXPECT_RANKS_OK(theseus::test::runRanks("executor_choice", 2, w));
    unlink((pipes + "/control").c_str());
  }
  {
    SCOPED_TRACE("a GPU each");
    auto w = o;
    w.env["THESEUS_FAKE_CUDA_DEVICES"] = "2";
    w.env["THESEUS_TEST_DEVICE_PER_RANK"] = "1";
    w.env["THESEUS_TEST_FORBID_LOG"] = "shares GPU";
    EXPECT_RANKS_OK(theseus::test::runRanks("executor_choice", 2, w));
  }
}

// Ranks of one communicator whose buffers are in different kinds of memory:
// device memory on even ranks, pinned host memory (cudaHostAlloc) on odd ones,
// as NVIDIA's library allows (both are device-accessible). Then every rank
// pinned, then a group of a device-buffer operation and a pinned-buffer one,
// then one of pinned and pageable memory. Every result is checked, on the
// CUDA executor and on the staging path.
THESEUS_RANK_FN(mixed_memory_ranks) {
  OPEN_DEVICE_RANK(stream, comm);
  const int n = ctx.nranks;
  const int next = (ctx.rank + 1) % n, prev = (ctx.rank + n - 1) % n;
  std::vector<float> host;
  auto alloc = [&](bool pinned, size_t count, float** p) -> int {
    if (pinned) CUDA_OK(cudaHostAlloc(reinterpret_cast<void**>(p), count * sizeof(float), cudaHostAllocDefault));
    else CUDA_OK(cudaMalloc(p, count * sizeof(float)));
    return 0;
  };
  auto release = [&](bool pinned, float* p) -> int {
    if (pinned) CUDA_OK(cudaFreeHost(p));
    else CUDA_OK(cudaFree(p));
    return 0;
  };
  auto put = [&](float* p, size_t count, float base) -> int {  // after the stream's work, done when it returns
    host.resize(count);
    for (size_t i = 0; i < count; ++i) host[i] = base + float(i % 7);
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(p, host.data(), count * sizeof(float), cudaMemcpyDefault));
    return 0;
  };
  auto get = [&](const float* p, size_t count) -> int {
    host.resize(count);
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(host.data(), p, count * sizeof(float), cudaMemcpyDefault));
    return 0;
  };
  // Phase 0: memory kind by rank parity; phase 1: every rank pinned.
  for (int phase = 0; phase < 2; ++phase) {
    const bool pinned = phase == 1 || ctx.rank % 2 == 1;
    for (size_t count : {size_t(2), size_t(70001)}) {
      float *in = nullptr, *out = nullptr;
      RANK_CHECK(alloc(pinned, count, &in) == 0);
      RANK_CHECK(alloc(pinned, count * n, &out) == 0);
      RANK_CHECK(put(in, count, float(ctx.rank)) == 0);
      RANK_NCCL(ncclAllReduce(in, out, count, ncclFloat, ncclSum, comm, stream));
      RANK_CHECK(get(out, count) == 0);
      for (size_t i = 0; i < count; ++i) RANK_CHECK(host[i] == float(n * (n - 1) / 2 + n * int(i % 7)));
      RANK_NCCL(ncclAllGather(in, out, count, ncclFloat, comm, stream));
      RANK_CHECK(get(out, count * n) == 0);
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < count; ++i) RANK_CHECK(host[r * count + i] == float(r) + float(i % 7));
      RANK_NCCL(ncclGroupStart());
      RANK_NCCL(ncclSend(in, count, ncclFloat, next, comm, stream));
      RANK_NCCL(ncclRecv(out, count, ncclFloat, prev, comm, stream));
      RANK_NCCL(ncclGroupEnd());
      RANK_CHECK(get(out, count) == 0);
      for (size_t i = 0; i < count; ++i) RANK_CHECK(host[i] == float(prev) + float(i % 7));
      RANK_CHECK(release(pinned, in) == 0);
      RANK_CHECK(release(pinned, out) == 0);
    }
  }
  // A group of an allreduce on device buffers and one on pinned buffers (the second reads what the first wrote).
  const size_t count = 4099;
  float *dev = nullptr, *pin = nullptr;
  RANK_CHECK(alloc(false, count, &dev) == 0);
  RANK_CHECK(alloc(true, count, &pin) == 0);
  RANK_CHECK(put(dev, count, float(ctx.rank)) == 0);
  RANK_CHECK(put(pin, count, 1.0f) == 0);
  RANK_NCCL(ncclGroupStart());
  RANK_NCCL(ncclAllReduce(dev, dev, count, ncclFloat, ncclSum, comm, stream));
  RANK_NCCL(ncclAllReduce(pin, pin, count, ncclFloat, ncclSum, comm, stream));
  RANK_NCCL(ncclGroupEnd());
  RANK_CHECK(get(dev, count) == 0);
  for (size_t i = 0; i < count; ++i) RANK_CHECK(host[i] == float(n * (n - 1) / 2 + n * int(i % 7)));
  RANK_CHECK(get(pin, count) == 0);
  for (size_t i = 0; i < count; ++i) RANK_CHECK(host[i] == float(n + n * int(i % 7)));
  // Pinned and pageable memory in one group. With the CUDA executor the GPU would run the one, the CPU the
  // other, over different FIFOs: refused before anything ran, naming the pageable buffer, and the communicator
  // stays in step. Without it both run on the CPU.
  const char* setting = getenv("THESEUS_DEVICE_EXECUTOR");
  const bool onGpu = setting == nullptr || strcmp(setting, "off") != 0;
  std::vector<float> pageable(count, 1.0f);
  RANK_NCCL(ncclGroupStart());
  RANK_NCCL(ncclAllReduce(pin, pin, count, ncclFloat, ncclSum, comm, stream));
  RANK_NCCL(ncclAllReduce(pageable.data(), pageable.data(), count, ncclFloat, ncclSum, comm, stream));
  if (onGpu) {
    RANK_CHECK(ncclGroupEnd() == ncclInvalidUsage);
    RANK_CHECK(strstr(ncclGetLastError(comm), "pageable host memory") != nullptr);
    RANK_NCCL(ncclAllReduce(pageable.data(), pageable.data(), count, ncclFloat, ncclSum, comm, stream));
  } else {
    RANK_NCCL(ncclGroupEnd());
    RANK_CHECK(get(pin, count) == 0);
    for (size_t i = 0; i < count; ++i) RANK_CHECK(host[i] == float(n * n + n * n * int(i % 7)));
  }
  for (size_t i = 0; i < count; ++i) RANK_CHECK(pageable[i] == float(n));
  RANK_CHECK(put(pin, count, 1.0f) == 0);
  RANK_NCCL(ncclAllReduce(pin, pin, count, ncclFloat, ncclSum, comm, stream));
  RANK_CHECK(get(pin, count) == 0);
  for (size_t i = 0; i < count; ++i) RANK_CHECK(host[i] == float(n + n * int(i % 7)));
  RANK_CHECK(release(false, dev) == 0);
  RANK_CHECK(release(true, pin) == 0);
  RANK_NCCL(ncclCommDestroy(comm));
  CUDA_OK(cudaStreamDestroy(stream));
  return 0;
}

// A group over two communicators whose device buffers run on different
// executors: `sub` (ranks 0 and 1, both on a GPU: the CUDA executor) and the
// world (rank 2 has no GPU: the staging executor). Rank 0 puts an operation on
// each into one group, rank 1 issues them one by one: every rank must still
// run each operation over the same FIFOs as its peers (each communicator's
// executor, not one for the whole group).
THESEUS_RANK_FN(groups_across_executors) {
  int ndev = 0;
  const bool gpu = cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0;
  RANK_CHECK(gpu == (ctx.rank != 2));
  cudaStream_t stream = nullptr;
  if (gpu) {
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaStreamCreate(&stream));
  }
  ncclComm_t world, sub;
  RANK_NCCL(ncclCommInitRank(&world, ctx.nranks, ctx.id, ctx.rank));
  RANK_NCCL(ncclCommSplit(world, gpu ? 0 : NCCL_SPLIT_NOCOLOR, ctx.rank, &sub, nullptr));
  const size_t count = 70001;
  std::vector<float> host(count);
  for (int round = 0; round < 3; ++round) {
    if (!gpu) {  // rank 2: the world's allreduce on host memory
      std::fill(host.begin(), host.end(), float(ctx.rank + round));
      RANK_NCCL(ncclAllReduce(host.data(), host.data(), count, ncclFloat, ncclSum, world, stream));
      for (size_t i = 0; i < count; ++i) RANK_CHECK(host[i] == float(3 + 3 * round));
      continue;
    }
    float *a, *w;
    CUDA_OK(cudaMalloc(&a, count * sizeof(float)));
    CUDA_OK(cudaMalloc(&w, count * sizeof(float)));
    std::fill(host.begin(), host.end(), float(ctx.rank + round));
    CUDA_OK(cudaMemcpy(a, host.data(), count * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(w, host.data(), count * sizeof(float), cudaMemcpyHostToDevice));
    if (ctx.rank == 0) {
      RANK_NCCL(ncclGroupStart());
      RANK_NCCL(ncclAllReduce(a, a, count, ncclFloat, ncclSum, sub, stream));
      RANK_NCCL(ncclAllReduce(w, w, count, ncclFloat, ncclSum, world, stream));
      RANK_NCCL(ncclGroupEnd());
    } else {
      RANK_NCCL(ncclAllReduce(a, a, count, ncclFloat, ncclSum, sub, stream));
      RANK_NCCL(ncclAllReduce(w, w, count, ncclFloat, ncclSum, world, stream));
    }
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(host.data(), a, count * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; ++i) RANK_CHECK(host[i] == float(1 + 2 * round));
    CUDA_OK(cudaMemcpy(host.data(), w, count * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; ++i) RANK_CHECK(host[i] == float(3 + 3 * round));
    CUDA_OK(cudaFree(a));
    CUDA_OK(cudaFree(w));
  }
  if (sub != nullptr) RANK_NCCL(ncclCommDestroy(sub));
  RANK_NCCL(ncclCommDestroy(world));
  if (gpu) CUDA_OK(cudaStreamDestroy(stream));
  return 0;
}

TEST(GpuCudaExecutor, RanksMayPassDifferentKindsOfMemory) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  auto options = cudaExecutor();
  options.timeoutSec = 60;
  for (int n : {2, 3}) EXPECT_RANKS_OK(theseus::test::runRanks("mixed_memory_ranks", n, options));
  for (int n : {2, 3}) EXPECT_RANKS_OK(theseus::test::runRanks("mixed_memory_ranks", n, stagingPath()));
}

TEST(GpuCudaExecutor, AGroupRunsEachCommunicatorOnItsOwnExecutor) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  auto options = cudaExecutor();
  options.timeoutSec = 60;
  options.prefix = [](int rank) {
    if (rank != 2) return std::vector<std::string>{};
    return std::vector<std::string>{"env", "CUDA_VISIBLE_DEVICES=", "THESEUS_FAKE_CUDA_DEVICES=0"};
  };
  EXPECT_RANKS_OK(theseus::test::runRanks("groups_across_executors", 3, options));
}

// Rank 0 passes device memory, rank 1 pageable host memory for the same allreduce on a communicator whose ranks
// use the CUDA executor: each runs it over other FIFOs (the device FIFOs, the host FIFOs) and waits for the other
// until the stall timeout. Both then fail, saying that the kinds of memory may differ: rank 1 at once from its
// call (the host executor is synchronous), rank 0 from its next call (the kernel's failure is found then, and
// names allreduce #0, where it named #1 before).
THESEUS_RANK_FN(kinds_across_ranks) {
  OPEN_DEVICE_RANK(stream, comm);
  const size_t count = 1024;
  std::vector<float> host(count, 1.0f);
  float* dev = nullptr;
  CUDA_OK(cudaMalloc(&dev, count * sizeof(float)));
  CUDA_OK(cudaMemcpy(dev, host.data(), count * sizeof(float), cudaMemcpyDefault));
  float* buf = ctx.rank == 0 ? dev : host.data();
  ncclResult_t r = ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, comm, stream);
  if (ctx.rank == 0) {
    RANK_CHECK(r == ncclSuccess);  // queued
    CUDA_OK(cudaStreamSynchronize(stream));  // the kernel stops at the stall timeout
    r = ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, comm, stream);
  }
  RANK_CHECK(r != ncclSuccess);
  const std::string why = ncclGetLastError(comm);
  fprintf(stderr, "rank %d: %s\n", ctx.rank, why.c_str());
  RANK_CHECK(why.find(ctx.rank == 0 ? "if a peer passed pageable host memory for this operation"
                                    : "this rank passed pageable host memory") != std::string::npos);
  RANK_CHECK(why.find("pass buffers of the same kind on every rank") != std::string::npos);
  // The operation that stalled, not the call that found it (the engine reused its plan object for that call).
  RANK_CHECK(why.find("allreduce #0 ") != std::string::npos);
  ncclCommAbort(comm);
  CUDA_OK(cudaFree(dev));
  CUDA_OK(cudaStreamDestroy(stream));
  return 0;
}

// The stall that ranks passing different kinds of memory run into ends with errors that say so, and
// theseus-doctor names the rank from the flight-recorder dumps: a mismatch of FIFOs at that collective.
TEST(GpuCudaExecutor, RanksPassingPageableAndDeviceMemoryAreToldAndTheDoctorNamesThem) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  char dir[] = "/tmp/theseus-kinds-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  auto options = cudaExecutor();
  options.env["THESEUS_STALL_TIMEOUT_MS"] = "2000";
  options.env["THESEUS_FLIGHT_RECORDER_DUMP"] = std::string(dir) + "/fr.%r";
  options.timeoutSec = 60;
  EXPECT_RANKS_OK(theseus::test::runRanks("kinds_across_ranks", 2, options));
  if (access(THESEUS_DOCTOR, X_OK) != 0) {  // binaries carried to another machine
    fprintf(stderr, "theseus-doctor is not at %s: its verdict is not checked\n", THESEUS_DOCTOR);
    return;
  }
  const std::string out = std::string(dir) + "/doctor.json";
  const std::string cmd = std::string(THESEUS_DOCTOR) + " --json " + dir + "/fr.0 " + dir + "/fr.1 > " + out + " 2>&1";
  ASSERT_EQ(system(cmd.c_str()), 0) << theseus::test::readFile(out);
  auto verdict = nlohmann::json::parse(theseus::test::readFile(out), nullptr, false);
  ASSERT_FALSE(verdict.is_discarded()) << theseus::test::readFile(out);
  ASSERT_FALSE(verdict["findings"].empty()) << verdict.dump(1);
  const auto& f = verdict["findings"][0];
  EXPECT_EQ(f["kind"], "mismatch") << verdict.dump(1);
  const std::string words = f.value("words", "");
  for (const char* says : {"different FIFOs", "rank 0 passed device memory (the cuda executor's device FIFOs)",
                           "rank 1 passed host memory (the host executor's host FIFOs)"})
    EXPECT_NE(words.find(says), std::string::npos) << says << " in: " << words;
  (void)system((std::string("rm -rf ") + dir).c_str());
}

// A lane's blocks meet at barriers and a rank's kernel waits for its peers', so the executor splits an operation
// into no more blocks than the GPU holds at once, shared out among the ranks on it (the double holds as many as
// THESEUS_FAKE_CUDA_RESIDENT_BLOCKS says). Results are checked in every case; the log on the double.
TEST(GpuCudaExecutor, AnOperationTakesNoMoreBlocksThanTheGpuHoldsAtOnce) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  char dir[] = "/tmp/theseus-resident-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  theseus::test::SpawnOptions base;
  logTo(&base, dir, "INIT");
  base.env["THESEUS_TEST_EXPECT_CUDA_EXECUTOR"] = "1";
  base.env["THESEUS_DEVICE_CHANNEL_BYTES"] = "0";
  base.env["THESEUS_DEVICE_CHANNELS"] = "4";
  base.env["THESEUS_DEVICE_BLOCKS"] = "16";
  base.timeoutSec = 90;
  struct Case {
    const char* what;
    const char* residentBlocks;  // THESEUS_FAKE_CUDA_RESIDENT_BLOCKS
    int ranks;
    const char* expect;  // THESEUS_TEST_EXPECT_LOG
    const char* forbid;  // THESEUS_TEST_FORBID_LOG, "" for none
  };
  const Case cases[] = {
      {"4 resident blocks, 2 ranks on the GPU: 2 blocks each", "4", 2,
       "THESEUS_DEVICE_BLOCKS=16 capped at 2 blocks per operation on GPU 0: it holds 4 blocks of the kernel at once, "
       "shared by 2 operations or ranks",
       "fewer than the"},
      {"1 resident block, 3 ranks on the GPU: one each, and a WARN", "1", 3,
       "GPU 0 holds 1 blocks of the Theseus kernel at once, fewer than the 3", ""},
      {"a GPU that holds them all: no cap", "1024", 2, "device buffers: the CUDA executor (asynchronous",
       "capped at|fewer than the"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto o = base;
    o.env["THESEUS_FAKE_CUDA_RESIDENT_BLOCKS"] = c.residentBlocks;
    o.env["THESEUS_TEST_EXPECT_LOG"] = c.expect;
    if (*c.forbid != 0) o.env["THESEUS_TEST_FORBID_LOG"] = c.forbid;
    EXPECT_RANKS_OK(theseus::test::runRanks("executor_choice", c.ranks, o));
  }
}
