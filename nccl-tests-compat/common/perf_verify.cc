#include "perf_verify.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace theseus::perf {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

bool isPowerOfTwo(int n) { return n > 0 && (n & (n - 1)) == 0; }

int64_t signExtend(uint64_t v, int bits) {
  if (bits >= 64) return static_cast<int64_t>(v);
  uint64_t m = uint64_t{1} << (bits - 1);
  v &= (uint64_t{1} << bits) - 1;
  return static_cast<int64_t>((v ^ m) - m);
}

uint64_t lowBits(uint64_t v, int bits) { return bits >= 64 ? v : v & ((uint64_t{1} << bits) - 1); }

}  // namespace

InputModel::InputModel(ncclDataType_t type, OpKind op, int nranks, uint64_t seed)
    : type_(type), info_(&typeInfo(type)), op_(op), nranks_(std::max(1, nranks)), seed_(splitmix64(seed)) {
  const int n = nranks_;
  const bool additive = op == OpKind::kSum || op == OpKind::kAvg || op == OpKind::kMulSum;
  if (!info_->isFloat) {
    const int bits = static_cast<int>(info_->size * 8);
    const uint64_t maxPos = info_->isSigned ? (uint64_t{1} << (bits - 1)) - 1 : lowBits(~uint64_t{0}, bits);
    if (additive) {
      // 2*K*R <= maxPos: no overflow in any order, mulsum included.
      uint64_t r = maxPos / (2 * static_cast<uint64_t>(n));
      range_ = static_cast<int64_t>(std::max<uint64_t>(1, std::min<uint64_t>(r, uint64_t{1} << 62)));
      window_ = static_cast<int>(std::min<uint64_t>(n, std::max<uint64_t>(1, maxPos / (2 * static_cast<uint64_t>(range_)))));
    } else if (op == OpKind::kProd) {
      window_ = std::min(n, info_->isSigned ? bits - 2 : bits - 1);  // 2^K fits
    } else {
      window_ = n;  // max/min: full range
    }
  } else {
    const int p = precisionBits(*info_);
    const double exactLimit = std::ldexp(1.0, p);  // every integer up to 2^p is exact
    if (additive) {
      double r = std::floor(exactLimit / (2.0 * n));
      range_ = static_cast<int64_t>(std::max(1.0, std::min(r, std::ldexp(1.0, 20))));
      window_ = static_cast<int>(std::min<double>(n, std::max(1.0, std::floor(exactLimit / (2.0 * range_)))));
    } else if (op == OpKind::kProd) {
      const int bias = (1 << (info_->expBits - 1)) - 1;
      window_ = std::min({n, bias - 1, 60});  // 2^K and 2^-K stay normal
    } else {
      range_ = std::min<int64_t>((int64_t{1} << (p - 1)) - 1, 1023);
      window_ = n;
    }
    if (op == OpKind::kAvg && !isPowerOfTwo(n)) tolUlps_ = window_ + 2;
  }
}

uint64_t InputModel::hash(int rank, size_t index) const {
  uint64_t h = splitmix64(seed_ ^ (static_cast<uint64_t>(rank + 1) * 0xD1B54A32D192ED03ull));
  return splitmix64(h + index * 0x9E3779B97F4A7C15ull);
}

bool InputModel::inWindow(int rank, size_t index) const {
  if (window_ >= nranks_) return true;
  uint64_t start = splitmix64(seed_ + index * 0xA0761D6478BD642Full) % static_cast<uint64_t>(nranks_);
  uint64_t pos = (static_cast<uint64_t>(rank) + nranks_ - start) % static_cast<uint64_t>(nranks_);
  return pos < static_cast<uint64_t>(window_);
}

uint64_t InputModel::intValue(int rank, size_t index) const {
  const uint64_t h = hash(rank, index);
  const bool isSigned = info_->isSigned;
  switch (op_) {
    case OpKind::kSum:
    case OpKind::kAvg:
    case OpKind::kMulSum: {
      if (!inWindow(rank, index)) return 0;
      uint64_t r = static_cast<uint64_t>(range_);
      if (!isSigned) return h % (r + 1);
      return static_cast<uint64_t>(static_cast<int64_t>(h % (2 * r + 1)) - range_);
    }
    case OpKind::kProd: {
      if (!isSigned) return inWindow(rank, index) ? 1 + (h & 1) : 1;
      static const int64_t kWin[3] = {-1, 1, 2};
      int64_t v = inWindow(rank, index) ? kWin[h % 3] : ((h & 1) ? -1 : 1);
      return static_cast<uint64_t>(v);
    }
    case OpKind::kMax:
    case OpKind::kMin: {
      int bits = static_cast<int>(info_->size * 8);
      return isSigned ? static_cast<uint64_t>(signExtend(h, bits)) : lowBits(h, bits);
    }
  }
  return 0;
}

double InputModel::floatValue(int rank, size_t index) const {
  const uint64_t h = hash(rank, index);
  switch (op_) {
    case OpKind::kSum:
    case OpKind::kMulSum:
      if (!inWindow(rank, index)) return 0.0;
      return static_cast<double>(static_cast<int64_t>(h % (2 * static_cast<uint64_t>(range_) + 1)) - range_);
    case OpKind::kAvg:
      if (!inWindow(rank, index)) return 0.0;
      return static_cast<double>(h % (static_cast<uint64_t>(range_) + 1));
    case OpKind::kProd: {
      static const double kWin[3] = {0.5, 1.0, 2.0};
      double mag = inWindow(rank, index) ? kWin[h % 3] : 1.0;
      return ((h >> 8) & 1) ? -mag : mag;
    }
    case OpKind::kMax:
    case OpKind::kMin: {
      int64_t k = static_cast<int64_t>(h % (2 * static_cast<uint64_t>(range_) + 1)) - range_;
      int e = static_cast<int>((h >> 32) % 5) - 2;
      return std::ldexp(static_cast<double>(k), e);
    }
  }
  return 0.0;
}

uint64_t InputModel::reduceInt(size_t index) const {
  const bool isSigned = info_->isSigned;
  uint64_t acc = intValue(0, index);
  for (int r = 1; r < nranks_; ++r) {
    uint64_t v = intValue(r, index);
    switch (op_) {
      case OpKind::kSum:
      case OpKind::kAvg: acc += v; break;
      case OpKind::kMulSum: acc += v * static_cast<uint64_t>(1 + (r & 1)); break;
      case OpKind::kProd: acc *= v; break;
      case OpKind::kMax:
        if (isSigned ? static_cast<int64_t>(v) > static_cast<int64_t>(acc) : v > acc) acc = v;
        break;
      case OpKind::kMin:
        if (isSigned ? static_cast<int64_t>(v) < static_cast<int64_t>(acc) : v < acc) acc = v;
        break;
    }
  }
  if (op_ == OpKind::kAvg) {
    // Integer avg: the sum (exact, in range) divided by nranks, truncating like C.
    if (isSigned)
      acc = static_cast<uint64_t>(static_cast<int64_t>(acc) / nranks_);
    else
      acc /= static_cast<uint64_t>(nranks_);
  }
  return acc;
}

double InputModel::reduceFloat(size_t index) const {
  double acc = floatValue(0, index);
  for (int r = 1; r < nranks_; ++r) {
    double v = floatValue(r, index);
    switch (op_) {
      case OpKind::kSum:
      case OpKind::kAvg: acc += v; break;
      case OpKind::kMulSum: acc += v * (1 + (r & 1)); break;
      case OpKind::kProd: acc *= v; break;
      case OpKind::kMax: acc = std::max(acc, v); break;
      case OpKind::kMin: acc = std::min(acc, v); break;
    }
  }
  if (op_ == OpKind::kAvg) acc /= nranks_;
  return acc;
}

void InputModel::fillInput(int rank, size_t first, size_t n, void* dst) const {
  const size_t es = info_->size;
  if (info_->isFloat) {
    for (size_t i = 0; i < n; ++i) storeBits(dst, i, es, encodeFloat(type_, floatValue(rank, first + i)));
  } else {
    for (size_t i = 0; i < n; ++i) storeBits(dst, i, es, intValue(rank, first + i));
  }
}

void InputModel::fillReduced(size_t first, size_t n, void* dst) const {
  const size_t es = info_->size;
  if (info_->isFloat) {
    for (size_t i = 0; i < n; ++i) storeBits(dst, i, es, encodeFloat(type_, reduceFloat(first + i)));
  } else {
    for (size_t i = 0; i < n; ++i) storeBits(dst, i, es, reduceInt(first + i));
  }
}

void InputModel::fillScalar(int rank, void* dst) const {
  const int s = 1 + (rank & 1);
  uint64_t bits = info_->isFloat ? encodeFloat(type_, s) : static_cast<uint64_t>(s);
  storeBits(dst, 0, info_->size, bits);
}

size_t countMismatches(ncclDataType_t type, const void* got, const void* expected, size_t n, int tolUlps,
                       size_t* firstBad) {
  const TypeInfo& t = typeInfo(type);
  size_t bad = 0;
  size_t first = SIZE_MAX;
  if (!t.isFloat) {
    const char* g = static_cast<const char*>(got);
    const char* e = static_cast<const char*>(expected);
    for (size_t i = 0; i < n; ++i) {
      if (memcmp(g + i * t.size, e + i * t.size, t.size) != 0) {
        if (bad++ == 0) first = i;
      }
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      uint64_t d = ulpDistance(type, loadBits(got, i, t.size), loadBits(expected, i, t.size));
      if (d > static_cast<uint64_t>(tolUlps)) {
        if (bad++ == 0) first = i;
      }
    }
  }
  if (firstBad != nullptr) *firstBad = first;
  return bad;
}

void fillPoison(size_t eltSize, const void* expected, size_t n, void* dst) {
  const unsigned char* e = static_cast<const unsigned char*>(expected);
  unsigned char* d = static_cast<unsigned char*>(dst);
  for (size_t i = 0; i < n * eltSize; ++i) d[i] = static_cast<unsigned char>(~e[i]);
}

}  // namespace theseus::perf
