// The NCCL functions the collective definitions call, through a table.
//
// collectives/*_perf.cc describe each collective completely (counts, busbw,
// the call, the expected result) without linking NCCL themselves, so the
// OpenMPI comparison program (mpi/mpi_coll_perf.cc) shares their formulas
// without depending on libnccl. The *_perf binaries install NCCL's real
// functions at start-up (perf_nccl_error.cc); until then every entry returns
// ncclInternalError.
#pragma once

#include "nccl.h"

namespace theseus::perf {

struct NcclCalls {
  ncclResult_t (*allReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*allGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*reduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                cudaStream_t);
  ncclResult_t (*alltoAll)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*gather)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*scatter)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*groupStart)();
  ncclResult_t (*groupEnd)();
};

const NcclCalls& nccl();
void installNcclCalls(const NcclCalls& calls);
// NCCL's own functions (defined in the driver library, which links libnccl).
void installRealNcclCalls();

}  // namespace theseus::perf
