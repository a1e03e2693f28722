// Helpers shared by the demo tools (they use the public NCCL API only).
#pragma once

#include <cstdio>
#include <cstdlib>

#include "nccl.h"

namespace theseus::tools {

// A rank-like integer from the first of two variables that is set (e.g.
// THESEUS_RANK, then RANK); -1 when neither is set or the value is not a
// plain non-negative number below 2^20.
inline int envInt(const char* a, const char* b) {
  const char* v = getenv(a);
  if (v == nullptr) v = getenv(b);
  if (v == nullptr) return -1;
  char* end = nullptr;
  long n = strtol(v, &end, 10);
  return (*v != '\0' && *end == '\0' && n >= 0 && n < (1 << 20)) ? static_cast<int>(n) : -1;
}

// True on ncclSuccess; otherwise prints what failed, with NCCL's error text.
inline bool ncclOk(ncclResult_t r, const char* what, int rank) {
  if (r == ncclSuccess) return true;
  fprintf(stderr, "[rank %d] %s failed: %s (%s)\n", rank, what, ncclGetErrorString(r), ncclGetLastError(nullptr));
  return false;
}

}  // namespace theseus::tools
