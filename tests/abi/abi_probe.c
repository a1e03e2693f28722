/*
 * ABI layout probe: prints every size, alignment, field offset, enum value
 * and macro value of nccl.h that a compiled program depends on, one fact per
 * line. It is compiled against our include/nccl.h and against NVIDIA's
 * reference nccl.h (which pulls in cuda_runtime.h), in C and in C++. The C++
 * build also prints the type of every API function (its mangled type name),
 * which proves the prototypes are the same down to const and pointer levels.
 *
 * The reference is NVIDIA's 2.28.9 header; ours declares 2.30.7. What 2.29 and
 * 2.30 added is printed under NCCL_VERSION_CODE guards, and what they changed
 * prints different values: compare_probes.cmake requires every line of the
 * reference to be printed unchanged by ours, except the facts listed in
 * nccl-2.30.7-layout.txt, which ours must print exactly as listed there (the
 * sizes and offsets NVIDIA's 2.30.7 header compiles to).
 */
#include <stddef.h>
#include <stdio.h>

#include <nccl.h>

#ifdef __cplusplus
#include <typeinfo>
#endif

#define SIZE(T) printf("sizeof(%s)=%zu alignof=%zu\n", #T, sizeof(T), (size_t)__alignof__(T))
#define FIELD(T, f) \
  printf("%s.%s offset=%zu size=%zu\n", #T, #f, (size_t)offsetof(T, f), sizeof(((T*)0)->f))
#define ENUMV(e) printf("enum %s=%lld\n", #e, (long long)(e))
/* Integer macros: value, size and signedness of the expression's type. */
#define MACRO_INT(m) \
  printf("macro %s=%lld size=%zu signed=%d\n", #m, (long long)(m), sizeof(m), (int)((__typeof__(m))-1 < 0))
#define MACRO_FLOAT(m) printf("macro %s=%a size=%zu\n", #m, (double)(m), sizeof(m))
#define MACRO_NULL(m) printf("macro %s null=%d size=%zu\n", #m, (m) == 0, sizeof(m))

static void structs(void) {
  SIZE(ncclUniqueId);
  FIELD(ncclUniqueId, internal);
  SIZE(ncclComm_t);
  SIZE(ncclWindow_t);
  SIZE(cudaStream_t);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 30, 7)
  SIZE(struct ncclConfig_v23000);
#else
  SIZE(struct ncclConfig_v22800);
#endif
  SIZE(ncclConfig_t);
  FIELD(ncclConfig_t, size);
  FIELD(ncclConfig_t, magic);
  FIELD(ncclConfig_t, version);
  FIELD(ncclConfig_t, blocking);
  FIELD(ncclConfig_t, cgaClusterSize);
  FIELD(ncclConfig_t, minCTAs);
  FIELD(ncclConfig_t, maxCTAs);
  FIELD(ncclConfig_t, netName);
  FIELD(ncclConfig_t, splitShare);
  FIELD(ncclConfig_t, trafficClass);
  FIELD(ncclConfig_t, commName);
  FIELD(ncclConfig_t, collnetEnable);
  FIELD(ncclConfig_t, CTAPolicy);
  FIELD(ncclConfig_t, shrinkShare);
  FIELD(ncclConfig_t, nvlsCTAs);
  FIELD(ncclConfig_t, nChannelsPerNetPeer);
  FIELD(ncclConfig_t, nvlinkCentricSched);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 29, 0)
  FIELD(ncclConfig_t, graphUsageMode);
  FIELD(ncclConfig_t, numRmaCtx);
  SIZE(ncclWaitSignalDesc_t);
  FIELD(ncclWaitSignalDesc_t, opCnt);
  FIELD(ncclWaitSignalDesc_t, peer);
  FIELD(ncclWaitSignalDesc_t, sigIdx);
  FIELD(ncclWaitSignalDesc_t, ctx);
#endif
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 30, 0)
  FIELD(ncclConfig_t, maxP2pPeers);
  SIZE(ncclParamHandle_t);
#endif
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 30, 7)
  FIELD(ncclConfig_t, graphStreamOrdering);
#endif
  SIZE(struct ncclSimInfo_v22200);
  SIZE(ncclSimInfo_t);
  FIELD(ncclSimInfo_t, size);
  FIELD(ncclSimInfo_t, magic);
  FIELD(ncclSimInfo_t, version);
  FIELD(ncclSimInfo_t, estimatedTime);
}

static void enums(void) {
  SIZE(ncclResult_t);
  ENUMV(ncclSuccess);
  ENUMV(ncclUnhandledCudaError);
  ENUMV(ncclSystemError);
  ENUMV(ncclInternalError);
  ENUMV(ncclInvalidArgument);
  ENUMV(ncclInvalidUsage);
  ENUMV(ncclRemoteError);
  ENUMV(ncclInProgress);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 30, 0)
  ENUMV(ncclTimeout);
#endif
  ENUMV(ncclNumResults);
  SIZE(ncclRedOp_dummy_t);
  ENUMV(ncclNumOps_dummy);
  SIZE(ncclRedOp_t);
  ENUMV(ncclSum);
  ENUMV(ncclProd);
  ENUMV(ncclMax);
  ENUMV(ncclMin);
  ENUMV(ncclAvg);
  ENUMV(ncclNumOps);
  ENUMV(ncclMaxRedOp);
  SIZE(ncclDataType_t);
  ENUMV(ncclInt8);
  ENUMV(ncclChar);
  ENUMV(ncclUint8);
  ENUMV(ncclInt32);
  ENUMV(ncclInt);
  ENUMV(ncclUint32);
  ENUMV(ncclInt64);
  ENUMV(ncclUint64);
  ENUMV(ncclFloat16);
  ENUMV(ncclHalf);
  ENUMV(ncclFloat32);
  ENUMV(ncclFloat);
  ENUMV(ncclFloat64);
  ENUMV(ncclDouble);
  ENUMV(ncclBfloat16);
  ENUMV(ncclFloat8e4m3);
  ENUMV(ncclFloat8e5m2);
  ENUMV(ncclNumTypes);
  SIZE(ncclScalarResidence_t);
  ENUMV(ncclScalarDevice);
  ENUMV(ncclScalarHostImmediate);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 29, 7)
  SIZE(ncclCommMemStat_t);
  ENUMV(ncclStatGpuMemSuspend);
  ENUMV(ncclStatGpuMemSuspended);
  ENUMV(ncclStatGpuMemPersist);
  ENUMV(ncclStatGpuMemTotal);
#endif
}

static void macros(void) {
  MACRO_INT(NCCL_MAJOR);
  MACRO_INT(NCCL_MINOR);
  MACRO_INT(NCCL_PATCH);
  printf("macro NCCL_SUFFIX=\"%s\" size=%zu\n", NCCL_SUFFIX, sizeof(NCCL_SUFFIX));
  MACRO_INT(NCCL_VERSION_CODE);
  MACRO_INT(NCCL_VERSION(2, 28, 9));
  MACRO_INT(NCCL_VERSION(2, 8, 4));
  MACRO_INT(NCCL_VERSION(2, 9, 0));
  MACRO_INT(NCCL_VERSION(3, 0, 1));
  MACRO_INT(NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH));
  MACRO_NULL(NCCL_COMM_NULL);
  MACRO_INT(NCCL_UNIQUE_ID_BYTES);
  MACRO_INT(NCCL_CONFIG_UNDEF_INT);
  MACRO_NULL(NCCL_CONFIG_UNDEF_PTR);
  MACRO_INT(NCCL_SPLIT_NOCOLOR);
  MACRO_FLOAT(NCCL_UNDEF_FLOAT);
  MACRO_INT(NCCL_WIN_DEFAULT);
  MACRO_INT(NCCL_WIN_COLL_SYMMETRIC);
  MACRO_INT(NCCL_WIN_REQUIRED_ALIGNMENT);
  MACRO_INT(NCCL_CTA_POLICY_DEFAULT);
  MACRO_INT(NCCL_CTA_POLICY_EFFICIENCY);
  MACRO_INT(NCCL_CTA_POLICY_ZERO);
  MACRO_INT(NCCL_SHRINK_DEFAULT);
  MACRO_INT(NCCL_SHRINK_ABORT);
  MACRO_INT(NCCL_REVOKE_DEFAULT);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 29, 0)
  MACRO_INT(NCCL_API_MAGIC);
#endif
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 29, 7)
  MACRO_INT(NCCL_WIN_STRICT_ORDERING);
  MACRO_INT(NCCL_SUSPEND_MEM);
#endif
}

static void initializers(void) {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  ncclSimInfo_t s = NCCL_SIM_INFO_INITIALIZER;
  printf("config.size=%zu magic=0x%x version=%u\n", c.size, c.magic, c.version);
  printf("config.blocking=%d cgaClusterSize=%d minCTAs=%d maxCTAs=%d\n", c.blocking, c.cgaClusterSize, c.minCTAs,
         c.maxCTAs);
  printf("config.netName null=%d commName null=%d\n", c.netName == NULL, c.commName == NULL);
  printf("config.splitShare=%d trafficClass=%d collnetEnable=%d CTAPolicy=%d shrinkShare=%d\n", c.splitShare,
         c.trafficClass, c.collnetEnable, c.CTAPolicy, c.shrinkShare);
  printf("config.nvlsCTAs=%d nChannelsPerNetPeer=%d nvlinkCentricSched=%d\n", c.nvlsCTAs, c.nChannelsPerNetPeer,
         c.nvlinkCentricSched);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 29, 0)
  printf("config.graphUsageMode=%d numRmaCtx=%d\n", c.graphUsageMode, c.numRmaCtx);
#endif
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 30, 0)
  printf("config.maxP2pPeers=%d\n", c.maxP2pPeers);
#endif
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 30, 7)
  printf("config.graphStreamOrdering=%d\n", c.graphStreamOrdering);
#endif
  printf("siminfo.size=%zu magic=0x%x version=%u estimatedTime=%a\n", s.size, s.magic, s.version,
         (double)s.estimatedTime);
}

#ifdef __cplusplus
/* ncclResetDebugInit is deprecated in both headers; its type is still ABI. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#define FN(f) printf("type %s=%s\ntype p%s=%s\n", #f, typeid(&f).name(), #f, typeid(&p##f).name())
static void functions(void) {
  printf("type ncclConfig_t=%s ncclSimInfo_t=%s ncclUniqueId=%s\n", typeid(ncclConfig_t).name(),
         typeid(ncclSimInfo_t).name(), typeid(ncclUniqueId).name());
  FN(ncclMemAlloc);
  FN(ncclMemFree);
  FN(ncclGetVersion);
  FN(ncclGetUniqueId);
  FN(ncclCommInitRankConfig);
  FN(ncclCommInitRank);
  FN(ncclCommInitAll);
  FN(ncclCommFinalize);
  FN(ncclCommDestroy);
  FN(ncclCommAbort);
  FN(ncclCommRevoke);
  FN(ncclCommSplit);
  FN(ncclCommShrink);
  FN(ncclCommInitRankScalable);
  FN(ncclGetErrorString);
  FN(ncclGetLastError);
  FN(ncclResetDebugInit);
  FN(ncclCommGetAsyncError);
  FN(ncclCommCount);
  FN(ncclCommCuDevice);
  FN(ncclCommUserRank);
  FN(ncclCommRegister);
  FN(ncclCommDeregister);
  FN(ncclCommWindowRegister);
  FN(ncclCommWindowDeregister);
  FN(ncclRedOpCreatePreMulSum);
  FN(ncclRedOpDestroy);
  FN(ncclReduce);
  FN(ncclBcast);
  FN(ncclBroadcast);
  FN(ncclAllReduce);
  FN(ncclReduceScatter);
  FN(ncclAllGather);
  FN(ncclAlltoAll);
  FN(ncclGather);
  FN(ncclScatter);
  FN(ncclSend);
  FN(ncclRecv);
  FN(ncclGroupStart);
  FN(ncclGroupEnd);
  FN(ncclGroupSimulateEnd);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 29, 0)
  FN(ncclCommGetUniqueId);
  FN(ncclCommGrow);
  FN(ncclWinGetUserPtr);
  FN(ncclPutSignal);
  FN(ncclSignal);
  FN(ncclWaitSignal);
#endif
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 29, 7)
  FN(ncclCommSuspend);
  FN(ncclCommResume);
  FN(ncclCommMemStats);
#endif
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 30, 4)
  FN(ncclParamBind);
  FN(ncclParamGetI8);
  FN(ncclParamGetI16);
  FN(ncclParamGetI32);
  FN(ncclParamGetI64);
  FN(ncclParamGetU8);
  FN(ncclParamGetU16);
  FN(ncclParamGetU32);
  FN(ncclParamGetU64);
  FN(ncclParamGetStr);
  FN(ncclParamGet);
  FN(ncclParamGetParameter);
  FN(ncclParamGetAllParameterKeys);
  FN(ncclParamDumpAll);
#endif
}
#endif

int main(void) {
  printf("language=%s\n",
#ifdef __cplusplus
         "C++"
#else
         "C"
#endif
  );
  structs();
  enums();
  macros();
  initializers();
#ifdef __cplusplus
  functions();
#endif
  return 0;
}
