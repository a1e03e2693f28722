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

#include "exec/reduce_codec.h"
#include "exec/reduce_kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define THESEUS_REDUCE_X86 1
#else
#define THESEUS_REDUCE_X86 0
#endif

namespace theseus::exec::kernels {

#if THESEUS_REDUCE_X86
#pragma GCC push_options
#pragma GCC target("avx2,f16c")
namespace {

constexpr size_t kVecBytes = 32;
#define THESEUS_REDUCE_HAVE_F16C 1
#include "exec/reduce_kernel_body.h"
#undef THESEUS_REDUCE_HAVE_F16C

}  // namespace
#pragma GCC pop_options

const KernelTable* avx2Kernels() {
  static const KernelTable* const table = []() -> const KernelTable* {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("f16c")) return nullptr;
    static const KernelTable t = buildTable("avx2+f16c");
    return &t;
  }();
  return table;
}
#else
const KernelTable* avx2Kernels() { return nullptr; }
#endif

}  // namespace theseus::exec::kernels
