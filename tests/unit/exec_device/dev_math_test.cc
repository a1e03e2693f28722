// The device executor's element arithmetic (exec/device/dev_math.h), compiled
// for the host, against the host reduction kernels: every datatype, operation
// and PreMulSum scalar, with NaNs, infinities, signed zeros and subnormals in
// the inputs, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "exec/device/dev_lower.h"
#include "exec/reduce.h"

namespace theseus::exec {
namespace {

const ncclDataType_t kTypes[] = {ncclInt8,    ncclUint8,   ncclInt32,    ncclUint32,       ncclInt64,       ncclUint64,
                                 ncclFloat16, ncclFloat32, ncclFloat64,  ncclBfloat16,     ncclFloat8e4m3,  ncclFloat8e5m2};
const RedKind kKinds[] = {RedKind::kSum, RedKind::kProd, RedKind::kMax, RedKind::kMin};

// Random bytes with a generous share of special encodings for floating types.
std::vector<unsigned char> inputs(ncclDataType_t t, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  const size_t esz = typeSize(t);
  std::vector<unsigned char> v(n * esz);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  if (!isFloatType(t)) return v;
  for (size_t i = 0; i < n; i += 3) {
    double special[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, -NAN, 1e-40, -3e-8, 65504.0, 448.0, 57344.0, 1.5};
    double x = special[rng() % 12];
    unsigned char* p = v.data() + i * esz;
    switch (t) {
      case ncclFloat32: { float f = static_cast<float>(x); memcpy(p, &f, 4); break; }
      case ncclFloat64: memcpy(p, &x, 8); break;
      case ncclFloat16: { uint16_t h = floatToHalf(static_cast<float>(x)); memcpy(p, &h, 2); break; }
      case ncclBfloat16: { uint16_t h = floatToBf16(static_cast<float>(x)); memcpy(p, &h, 2); break; }
      case ncclFloat8e4m3: *p = floatToFp8E4M3(static_cast<float>(x)); break;
      default: *p = floatToFp8E5M2(static_cast<float>(x)); break;
    }
  }
  return v;
}

// Whether element bytes `p` of type t are a NaN.
bool isNan(ncclDataType_t t, const unsigned char* p) {
  switch (t) {
    case ncclFloat32: { float f; memcpy(&f, p, 4); return f != f; }
    case ncclFloat64: { double d; memcpy(&d, p, 8); return d != d; }
    case ncclFloat16: { uint16_t h; memcpy(&h, p, 2); return std::isnan(halfToFloat(h)); }
    case ncclBfloat16: { uint16_t h; memcpy(&h, p, 2); return std::isnan(bf16ToFloat(h)); }
    case ncclFloat8e4m3: return std::isnan(fp8E4M3ToFloat(*p));
    case ncclFloat8e5m2: return std::isnan(fp8E5M2ToFloat(*p));
    default: return false;
  }
}

// Equal bits, or both NaN: which NaN operand's payload survives an arithmetic
// operation depends on the operand order the compiler picks (and a GPU returns
// a canonical NaN), so payloads are not part of the contract.
void expectSame(ncclDataType_t t, const std::vector<unsigned char>& host, const std::vector<unsigned char>& device,
                const char* what) {
  const size_t esz = typeSize(t);
  for (size_t i = 0; i < host.size(); i += esz) {
    if (isNan(t, &host[i]) && isNan(t, &device[i])) continue;
    ASSERT_EQ(memcmp(&host[i], &device[i], esz), 0) << typeName(t) << " " << what << " element " << i / esz;
  }
}

std::vector<Reduction> reductionsFor(ncclDataType_t t) {
  std::vector<Reduction> out;
  for (RedKind k : kKinds) {
    Reduction r;
    r.type = t;
    r.kind = k;
    out.push_back(r);
  }
  // PreMulSum scalars: a fraction (floats), a negative and a large integer.
  for (double s : {0.375, -3.0, 7.0}) {
    if (!isFloatType(t) && s != std::trunc(s)) continue;
    Reduction r;
    r.type = t;
    r.kind = RedKind::kSum;
    r.preMul = true;
    r.scalar = s;
    out.push_back(r);
  }
  return out;
}

TEST(DeviceMath, MatchesTheHostKernelsBitForBit) {
  const size_t n = 1000;
  for (ncclDataType_t t : kTypes) {
    const size_t esz = typeSize(t);
    auto a = inputs(t, n, 1 + t), b = inputs(t, n, 100 + t);
    for (const Reduction& r : reductionsFor(t)) {
      dev::Reduction d = dev::toDevice(r);
      for (bool scaleA : {false, true}) {
        std::vector<unsigned char> host(n * esz), device(n * esz);
        if (scaleA) reduceScaleA(r, host.data(), a.data(), b.data(), n);
        else reduce(r, host.data(), a.data(), b.data(), n);
        dev::reduceElems(d, device.data(), a.data(), b.data(), n, scaleA);
        std::string what = "kind " + std::to_string(int(r.kind)) + " preMul " + std::to_string(r.preMul) +
                           " scaleA " + std::to_string(scaleA);
        expectSame(t, host, device, what.c_str());
      }
      std::vector<unsigned char> host(n * esz), device(n * esz);
      scaleCopy(r, host.data(), a.data(), n);
      dev::scaleElems(d, device.data(), a.data(), n);
      if (!r.preMul) memcpy(device.data(), a.data(), n * esz);  // scaleCopy without a scalar is a copy
      expectSame(t, host, device, "scale");
    }
    // Average's division.
    auto avg = builtinReduction(ncclAvg, t, 3).value();
    if (avg.divideAtEnd) {
      std::vector<unsigned char> host = a, device = a;
      divide(avg, host.data(), n);
      dev::divideElems(dev::toDevice(avg), device.data(), n);
      expectSame(t, host, device, "divide");
    }
  }
}

TEST(DeviceMath, CooperatingThreadsCoverEveryElementOnce) {
  const size_t n = 777;
  std::vector<float> a(n, 1.5f), b(n, 2.0f), out(n, 0.0f);
  Reduction r;
  dev::Reduction d = dev::toDevice(r);
  for (size_t t = 0; t < 5; ++t) dev::reduceElems(d, out.data(), a.data(), b.data(), n, false, dev::Span{t, 5});
  for (float v : out) ASSERT_EQ(v, 3.5f);
}

// Reductions and scaled copies in 16-byte packs (dst, a and b agreeing modulo 16, with element loops for the
// head and tail) or element by element (they do not agree): every datatype, element offsets that put the
// three addresses at every skew, lengths around the pack and unroll boundaries, teams of 1 to 512 threads.
// Each gives the host kernels' bits, and nothing outside the range is written.
TEST(DeviceMath, PacksAndElementsGiveTheSameBitsAtEveryAlignment) {
  for (ncclDataType_t t : kTypes) {
    const size_t esz = typeSize(t);
    const size_t cap = 200;
    auto a = inputs(t, cap + 32, 3 + t), b = inputs(t, cap + 32, 300 + t);
    Reduction r;
    r.type = t;
    r.kind = RedKind::kSum;
    r.preMul = true;
    r.scalar = isFloatType(t) ? 0.375 : 3.0;
    const dev::Reduction d = dev::toDevice(r);
    for (size_t offA = 0; offA < 16 / esz + 1; ++offA)
      for (size_t offD : {size_t{0}, offA, size_t{1}})
        for (size_t n : {0, 1, 7, 16, 33, 64, 65, 129, 200})
          for (size_t threads : {1, 3, 512}) {
            std::vector<unsigned char> host((cap + 32) * esz), dev((cap + 32) * esz, 0xAB);
            const unsigned char* pa = a.data() + offA * esz;
            const unsigned char* pb = b.data() + offA * esz;
            reduceScaleA(r, host.data() + offD * esz, pa, pb, n);
            for (size_t k = 0; k < threads; ++k)
              dev::reduceElems(d, dev.data() + offD * esz, pa, pb, n, true, dev::Span{k, threads});
            std::vector<unsigned char> want(host.begin() + offD * esz, host.begin() + (offD + n) * esz);
            std::vector<unsigned char> got(dev.begin() + offD * esz, dev.begin() + (offD + n) * esz);
            std::string what = "reduce offA " + std::to_string(offA) + " offD " + std::to_string(offD) + " n " +
                               std::to_string(n) + " threads " + std::to_string(threads);
            expectSame(t, want, got, what.c_str());
            for (size_t k = 0; k < dev.size(); ++k) {
              const bool outside = k < offD * esz || k >= (offD + n) * esz;
              ASSERT_TRUE(!outside || dev[k] == 0xAB) << what << ": byte " << k << " outside the range was written";
            }
            scaleCopy(r, host.data() + offD * esz, pa, n);
            for (size_t k = 0; k < threads; ++k) dev::scaleElems(d, dev.data() + offD * esz, pa, n, dev::Span{k, threads});
            want.assign(host.begin() + offD * esz, host.begin() + (offD + n) * esz);
            got.assign(dev.begin() + offD * esz, dev.begin() + (offD + n) * esz);
            expectSame(t, want, got, ("scale " + what).c_str());
          }
  }
}

// The kernel's byte copies: words where source and destination agree in alignment (16, 8, 4 bytes), bytes
// for the unaligned head and the tail, threads of a team taking every stride-th word or byte. Every
// alignment pair, sizes around the word boundaries and the unroll, teams of 1 to 512 threads: every byte
// copied once, nothing outside the range touched.
TEST(DeviceMath, TeamCopiesMoveEveryByteOnceWhateverTheAlignment) {
  std::vector<char> src(5000), dst(5000);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(i * 7 + 3);
  for (size_t from = 0; from < 17; ++from)
    for (size_t to = 0; to < 17; ++to)
      for (size_t n : {0, 1, 3, 15, 16, 17, 63, 64, 65, 100, 1000, 4000})
        for (size_t threads : {1, 3, 4, 512}) {
          std::fill(dst.begin(), dst.end(), 0);
          for (size_t t = 0; t < threads; ++t)
            dev::copyBytes(dst.data() + to, src.data() + from, n, dev::Span{t, threads});
          ASSERT_EQ(memcmp(dst.data() + to, src.data() + from, n), 0) << from << " " << to << " " << n << " " << threads;
          for (size_t k = 0; k < dst.size(); ++k) {
            if (k >= to && k < to + n) continue;
            ASSERT_EQ(dst[k], 0) << "byte " << k << " outside the copy was written";
          }
        }
}

}  // namespace
}  // namespace theseus::exec
