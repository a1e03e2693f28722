/* NCCL's profiler plugin ABI, versions 5 and 6 (NCCL 2.28 and 2.29-2.30),
 * written from its documentation. A profiler library exports
 * `ncclProfiler_v6` or `ncclProfiler_v5`; telemetry/nccl_profiler.h loads it.
 * The event descriptor is 112 bytes in both (v6 adds copy-engine members to
 * the union, which Theseus never emits). C, for the test plugins too. */
#ifndef THESEUS_TELEMETRY_NCCL_PROFILER_ABI_H
#define THESEUS_TELEMETRY_NCCL_PROFILER_ABI_H

#include <stdbool.h>
#include <sys/types.h>

#include "common/nccl_plugin_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
  ncclProfileGroup = (1 << 0),
  ncclProfileColl = (1 << 1),
  ncclProfileP2p = (1 << 2),
  ncclProfileProxyOp = (1 << 3),
  ncclProfileProxyStep = (1 << 4),
  ncclProfileProxyCtrl = (1 << 5),
  ncclProfileKernelCh = (1 << 6),
  ncclProfileNetPlugin = (1 << 7),
  ncclProfileGroupApi = (1 << 8),
  ncclProfileCollApi = (1 << 9),
  ncclProfileP2pApi = (1 << 10),
  ncclProfileKernelLaunch = (1 << 11),
  ncclProfileCeColl = (1 << 12),  /* v6 */
  ncclProfileCeSync = (1 << 13),  /* v6 */
  ncclProfileCeBatch = (1 << 14)  /* v6 */
};

typedef enum {
  ncclProfilerProxyOpSendPosted = 0,
  ncclProfilerProxyOpSendRemFifoWait = 1,
  ncclProfilerProxyOpSendTransmitted = 2,
  ncclProfilerProxyOpSendDone = 3,
  ncclProfilerProxyOpRecvPosted = 4,
  ncclProfilerProxyOpRecvReceived = 5,
  ncclProfilerProxyOpRecvTransmitted = 6,
  ncclProfilerProxyOpRecvDone = 7,
  ncclProfilerProxyStepSendGPUWait = 8,
  ncclProfilerProxyStepSendWait = 9,
  ncclProfilerProxyStepRecvWait = 10,
  ncclProfilerProxyStepRecvFlushWait = 11,
  ncclProfilerProxyStepRecvGPUWait = 12,
  ncclProfilerProxyCtrlIdle = 13,
  ncclProfilerProxyCtrlActive = 14,
  ncclProfilerProxyCtrlSleep = 15,
  ncclProfilerProxyCtrlWakeup = 16,
  ncclProfilerProxyCtrlAppend = 17,
  ncclProfilerProxyCtrlAppendEnd = 18,
  ncclProfilerProxyOpInProgress_v4 = 19,
  ncclProfilerProxyStepSendPeerWait_v4 = 20,
  ncclProfilerNetPluginUpdate = 21,
  ncclProfilerKernelChStop = 22,
  ncclProfilerGroupStartApiStop = 23,
  ncclProfilerGroupEndApiStart = 24
} ncclProfilerEventState_v5_t;
typedef ncclProfilerEventState_v5_t ncclProfilerEventState_v6_t;

typedef union {
  struct { size_t transSize; } proxyStep;
  struct { int appendedProxyOps; } proxyCtrl;
  struct { void* data; } netPlugin;
  struct { uint64_t pTimer; } kernelCh;
} ncclProfilerEventStateArgs_v5_t;
typedef ncclProfilerEventStateArgs_v5_t ncclProfilerEventStateArgs_v6_t;

typedef struct {
  uint64_t type;    /* one ncclProfile* bit */
  void* parentObj;  /* the parent event's handle, or NULL */
  int rank;
  union {
    struct { bool graphCaptured; int groupDepth; } groupApi;
    struct { const char* func; size_t count; const char* datatype; int root; void* stream; bool graphCaptured; } collApi;
    struct { const char* func; size_t count; const char* datatype; void* stream; bool graphCaptured; } p2pApi;
    struct { void* stream; } kernelLaunch;
    struct {
      uint64_t seqNumber;
      const char* func;
      const void* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      const char* datatype;
      uint8_t nChannels;
      uint8_t nWarps;
      const char* algo;
      const char* proto;
      void* parentGroup;
    } coll;
    struct {
      const char* func;
      void* buff;
      const char* datatype;
      size_t count;
      int peer;
      uint8_t nChannels;
      void* parentGroup;
    } p2p;
    struct { pid_t pid; uint8_t channelId; int peer; int nSteps; int chunkSize; int isSend; } proxyOp;
    struct { int step; } proxyStep;
    struct { uint8_t channelId; uint64_t pTimer; } kernelCh;
    struct { int64_t id; void* data; } netPlugin;
    /* v6: ceColl, ceCollSync, ceCollBatch (at most 88 bytes; never emitted by Theseus). */
    char v6Reserved[88];
  };
} ncclProfilerEventDescr_v5_t;
typedef ncclProfilerEventDescr_v5_t ncclProfilerEventDescr_v6_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, uint64_t commId, int* eActivationMask, const char* commName, int nNodes,
                       int nranks, int rank, ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_v6_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, ncclProfilerEventState_v6_t eState,
                                   ncclProfilerEventStateArgs_v6_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} ncclProfiler_v6_t;
typedef ncclProfiler_v6_t ncclProfiler_v5_t;

#ifdef __cplusplus
}
#endif

#endif
