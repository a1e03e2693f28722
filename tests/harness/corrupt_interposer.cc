// TEST ONLY (LD_PRELOAD'ed by harness tests, never by the product): wraps
// ncclAllReduce and flips the lowest bit of one element of one rank's result,
// to prove that `-c` catches a wrong answer, prints FAILED and exits non-zero.
//
//   CORRUPT_COUNT=n   only calls with exactly n elements of ncclFloat32 (so the
//                     harness' own bookkeeping all-reduces stay intact)
//   CORRUPT_RANK=r    the rank to corrupt (THESEUS_RANK of the process; 0)
// In a single process (no THESEUS_RANK) every matching call is corrupted.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>

#include "nccl.h"

extern "C" ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type,
                                      ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  using Fn = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "ncclAllReduce"));
  if (real == nullptr) return ncclInternalError;
  ncclResult_t r = real(sendbuff, recvbuff, count, type, op, comm, stream);
  const char* want = getenv("CORRUPT_COUNT");
  const char* myRank = getenv("THESEUS_RANK");
  const char* victim = getenv("CORRUPT_RANK");
  bool rankMatches = myRank == nullptr || myRank[0] == '\0' || strcmp(myRank, victim ? victim : "0") == 0;
  if (r == ncclSuccess && type == ncclFloat32 && want != nullptr && count == strtoull(want, nullptr, 10) &&
      count > 0 && rankMatches) {
    static_cast<unsigned char*>(recvbuff)[(count / 2) * 4] ^= 1;  // host memory (the tests' mode)
  }
  return r;
}
