// GB/s of the host reduction kernels next to memcpy of the same buffer size,
// in cache (64 KiB) and from memory (64 MiB), for both kernel sets.
//
// Byte accounting (the "bytes_per_second" column): memcpy and scaleCopy move
// 2 streams (read src, write dst), sum moves 3 (read a, read b, write dst),
// each stream being one buffer of the given size. So "sum at 70% of memcpy"
// means the sum streams 70% of the bytes per second memcpy does. The
// "buf_per_second" counter is one buffer per second (elements processed).
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "exec/reduce.h"
#include "exec/reduce_kernels.h"

namespace theseus::exec {
namespace {

constexpr int64_t kInCache = 64 << 10;
constexpr int64_t kFromMemory = 64 << 20;

struct Buffers {
  std::vector<char> a, b, d;
  explicit Buffers(size_t bytes) : a(bytes), b(bytes), d(bytes) {
    // Touch every page and give floating types harmless finite values (0x3c bytes
    // are ~0.0115 as float, 1.06 as half, ~0.0115 as bf16).
    std::memset(a.data(), 0x3c, bytes);
    std::memset(b.data(), 0x3c, bytes);
    std::memset(d.data(), 0, bytes);
  }
};

void report(benchmark::State& state, int64_t bytes, int streams) {
  state.SetBytesProcessed(state.iterations() * bytes * streams);
  state.counters["buf_per_second"] =
      benchmark::Counter(static_cast<double>(bytes), benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1024);
}

void BM_Memcpy(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  Buffers buf(bytes);
  for (auto _ : state) {
    std::memcpy(buf.d.data(), buf.a.data(), bytes);
    benchmark::ClobberMemory();
  }
  report(state, bytes, 2);
}

// dst = a + b with the kernel set selected by range(1): 0 = active (dispatch
// through exec::reduce), 1 = generic, 2 = avx2+f16c.
template <ncclDataType_t kType>
void BM_Sum(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  const size_t n = bytes / typeSize(kType);
  Buffers buf(bytes);
  const kernels::KernelTable* table = state.range(1) == 1 ? &kernels::genericKernels() : kernels::avx2Kernels();
  if (state.range(1) == 2 && table == nullptr) {
    state.SkipWithError("this CPU cannot run the avx2+f16c kernels");
    return;
  }
  Reduction r;
  r.type = kType;
  const kernels::ScaleArg noScale;
  state.SetLabel(state.range(1) == 0 ? reduceKernelIsa() : table->isa);
  for (auto _ : state) {
    if (state.range(1) == 0) {
      reduce(r, buf.d.data(), buf.a.data(), buf.b.data(), n);
    } else {
      table->combine[0][kType](buf.d.data(), buf.a.data(), buf.b.data(), n, noScale);
    }
    benchmark::ClobberMemory();
  }
  report(state, bytes, 3);
}

// dst = a * scalar (PreMulSum / avg pre-scaling of a rank's input).
template <ncclDataType_t kType>
void BM_ScaleCopy(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  const size_t n = bytes / typeSize(kType);
  Buffers buf(bytes);
  Reduction r = builtinReduction(ncclAvg, kType, 8).value();
  state.SetLabel(reduceKernelIsa());
  for (auto _ : state) {
    scaleCopy(r, buf.d.data(), buf.a.data(), n);
    benchmark::ClobberMemory();
  }
  report(state, bytes, 2);
}

void sizes(benchmark::internal::Benchmark* b) {
  for (int64_t size : {kInCache, kFromMemory}) b->Arg(size);
}
void sizesAndSets(benchmark::internal::Benchmark* b) {
  for (int64_t size : {kInCache, kFromMemory})
    for (int set : {0, 1}) b->Args({size, set});
}

BENCHMARK(BM_Memcpy)->Apply(sizes);
BENCHMARK(BM_Sum<ncclFloat32>)->Apply(sizesAndSets);
BENCHMARK(BM_Sum<ncclFloat16>)->Apply(sizesAndSets);
BENCHMARK(BM_Sum<ncclBfloat16>)->Apply(sizesAndSets);
BENCHMARK(BM_Sum<ncclInt32>)->Apply(sizesAndSets);
BENCHMARK(BM_ScaleCopy<ncclFloat32>)->Apply(sizes);
BENCHMARK(BM_ScaleCopy<ncclFloat16>)->Apply(sizes);
BENCHMARK(BM_Memcpy)->Apply(sizes)->Name("BM_Memcpy_again");

}  // namespace
}  // namespace theseus::exec

BENCHMARK_MAIN();
