/* A profiler plugin written against NCCL's profiler ABI the way NVIDIA's
 * example profiler is (our own code): it keeps every event in memory and, at
 * finalize, writes them to "$TEST_PROFILER_OUT.<rank>", one line per call:
 *   start <id> <type> <parent id|0> <rank> <fields...>
 *   state <id> <state>
 *   stop <id>
 * Fields per type: GroupApi depth; CollApi func count datatype root; P2pApi
 * func count datatype; Coll seq func count root datatype nChannels algo proto
 * parentGroup; P2p func count datatype peer nChannels parentGroup; ProxyOp
 * peer channel nSteps chunkSize isSend; others none.
 * TEST_PROFILER_MASK: the activation mask init() returns (default: all).
 * Variants: V5 (exports ncclProfiler_v5), V4 (only an older ABI), INIT_FAILS. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "telemetry/nccl_profiler_abi.h"

typedef struct {
  int rank;
  int nextId;
  char* log;
  size_t used, cap;
  void** handles; /* every handle handed out, freed at finalize */
  int nHandles, capHandles;
} Context;

static void append(Context* c, const char* line) {
  size_t n = strlen(line);
  if (c->used + n + 1 > c->cap) {
    c->cap = (c->used + n + 1) * 2;
    c->log = (char*)realloc(c->log, c->cap);
  }
  memcpy(c->log + c->used, line, n + 1);
  c->used += n;
}

/* Handles are (context, id) pairs that live until finalize, so that stopped
 * events stay valid parents, as in NVIDIA's example. */
typedef struct {
  Context* ctx;
  int id;
} Handle;

static int idOf(void* h) { return h ? ((Handle*)h)->id : 0; }

static ncclResult_t init(void** context, uint64_t commId, int* eActivationMask, const char* commName, int nNodes,
                         int nranks, int rank, ncclDebugLogger_t logfn) {
  (void)commId; (void)commName; (void)nNodes; (void)nranks;
#ifdef FAULT_INIT_FAILS
  (void)context; (void)eActivationMask; (void)rank; (void)logfn;
  return ncclSystemError;
#else
  Context* c = (Context*)calloc(1, sizeof(Context));
  const char* mask = getenv("TEST_PROFILER_MASK");
  c->rank = rank;
  *eActivationMask = mask ? (int)strtol(mask, NULL, 0) : 0x7fff;
  if (logfn) logfn(NCCL_LOG_INFO, NCCL_PROFILE, __FILE__, __LINE__, "test profiler: rank %d of %d", rank, nranks);
  *context = c;
  return ncclSuccess;
#endif
}

static ncclResult_t startEvent(void* context, void** eHandle, ncclProfilerEventDescr_v6_t* d) {
  Context* c = (Context*)context;
  Handle* h = (Handle*)malloc(sizeof(Handle));
  char line[512];
  int n;
  h->ctx = c;
  h->id = ++c->nextId;
  if (c->nHandles == c->capHandles) {
    c->capHandles = c->capHandles ? 2 * c->capHandles : 64;
    c->handles = (void**)realloc(c->handles, c->capHandles * sizeof(void*));
  }
  c->handles[c->nHandles++] = h;
  n = snprintf(line, sizeof(line), "start %d %llu %d %d", h->id, (unsigned long long)d->type, idOf(d->parentObj),
               d->rank);
  switch (d->type) {
    case ncclProfileGroupApi: snprintf(line + n, sizeof(line) - n, " %d\n", d->groupApi.groupDepth); break;
    case ncclProfileCollApi:
      snprintf(line + n, sizeof(line) - n, " %s %zu %s %d\n", d->collApi.func, d->collApi.count, d->collApi.datatype,
               d->collApi.root);
      break;
    case ncclProfileP2pApi:
      snprintf(line + n, sizeof(line) - n, " %s %zu %s\n", d->p2pApi.func, d->p2pApi.count, d->p2pApi.datatype);
      break;
    case ncclProfileColl:
      snprintf(line + n, sizeof(line) - n, " %llu %s %zu %d %s %d %s %s %d\n", (unsigned long long)d->coll.seqNumber,
               d->coll.func, d->coll.count, d->coll.root, d->coll.datatype, d->coll.nChannels, d->coll.algo,
               d->coll.proto, idOf(d->coll.parentGroup));
      break;
    case ncclProfileP2p:
      snprintf(line + n, sizeof(line) - n, " %s %zu %s %d %d %d\n", d->p2p.func, d->p2p.count, d->p2p.datatype,
               d->p2p.peer, d->p2p.nChannels, idOf(d->p2p.parentGroup));
      break;
    case ncclProfileProxyOp:
      snprintf(line + n, sizeof(line) - n, " %d %d %d %d %d\n", d->proxyOp.peer, d->proxyOp.channelId,
               d->proxyOp.nSteps, d->proxyOp.chunkSize, d->proxyOp.isSend);
      break;
    default: snprintf(line + n, sizeof(line) - n, "\n"); break;
  }
  append(c, line);
  *eHandle = h;
  return ncclSuccess;
}

static ncclResult_t stopEvent(void* eHandle) {
  Handle* h = (Handle*)eHandle;
  char line[64];
  snprintf(line, sizeof(line), "stop %d\n", h->id);
  append(h->ctx, line);
  return ncclSuccess;
}

static ncclResult_t recordEventState(void* eHandle, ncclProfilerEventState_v6_t eState,
                                     ncclProfilerEventStateArgs_v6_t* args) {
  Handle* h = (Handle*)eHandle;
  char line[64];
  (void)args;
  snprintf(line, sizeof(line), "state %d %d\n", h->id, (int)eState);
  append(h->ctx, line);
  return ncclSuccess;
}

static ncclResult_t finalize(void* context) {
  Context* c = (Context*)context;
  const char* out = getenv("TEST_PROFILER_OUT");
  if (out != NULL) {
    char path[512];
    FILE* f;
    snprintf(path, sizeof(path), "%s.%d", out, c->rank);
    f = fopen(path, "w");
    if (f != NULL) {
      if (c->log) fputs(c->log, f);
      fclose(f);
    }
  }
  for (int i = 0; i < c->nHandles; ++i) free(c->handles[i]);
  free(c->handles);
  free(c->log);
  free(c);
  return ncclSuccess;
}

#if defined(FAULT_V4)
typedef struct {
  const char* name;
  void* fns[5];
} OldProfiler;
const OldProfiler ncclProfiler_v4 = {"test_profiler_v4", {0}};
#elif defined(FAULT_V5)
const ncclProfiler_v5_t ncclProfiler_v5 = {"test_profiler_v5", init, startEvent, stopEvent, recordEventState, finalize};
#else
const ncclProfiler_v6_t ncclProfiler_v6 = {"test_profiler", init, startEvent, stopEvent, recordEventState, finalize};
#endif
