// The entry points of exec/reduce.h: validation and Reduction builders, the
// per-call scale argument, and dispatch through the kernel table chosen once
// per process (reduce_kernels.h).
#include "exec/reduce.h"

#include <cmath>
#include <cstring>

#include "common/knobs.h"
#include "common/log.h"
#include "exec/reduce_kernels.h"

namespace theseus::exec {
namespace {

static const StringKnob kReduceIsa("THESEUS_REDUCE_ISA", "auto",
                                   "Host reduction kernels: auto (the best this CPU supports), "
                                   "generic (baseline x86-64) or avx2 (AVX2+F16C)");

constexpr double kMaxExactInteger = 9007199254740992.0;  // 2^53

// A datatype is checked through its bytes: callers from C may hold any int in
// it, and loading an out-of-range value *as the enum* is undefined behaviour.
bool validType(const ncclDataType_t& type) {
  static_assert(sizeof(ncclDataType_t) == sizeof(unsigned));
  unsigned raw;
  std::memcpy(&raw, &type, sizeof raw);
  return raw < static_cast<unsigned>(ncclNumTypes);
}
int rawType(const ncclDataType_t& type) {
  int raw;
  std::memcpy(&raw, &type, sizeof raw);
  return raw;
}
bool validKind(RedKind kind) { return static_cast<unsigned>(kind) < static_cast<unsigned>(kernels::kNumKinds); }

bool isIntegralScalar(double v) {
  return std::isfinite(v) && v == std::trunc(v) && std::fabs(v) <= kMaxExactInteger;
}

// Out-of-range values are a caller bug; they must not index the tables.
bool checkedForKernel(const Reduction& r, const char* what) {
  if (validType(r.type) && validKind(r.kind)) return true;
  TH_WARN("exec::%s: invalid reduction (datatype %d, kind %d); destination left unchanged", what, rawType(r.type),
          static_cast<int>(r.kind));
  return false;
}

const kernels::KernelTable& selectKernels() {
  const std::string want = kReduceIsa.get();
  const kernels::KernelTable* avx2 = kernels::avx2Kernels();
  const kernels::KernelTable* chosen = avx2 != nullptr ? avx2 : &kernels::genericKernels();
  if (want == "generic") {
    chosen = &kernels::genericKernels();
  } else if (want == "avx2") {
    if (avx2 == nullptr) TH_WARN("THESEUS_REDUCE_ISA=avx2 but this CPU lacks AVX2/F16C; using generic kernels");
  } else if (want != "auto") {
    TH_WARN("THESEUS_REDUCE_ISA=%s is not one of auto, generic, avx2; using %s", want.c_str(), chosen->isa);
  }
  TH_INFO(log::kInit, "Host reduction kernels: %s", chosen->isa);
  return *chosen;
}

}  // namespace

namespace kernels {

const KernelTable& activeKernels() {
  static const KernelTable& table = selectKernels();
  return table;
}

ScaleArg scaleArgFor(const Reduction& r) {
  ScaleArg s;
  if (!r.preMul) return s;
  const float f = static_cast<float>(r.scalar);
  switch (r.type) {
    case ncclFloat32: s.f = f; break;
    case ncclFloat64: s.d = r.scalar; break;
    case ncclFloat16: s.f = halfToFloat(floatToHalf(f)); break;
    case ncclBfloat16: s.f = bf16ToFloat(floatToBf16(f)); break;
    case ncclFloat8e4m3: s.f = fp8E4M3ToFloat(floatToFp8E4M3(f)); break;
    case ncclFloat8e5m2: s.f = fp8E5M2ToFloat(floatToFp8E5M2(f)); break;
    default:
      // Integers: the two's complement bits of the (integral) scalar; anything
      // checkReduction would reject becomes 0 rather than undefined behaviour.
      s.u = isIntegralScalar(r.scalar) ? static_cast<uint64_t>(static_cast<int64_t>(r.scalar)) : 0;
      break;
  }
  return s;
}

}  // namespace kernels

size_t typeSize(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
  }
}

bool isFloatType(ncclDataType_t type) {
  switch (type) {
    case ncclFloat16:
    case ncclFloat32:
    case ncclFloat64:
    case ncclBfloat16:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return true;
    default: return false;
  }
}

const char* typeName(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: return "int8";
    case ncclUint8: return "uint8";
    case ncclInt32: return "int32";
    case ncclUint32: return "uint32";
    case ncclInt64: return "int64";
    case ncclUint64: return "uint64";
    case ncclFloat16: return "half";
    case ncclFloat32: return "float";
    case ncclFloat64: return "double";
    case ncclBfloat16: return "bfloat16";
    case ncclFloat8e4m3: return "f8e4m3";
    case ncclFloat8e5m2: return "f8e5m2";
    default: return "invalid";
  }
}

Result<Reduction> builtinReduction(ncclRedOp_t op, ncclDataType_t type, int nranks) {
  if (!validType(type)) return invalidArgument("invalid datatype %d", rawType(type));
  if (nranks < 1) return invalidArgument("reduction over %d ranks", nranks);
  Reduction r;
  r.type = type;
  int rawOp;
  static_assert(sizeof(ncclRedOp_t) == sizeof(int));
  std::memcpy(&rawOp, &op, sizeof rawOp);
  switch (rawOp) {
    case ncclSum: r.kind = RedKind::kSum; break;
    case ncclProd: r.kind = RedKind::kProd; break;
    case ncclMax: r.kind = RedKind::kMax; break;
    case ncclMin: r.kind = RedKind::kMin; break;
    case ncclAvg:
      r.kind = RedKind::kSum;
      if (isFloatType(type)) {
        r.preMul = true;
        r.scalar = 1.0 / nranks;
      } else {
        r.divideAtEnd = true;
        r.divisor = static_cast<uint32_t>(nranks);
      }
      break;
    default:
      return invalidArgument("reduction operation %d is not a builtin operation (sum, prod, max, min, avg)", rawOp);
  }
  return r;
}

namespace {

// A PreMulSum of `type` whose scalar is at `scalar`, its value not read yet.
Result<Reduction> preMulSumOf(ncclDataType_t type, const void* scalar) {
  if (!validType(type)) return invalidArgument("invalid datatype %d", rawType(type));
  if (scalar == nullptr) return invalidArgument("PreMulSum scalar is NULL");
  Reduction r;
  r.type = type;
  r.kind = RedKind::kSum;
  r.preMul = true;
  return r;
}

}  // namespace

Result<Reduction> preMulSumReduction(ncclDataType_t type, const void* scalar) {
  TH_ASSIGN(Reduction r, preMulSumOf(type, scalar));
  auto read = [scalar](auto v) {
    std::memcpy(&v, scalar, sizeof(v));
    return v;
  };
  switch (type) {
    case ncclInt8: r.scalar = read(int8_t{}); break;
    case ncclUint8: r.scalar = read(uint8_t{}); break;
    case ncclInt32: r.scalar = read(int32_t{}); break;
    case ncclUint32: r.scalar = read(uint32_t{}); break;
    case ncclInt64: r.scalar = static_cast<double>(read(int64_t{})); break;
    case ncclUint64: r.scalar = static_cast<double>(read(uint64_t{})); break;
    case ncclFloat16: r.scalar = halfToFloat(read(uint16_t{})); break;
    case ncclFloat32: r.scalar = read(float{}); break;
    case ncclFloat64: r.scalar = read(double{}); break;
    case ncclBfloat16: r.scalar = bf16ToFloat(read(uint16_t{})); break;
    case ncclFloat8e4m3: r.scalar = fp8E4M3ToFloat(read(uint8_t{})); break;
    case ncclFloat8e5m2: r.scalar = fp8E5M2ToFloat(read(uint8_t{})); break;
    default: break;
  }
  if (type == ncclInt64 || type == ncclUint64) {
    const uint64_t raw = read(uint64_t{});
    const bool exact = type == ncclInt64 ? static_cast<int64_t>(raw) == static_cast<int64_t>(r.scalar) &&
                                               std::fabs(r.scalar) <= kMaxExactInteger
                                         : raw <= static_cast<uint64_t>(kMaxExactInteger);
    if (!exact)
      return invalidArgument("PreMulSum scalar of type %s is beyond 2^53 in magnitude; Theseus supports integer "
                             "scalars up to 2^53",
                             typeName(type));
  }
  return r;
}

Result<Reduction> deferredPreMulSum(ncclDataType_t type, const void* scalar, device::MemoryKind where) {
  TH_ASSIGN(Reduction r, preMulSumOf(type, scalar));
  r.scalarSource = scalar;
  r.scalarMemory = where;
  return r;
}

Status resolveScalar(Reduction& r, const void* value) {
  TH_ASSIGN(Reduction resolved, preMulSumReduction(r.type, value));
  r.scalar = resolved.scalar;
  r.preMul = true;
  r.scalarSource = nullptr;
  return Status::ok();
}

Status checkReduction(const Reduction& r) {
  if (!validType(r.type)) return invalidArgument("reduction datatype %d is invalid", rawType(r.type));
  if (!validKind(r.kind)) return invalidArgument("reduction kind %d is invalid", static_cast<int>(r.kind));
  if (r.divideAtEnd && r.divisor == 0) return invalidArgument("reduction divides by zero at the end");
  if (r.preMul && !isFloatType(r.type) && !isIntegralScalar(r.scalar))
    return invalidArgument("PreMulSum scalar %g for %s is not an integer of magnitude <= 2^53", r.scalar,
                           typeName(r.type));
  return Status::ok();
}

const char* reduceKernelIsa() { return kernels::activeKernels().isa; }

void reduce(const Reduction& r, void* dst, const void* a, const void* b, size_t n) {
  if (n == 0 || !checkedForKernel(r, "reduce")) return;
  static const kernels::ScaleArg kNoScale;
  kernels::activeKernels().combine[static_cast<int>(r.kind)][r.type](dst, a, b, n, kNoScale);
}

void reduceScaleA(const Reduction& r, void* dst, const void* a, const void* b, size_t n) {
  if (!r.preMul) return reduce(r, dst, a, b, n);
  if (n == 0 || !checkedForKernel(r, "reduceScaleA")) return;
  kernels::activeKernels().combineScaleA[static_cast<int>(r.kind)][r.type](dst, a, b, n, kernels::scaleArgFor(r));
}

void scaleCopy(const Reduction& r, void* dst, const void* src, size_t n) {
  if (n == 0 || !checkedForKernel(r, "scaleCopy")) return;
  if (!r.preMul) {
    if (dst != src) std::memmove(dst, src, n * typeSize(r.type));
    return;
  }
  kernels::activeKernels().scale[r.type](dst, src, n, kernels::scaleArgFor(r));
}

void divide(const Reduction& r, void* dst, size_t n) {
  if (n == 0 || r.divisor == 1 || !checkedForKernel(r, "divide")) return;
  if (r.divisor == 0) {
    TH_WARN("exec::divide: divisor is 0; destination left unchanged");
    return;
  }
  kernels::activeKernels().divide[r.type](dst, n, r.divisor);
}

}  // namespace theseus::exec
