// The AVX2+F16C build of the reduction kernels: 32-byte vectors and hardware
// half conversions. Everything after the target pragma is generated for
// AVX2+F16C (and only FMA-free arithmetic, so results match the baseline
// kernels bit for bit); avx2Kernels() hands the table out only after cpuid
// says the CPU and OS support it. Never built with -march: the library runs
// on any x86-64.
// The codec helpers (reduce_codec.h) are always_inline templates compiled into
// the AVX2 functions below; GCC still warns, at their generic definitions,
// that 32-byte vector arguments would change an out-of-line ABI that is
// never used.
#pragma GCC diagnostic ignored "-Wpsabi"

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define THESEUS_REDUCE_X86 1
#else
#define THESEUS_REDUCE_X86 0
#endif

// clang: the codec helpers take and return 32-byte vectors, so they must be
// AVX functions here too (clang rejects passing such vectors to a function
// without AVX instead of inlining it first). Only the kernels below call them.
#if THESEUS_REDUCE_X86 && defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,f16c"))), apply_to = function)
#include "exec/reduce_codec.h"
#pragma clang attribute pop
#else
#include "exec/reduce_codec.h"
#endif
#include "exec/reduce_kernels.h"

namespace theseus::exec::kernels {

#if THESEUS_REDUCE_X86
// GCC takes a target pragma for the whole region; clang has no such pragma and
// instead attaches the target attribute to every function declared in it
// (lambdas included).
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,f16c")
#endif
namespace {

constexpr size_t kVecBytes = 32;
#define THESEUS_REDUCE_HAVE_F16C 1
#include "exec/reduce_kernel_body.h"
#undef THESEUS_REDUCE_HAVE_F16C

}  // namespace
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

// F16C from cpuid (leaf 1, ECX bit 29): clang's __builtin_cpu_supports does not
// know "f16c". Its YMM state needs the OS support the avx2 check already proved.
namespace {
bool cpuHasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
}
}  // namespace

const KernelTable* avx2Kernels() {
  static const KernelTable* const table = []() -> const KernelTable* {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !cpuHasF16c()) return nullptr;
    static const KernelTable t = buildTable("avx2+f16c");
    return &t;
  }();
  return table;
}
#else
const KernelTable* avx2Kernels() { return nullptr; }
#endif

}  // namespace theseus::exec::kernels
