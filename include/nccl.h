/*
 * Theseus: the public NCCL API.
 *
 * This header is written for Theseus. It declares the API of NCCL 2.30.7, the
 * newest release Theseus tracks: everything of 2.28.9 with the same types,
 * enum values, macros and struct layouts (checked by tests/abi against
 * NVIDIA's 2.28.9 header), plus what 2.29 and 2.30 added (checked against the
 * layouts NVIDIA's 2.30.7 header compiles to). Programs compiled against any
 * NVIDIA nccl.h from 2.28.9 to 2.30.7 run against Theseus' libnccl.so.2, and
 * programs compiled against this header run against NVIDIA's 2.30.7.
 *
 * Unlike NVIDIA's header it does not require the CUDA headers: cudaStream_t
 * is declared here as the same opaque pointer type CUDA uses, so both orders
 * of inclusion work in C++ and C11.
 *
 * Host-memory semantics (Theseus extension of the contract): when every buffer
 * of a call is host memory, the operation has completed when the call (or the
 * outermost ncclGroupEnd) returns; the stream argument is ignored.
 */
#ifndef NCCL_H_
#define NCCL_H_

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#define NCCL_MAJOR 2
#define NCCL_MINOR 30
#define NCCL_PATCH 7
#define NCCL_SUFFIX ""

#define NCCL_VERSION_CODE 23007
/* Version codes switched from X*1000 to X*10000 after 2.8. */
#define NCCL_VERSION(X, Y, Z) \
  (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))

#ifdef __cplusplus
extern "C" {
#endif

/* Same spelling as the CUDA runtime, so including cuda_runtime.h as well is harmless. */
typedef struct CUstream_st* cudaStream_t;

/* Opaque communicator and window handles. */
typedef struct ncclComm* ncclComm_t;
typedef struct ncclWindow_vidmem* ncclWindow_t;
#define NCCL_COMM_NULL NULL

/* The rendezvous token one rank creates and all ranks pass to init. */
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

/* Result codes. */
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclTimeout = 8, /* a wait ran past its timeout (2.30) */
  ncclNumResults = 9
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_UNDEF_FLOAT -1.0f

/* The magic of versioned structs (ncclConfig_t and the device API's). */
#define NCCL_API_MAGIC 0xcafebeef

/* ncclCommWindowRegister flags. */
#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#define NCCL_WIN_STRICT_ORDERING 0x02
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096

/* ncclConfig_t.CTAPolicy values. */
#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02

/* ncclCommShrink flags. */
#define NCCL_SHRINK_DEFAULT 0x00 /* shrink; the parent stays usable */
#define NCCL_SHRINK_ABORT 0x01   /* abort the parent's pending work first */

/* ncclCommRevoke flags (reserved; must be 0). */
#define NCCL_REVOKE_DEFAULT 0x00

/*
 * Communicator options. Callers built against older headers pass a smaller
 * struct (80 bytes for 2.28, 88 for 2.29); the library reads `size` and
 * `version` first and never touches bytes past `size`, nor fields newer than
 * `version`. Always start from NCCL_CONFIG_INITIALIZER.
 */
typedef struct ncclConfig_v23000 {
  size_t size;          /* sizeof the caller's struct */
  unsigned int magic;   /* 0xcafebeef */
  unsigned int version; /* NCCL_VERSION of the caller's header */
  int blocking;         /* 0: init/split/finalize may return ncclInProgress */
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
  int graphUsageMode;      /* 2.29: 0 no graphs, 1 one graph, 2 several graphs or graphs and eager calls */
  int numRmaCtx;           /* 2.29: one-sided contexts (0: none) */
  int maxP2pPeers;         /* 2.30: peers a rank talks to point-to-point at most */
  int graphStreamOrdering; /* 2.30.5: 0/1 */
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER                                                                         \
  {                                                                                                     \
    sizeof(ncclConfig_t), NCCL_API_MAGIC, NCCL_VERSION_CODE, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,     \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,     \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,     \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT      \
  }

/* Filled by ncclGroupSimulateEnd: the estimated time of the group, in microseconds. */
typedef struct ncclSimInfo_v22200 {
  size_t size;
  unsigned int magic;   /* 0x74685283 */
  unsigned int version;
  float estimatedTime;
} ncclSimInfo_t;

#define NCCL_SIM_INFO_INITIALIZER \
  { sizeof(ncclSimInfo_t), 0x74685283, NCCL_VERSION_CODE, NCCL_UNDEF_FLOAT }

/* Every entry point exists twice: ncclX and the profiling alias pncclX. */
#define NCCL_DECLARE_(ret, name, ...) \
  ret name(__VA_ARGS__);              \
  ret p##name(__VA_ARGS__)

/* Memory that Theseus can share with peers without staging copies. */
NCCL_DECLARE_(ncclResult_t, ncclMemAlloc, void** ptr, size_t size);
NCCL_DECLARE_(ncclResult_t, ncclMemFree, void* ptr);

/* Version, unique id and communicator lifecycle. */
NCCL_DECLARE_(ncclResult_t, ncclGetVersion, int* version);
NCCL_DECLARE_(ncclResult_t, ncclGetUniqueId, ncclUniqueId* uniqueId);
NCCL_DECLARE_(ncclResult_t, ncclCommInitRankConfig, ncclComm_t* comm, int nranks, ncclUniqueId commId,
              int rank, ncclConfig_t* config);
NCCL_DECLARE_(ncclResult_t, ncclCommInitRank, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
NCCL_DECLARE_(ncclResult_t, ncclCommInitAll, ncclComm_t* comm, int ndev, const int* devlist);
NCCL_DECLARE_(ncclResult_t, ncclCommFinalize, ncclComm_t comm);
NCCL_DECLARE_(ncclResult_t, ncclCommDestroy, ncclComm_t comm);
NCCL_DECLARE_(ncclResult_t, ncclCommAbort, ncclComm_t comm);
NCCL_DECLARE_(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags);
NCCL_DECLARE_(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
              ncclConfig_t* config);
NCCL_DECLARE_(ncclResult_t, ncclCommShrink, ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
              ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags);
NCCL_DECLARE_(ncclResult_t, ncclCommInitRankScalable, ncclComm_t* newcomm, int nranks, int myrank, int nId,
              ncclUniqueId* commIds, ncclConfig_t* config);

/* Growing a communicator (2.29). One existing rank obtains an id with
 * ncclCommGetUniqueId (one unconsumed id per communicator at a time, each used
 * once) and hands it to the new ranks; then every rank calls ncclCommGrow:
 * existing ranks with `comm`, rank -1 and the id on the rank that obtained it
 * (NULL on the others); new ranks with comm NULL, the id and their rank. The
 * new communicator has nRanks ranks: the existing ones keep their ranks. */
NCCL_DECLARE_(ncclResult_t, ncclCommGetUniqueId, ncclComm_t comm, ncclUniqueId* uniqueId);
NCCL_DECLARE_(ncclResult_t, ncclCommGrow, ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank,
              ncclComm_t* newcomm, ncclConfig_t* config);

/* Suspending a communicator (2.29.7): its releasable memory is freed until
 * ncclCommResume; it cannot be used meanwhile. */
#define NCCL_SUSPEND_MEM 0x01
NCCL_DECLARE_(ncclResult_t, ncclCommSuspend, ncclComm_t comm, int flags);
NCCL_DECLARE_(ncclResult_t, ncclCommResume, ncclComm_t comm);
typedef enum {
  ncclStatGpuMemSuspend = 0,   /* bytes ncclCommSuspend would release */
  ncclStatGpuMemSuspended = 1, /* 1 while suspended, else 0 */
  ncclStatGpuMemPersist = 2,   /* bytes that stay allocated while suspended */
  ncclStatGpuMemTotal = 3      /* all bytes the communicator allocated */
} ncclCommMemStat_t;
NCCL_DECLARE_(ncclResult_t, ncclCommMemStats, ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value);

/* Errors. ncclGetLastError ignores its argument and may be passed NULL. */
NCCL_DECLARE_(const char*, ncclGetErrorString, ncclResult_t result);
NCCL_DECLARE_(const char*, ncclGetLastError, ncclComm_t comm);
__attribute__((deprecated("ncclResetDebugInit is not part of the supported NCCL API"))) void ncclResetDebugInit(void);
__attribute__((deprecated("pncclResetDebugInit is not part of the supported NCCL API"))) void pncclResetDebugInit(void);
NCCL_DECLARE_(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t* asyncError);

/* Communicator queries. */
NCCL_DECLARE_(ncclResult_t, ncclCommCount, const ncclComm_t comm, int* count);
NCCL_DECLARE_(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int* device);
NCCL_DECLARE_(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int* rank);

/* Buffer registration. */
NCCL_DECLARE_(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void* buff, size_t size, void** handle);
NCCL_DECLARE_(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void* handle);
NCCL_DECLARE_(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
              int winFlags);
NCCL_DECLARE_(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win);
/* The buffer a window was registered with (2.29). */
NCCL_DECLARE_(ncclResult_t, ncclWinGetUserPtr, ncclComm_t comm, ncclWindow_t win, void** outUserPtr);

/* Reduction operations. ncclMaxRedOp is INT_MAX: it forces a 4-byte enum. */
typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5, /* custom (PreMulSum) ops are numbered from here */
  ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

/* Element types. */
typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

/* Where a PreMulSum scalar lives. */
typedef enum {
  ncclScalarDevice = 0,       /* read through the pointer while the collective runs */
  ncclScalarHostImmediate = 1 /* copied when the op is created */
} ncclScalarResidence_t;

/* sum(x_i * scalar): the op is valid for `comm` until ncclRedOpDestroy. */
NCCL_DECLARE_(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
              ncclScalarResidence_t residence, ncclComm_t comm);
NCCL_DECLARE_(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm);

/* Collectives. Counts are in elements. */
NCCL_DECLARE_(ncclResult_t, ncclReduce, const void* sendbuff, void* recvbuff, size_t count,
              ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);
NCCL_DECLARE_(ncclResult_t, ncclBcast, void* buff, size_t count, ncclDataType_t datatype, int root,
              ncclComm_t comm, cudaStream_t stream);
NCCL_DECLARE_(ncclResult_t, ncclBroadcast, const void* sendbuff, void* recvbuff, size_t count,
              ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
NCCL_DECLARE_(ncclResult_t, ncclAllReduce, const void* sendbuff, void* recvbuff, size_t count,
              ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
/* In place when recvbuff == sendbuff + rank * recvcount. */
NCCL_DECLARE_(ncclResult_t, ncclReduceScatter, const void* sendbuff, void* recvbuff, size_t recvcount,
              ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
/* In place when sendbuff == recvbuff + rank * sendcount. */
NCCL_DECLARE_(ncclResult_t, ncclAllGather, const void* sendbuff, void* recvbuff, size_t sendcount,
              ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
/* `count` elements go to each peer. */
NCCL_DECLARE_(ncclResult_t, ncclAlltoAll, const void* sendbuff, void* recvbuff, size_t count,
              ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
NCCL_DECLARE_(ncclResult_t, ncclGather, const void* sendbuff, void* recvbuff, size_t count,
              ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
NCCL_DECLARE_(ncclResult_t, ncclScatter, const void* sendbuff, void* recvbuff, size_t count,
              ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);

/* Point-to-point; group several to run them concurrently. */
NCCL_DECLARE_(ncclResult_t, ncclSend, const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
              ncclComm_t comm, cudaStream_t stream);
NCCL_DECLARE_(ncclResult_t, ncclRecv, void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
              ncclComm_t comm, cudaStream_t stream);

/* Groups (thread-local, nestable): work is issued at the outermost ncclGroupEnd. */
NCCL_DECLARE_(ncclResult_t, ncclGroupStart, void);
NCCL_DECLARE_(ncclResult_t, ncclGroupEnd, void);
NCCL_DECLARE_(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t* simInfo);

/* One-sided operations on windows (2.29): put with a signal, signal, wait for
 * signals. They need the device-initiated networking of NVIDIA's library;
 * Theseus returns ncclInvalidUsage with an explanation. */
typedef struct {
  int opCnt;
  int peer;
  int sigIdx;
  int ctx;
} ncclWaitSignalDesc_t;
NCCL_DECLARE_(ncclResult_t, ncclPutSignal, const void* localbuff, size_t count, ncclDataType_t datatype, int peer,
              ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
              cudaStream_t stream);
NCCL_DECLARE_(ncclResult_t, ncclSignal, int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
              cudaStream_t stream);
NCCL_DECLARE_(ncclResult_t, ncclWaitSignal, int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm,
              cudaStream_t stream);

/* Parameters (2.30): the library's configuration by key ("NCCL_" left off:
 * "SOCKET_NTHREADS"; Theseus' own knobs by their full name), with the values
 * in effect. Handles stay valid for the life of the process. */
typedef struct ncclParamHandle* ncclParamHandle_t;
NCCL_DECLARE_(ncclResult_t, ncclParamBind, ncclParamHandle_t* out, const char* key);
NCCL_DECLARE_(ncclResult_t, ncclParamGetI8, ncclParamHandle_t handle, int8_t* out);
NCCL_DECLARE_(ncclResult_t, ncclParamGetI16, ncclParamHandle_t handle, int16_t* out);
NCCL_DECLARE_(ncclResult_t, ncclParamGetI32, ncclParamHandle_t handle, int32_t* out);
NCCL_DECLARE_(ncclResult_t, ncclParamGetI64, ncclParamHandle_t handle, int64_t* out);
NCCL_DECLARE_(ncclResult_t, ncclParamGetU8, ncclParamHandle_t handle, uint8_t* out);
NCCL_DECLARE_(ncclResult_t, ncclParamGetU16, ncclParamHandle_t handle, uint16_t* out);
NCCL_DECLARE_(ncclResult_t, ncclParamGetU32, ncclParamHandle_t handle, uint32_t* out);
NCCL_DECLARE_(ncclResult_t, ncclParamGetU64, ncclParamHandle_t handle, uint64_t* out);
NCCL_DECLARE_(ncclResult_t, ncclParamGetStr, ncclParamHandle_t handle, const char** out);
NCCL_DECLARE_(ncclResult_t, ncclParamGet, ncclParamHandle_t handle, void* out, int maxLen, int* len);
NCCL_DECLARE_(ncclResult_t, ncclParamGetParameter, const char* key, const char** value, int* valueLen);
NCCL_DECLARE_(ncclResult_t, ncclParamGetAllParameterKeys, const char*** table, int* tableLen);
NCCL_DECLARE_(void, ncclParamDumpAll, void);

#undef NCCL_DECLARE_

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NCCL_H_ */
