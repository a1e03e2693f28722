// ncclCallError lives apart from perf_status.cc so the NCCL-free part of the
// harness (options, types, verification, report) links without libnccl
// (mpi_coll_perf uses it).
#include "perf_status.h"

namespace theseus::perf {

Status ncclCallError(ncclResult_t result, const char* call) {
  const char* last = ncclGetLastError(nullptr);
  std::string msg = strprintf("%s failed: %s (%d)", call, ncclGetErrorString(result), static_cast<int>(result));
  if (last != nullptr && last[0] != '\0') msg += std::string(": ") + last;
  return Status(kExitError, std::move(msg));
}

}  // namespace theseus::perf

#include "perf_nccl_calls.h"

namespace theseus::perf {

void installRealNcclCalls() {
  installNcclCalls({ncclAllReduce, ncclAllGather, ncclBroadcast, ncclReduce, ncclReduceScatter, ncclAlltoAll,
                    ncclGather, ncclScatter, ncclSend, ncclRecv, ncclGroupStart, ncclGroupEnd});
}

}  // namespace theseus::perf
