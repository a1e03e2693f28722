// Independent reference math for the collectives tests: deterministic inputs
// chosen so that every reduction order gives the same exact result, and the
// expected outputs computed here (never with the library's own kernels).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "nccl.h"

namespace theseus::test {

size_t typeBytes(ncclDataType_t t);
const char* typeLabel(ncclDataType_t t);
const char* opLabel(ncclRedOp_t op);  // builtin ops; custom (PreMulSum) -> "mulsum"
bool isFloating(ncclDataType_t t);

// Conversions written independently of the library (round to nearest even).
uint16_t toHalf(double v);
double fromHalf(uint16_t h);
uint16_t toBf16(double v);
double fromBf16(uint16_t b);
uint8_t toE4M3(double v);
double fromE4M3(uint8_t v);
uint8_t toE5M2(double v);
double fromE5M2(uint8_t v);

// Element i of rank r's input for an operation with `op` (inputs differ per op
// so products stay small and exact). Integer-valued, small magnitude.
double inputValue(ncclDataType_t t, ncclRedOp_t op, int rank, size_t i, int salt);

// Writes value v as element i of an array of type t.
void storeValue(ncclDataType_t t, void* base, size_t i, double v);
// Reads element i as double (integers exactly, wrapped to the type's range).
double loadValue(ncclDataType_t t, const void* base, size_t i);

// Combines contributions like the collective would (in the type's integer
// domain for integers: wrap-around for sum/prod).
struct RefOp {
  ncclRedOp_t op;        // ncclSum..ncclAvg, or ncclNumOps for PreMulSum
  int nranks;
};
double reduceRef(ncclDataType_t t, const RefOp& op, const std::vector<double>& values,
                 const std::vector<double>& scalars);

// Acceptable |got - want| for the datatype/op (0 for exact cases).
double tolerance(ncclDataType_t t, ncclRedOp_t op, double want, int nranks);

}  // namespace theseus::test
