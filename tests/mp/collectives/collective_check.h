// One checked collective call: buffers laid out as NCCL defines them (in-place
// or not), inputs from reference.h, the call, and an element-by-element check
// of the output (plus guard bytes around it) against the reference.
#pragma once

#include <string>

#include "nccl.h"

namespace theseus::test {

enum class Coll { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAlltoAll, kGather, kScatter };
const char* collLabel(Coll c);
bool collReduces(Coll c);
bool collRooted(Coll c);

struct CheckCase {
  Coll coll = Coll::kAllReduce;
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t op = ncclSum;   // ncclNumOps => PreMulSum (scalar 1 on even ranks, 2 on odd)
  size_t count = 0;           // NCCL's count argument
  bool inPlace = false;
  int root = 0;
  bool memAlloc = false;      // buffers from ncclMemAlloc (zero-copy path) instead of malloc
  // PreMulSum: the scalar by value (read at creation) or by pointer (ncclScalarDevice: read when the
  // collective runs; a host pointer in host builds, which NCCL allows where the GPU can read it).
  ncclScalarResidence_t residence = ncclScalarHostImmediate;
  int salt = 0;
};

// Runs the case on `comm`; on failure returns false and describes the first bad element in *why.
bool runCheck(ncclComm_t comm, int rank, int nranks, const CheckCase& c, std::string* why);

std::string describe(const CheckCase& c);

}  // namespace theseus::test
