// The baseline (x86-64 SSE2, or whatever the target's default ISA is) build
// of the reduction kernels: 16-byte vectors, software half conversions.
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "exec/reduce_codec.h"
#include "exec/reduce_kernels.h"

namespace theseus::exec::kernels {
namespace {

constexpr size_t kVecBytes = 16;
#define THESEUS_REDUCE_HAVE_F16C 0
#include "exec/reduce_kernel_body.h"
#undef THESEUS_REDUCE_HAVE_F16C

}  // namespace

const KernelTable& genericKernels() {
  static const KernelTable table = buildTable("generic");
  return table;
}

}  // namespace theseus::exec::kernels
