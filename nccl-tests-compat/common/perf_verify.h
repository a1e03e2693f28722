// Deterministic inputs and exact expected results for `-c` data checking.
//
// Every element of every rank's input is a pure function of
// (seed, rank, element index) and of the (type, op, nranks) being tested, so
// each rank can compute the exact expected content of its own output without
// talking to anybody and without trusting the library: the reference values
// come from this file alone.
//
// Inputs are chosen so that the result does not depend on the order in which
// the library combines contributions:
//  * sum / mulsum / avg: small integers. At most K ranks (a window of K
//    consecutive ranks starting at a per-element pseudo-random rank) hold a
//    non-zero value in [-R, R] (avg: [0, R]); R and K are chosen so that
//    2*K*R fits the type exactly (2: the mulsum scalar), i.e. every partial
//    sum in any order is an exactly representable integer. Integers never
//    overflow, so signed arithmetic is well defined.
//  * prod: a window of K ranks holds +-1/2, +-1, +-2 (integers: -1, 1, 2;
//    unsigned: 1, 2), the others +-1, with K small enough that 2^K and 2^-K
//    are normal numbers of the type (integers: that 2^K fits).
//  * max / min: integers use the full bit range; floats use k * 2^e with
//    |k| < 2^precision and e in [-2, 2] (exact, no NaN, no -0).
//  * mulsum multiplies rank r's input by 1 (even r) or 2 (odd r): exact.
// What remains inexact is floating avg with a number of ranks that is not a
// power of two (1/n is not representable): NCCL pre-multiplies every input by
// 1/n and sums, so each of the K products and K-1 additions may round once,
// and the scalar itself may be rounded to the type. With non-negative inputs
// the result is within (K+1) ulp of the exact quotient; comparing with the
// correctly rounded quotient adds 1/2 ulp, so avg is accepted within K+2 ulp
// (toleranceUlps). Everything else must match bit for bit (integers) or to
// 0 ulp (floats; +0 equals -0).
#pragma once

#include <cstddef>
#include <cstdint>

#include "nccl.h"
#include "perf_types.h"

namespace theseus::perf {

class InputModel {
 public:
  InputModel(ncclDataType_t type, OpKind op, int nranks, uint64_t seed);

  ncclDataType_t type() const { return type_; }
  OpKind op() const { return op_; }
  int nranks() const { return nranks_; }
  size_t eltSize() const { return info_->size; }

  // Elements [first, first+n) of `rank`'s input, stored with the type's layout.
  void fillInput(int rank, size_t first, size_t n, void* dst) const;
  // Element-wise reduction over all ranks of input elements [first, first+n).
  void fillReduced(size_t first, size_t n, void* dst) const;
  // The PreMulSum scalar of `rank` (1 for even ranks, 2 for odd), in the type.
  void fillScalar(int rank, void* dst) const;
  // Accepted distance in ulp for reduction results (0 except floating avg).
  int toleranceUlps() const { return tolUlps_; }

  // The value generator's parameters (exposed for tests).
  int64_t range() const { return range_; }
  int window() const { return window_; }

 private:
  // Raw generated value of (rank, index): int64/uint64 bits for integers,
  // the double value for floats (already representable in the type).
  uint64_t intValue(int rank, size_t index) const;
  double floatValue(int rank, size_t index) const;
  bool inWindow(int rank, size_t index) const;
  uint64_t hash(int rank, size_t index) const;
  uint64_t reduceInt(size_t index) const;
  double reduceFloat(size_t index) const;

  ncclDataType_t type_;
  const TypeInfo* info_;
  OpKind op_;
  int nranks_;
  uint64_t seed_;
  int64_t range_ = 0;   // R
  int window_ = 0;      // K
  int tolUlps_ = 0;
};

// Number of elements of `got` that differ from `expected` (n elements of
// `type`), allowing `tolUlps` for floating types. `firstBad`, if not null,
// receives the index of the first mismatch (or SIZE_MAX).
size_t countMismatches(ncclDataType_t type, const void* got, const void* expected, size_t n, int tolUlps,
                       size_t* firstBad = nullptr);

// Fills n elements of `dst` with a value different from every element of
// `expected` (bitwise complement), so a result the library never wrote is
// always detected.
void fillPoison(size_t eltSize, const void* expected, size_t n, void* dst);

}  // namespace theseus::perf
