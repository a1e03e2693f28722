/* A tuner plugin written against NCCL's tuner ABI the way NVIDIA's example
 * tuner is (our own code): it reads rules from a CSV file and prefers the
 * matching (algorithm, protocol) cell by setting its cost to 0.
 *
 *   TEST_TUNER_CONFIG=<file>, one rule per line:
 *     collective,minBytes,maxBytes,algorithm,protocol,channels[,chunkBytes]
 *   e.g. "allreduce,0,65535,tree,simple,2" or "allgather,0,-1,pat,ll,-1".
 *   maxBytes -1 = no limit; channels -1 = leave *nChannels; chunkBytes (v6
 *   only) is what getChunkSize() answers for that rule.
 *   TEST_TUNER_LOG=<file>: every getCollInfo call appends "func nBytes\n".
 *
 * Faults (one library per -DFAULT_*): V2 (the version-2 ABI, direct picks),
 * V4 (the version-4 ABI), NEWER_ONLY (exports only ncclTunerPlugin_v9),
 * NO_SYMBOL, INIT_FAILS, GETCOLLINFO_FAILS. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "policy/nccl_tuner_abi.h"

#define MAX_RULES 32

typedef struct {
  int func;
  size_t minBytes, maxBytes;
  int algo, proto, channels;
  size_t chunk;
} Rule;

typedef struct {
  Rule rules[MAX_RULES];
  int nRules;
  size_t nRanks, nNodes;
  ncclDebugLogger_t log;
} Context;

static const char* funcNames[] = {"broadcast", "reduce", "allgather", "reducescatter", "allreduce"};
static const char* algoNames[] = {"tree", "ring", "collnetdirect", "collnetchain", "nvls", "nvlstree", "pat"};
static const char* protoNames[] = {"ll", "ll128", "simple"};

static int indexOf(const char* const* names, int n, const char* s) {
  for (int i = 0; i < n; ++i)
    if (strcasecmp(names[i], s) == 0) return i;
  return -1;
}

static void readRules(Context* c) {
  const char* path = getenv("TEST_TUNER_CONFIG");
  FILE* f = path ? fopen(path, "r") : NULL;
  char line[256];
  if (f == NULL) return;
  while (c->nRules < MAX_RULES && fgets(line, sizeof(line), f)) {
    char func[32], algo[32], proto[32];
    long long lo, hi, chunk = 0;
    int channels;
    if (line[0] == '#') continue;
    int n = sscanf(line, "%31[^,],%lld,%lld,%31[^,],%31[^,],%d,%lld", func, &lo, &hi, algo, proto, &channels, &chunk);
    if (n < 6) continue;
    Rule* r = &c->rules[c->nRules];
    r->func = indexOf(funcNames, 5, func);
    r->algo = indexOf(algoNames, NCCL_NUM_ALGORITHMS, algo);
    r->proto = indexOf(protoNames, NCCL_NUM_PROTOCOLS, proto);
    if (r->func < 0 || r->algo < 0 || r->proto < 0) continue;
    r->minBytes = (size_t)lo;
    r->maxBytes = hi < 0 ? (size_t)-1 : (size_t)hi;
    r->channels = channels;
    r->chunk = n == 7 ? (size_t)chunk : 0;
    c->nRules++;
  }
  fclose(f);
}

static const Rule* match(const Context* c, ncclFunc_t func, size_t nBytes) {
  for (int i = 0; i < c->nRules; ++i) {
    const Rule* r = &c->rules[i];
    if (r->func == (int)func && nBytes >= r->minBytes && nBytes <= r->maxBytes) return r;
  }
  return NULL;
}

static void logCall(ncclFunc_t func, size_t nBytes) {
  const char* path = getenv("TEST_TUNER_LOG");
  FILE* f = path ? fopen(path, "a") : NULL;
  if (f == NULL) return;
  fprintf(f, "%d %zu\n", (int)func, nBytes);
  fclose(f);
}

static ncclResult_t setup(void** context, size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction) {
#ifdef FAULT_INIT_FAILS
  (void)context; (void)nRanks; (void)nNodes;
  if (logFunction) logFunction(NCCL_LOG_WARN, NCCL_TUNING, __FILE__, __LINE__, "test tuner: refusing to start");
  return ncclInternalError;
#else
  Context* c = (Context*)calloc(1, sizeof(Context));
  if (c == NULL) return ncclSystemError;
  c->nRanks = nRanks;
  c->nNodes = nNodes;
  c->log = logFunction;
  readRules(c);
  if (logFunction)
    logFunction(NCCL_LOG_INFO, NCCL_TUNING, __FILE__, __LINE__, "test tuner: %d rule(s) for %zu ranks on %zu node(s)",
                c->nRules, nRanks, nNodes);
  *context = c;
  return ncclSuccess;
#endif
}

static ncclResult_t costTableCall(void* context, ncclFunc_t func, size_t nBytes, float** collCostTable, int numAlgo,
                                  int numProto, int* nChannels) {
  Context* c = (Context*)context;
  float(*table)[NCCL_NUM_PROTOCOLS] = (float(*)[NCCL_NUM_PROTOCOLS])collCostTable;
  const Rule* r;
  logCall(func, nBytes);
#ifdef FAULT_GETCOLLINFO_FAILS
  (void)c; (void)table; (void)r; (void)numAlgo; (void)numProto; (void)nChannels;
  return ncclInvalidUsage;
#else
  if (numAlgo != NCCL_NUM_ALGORITHMS || numProto != NCCL_NUM_PROTOCOLS) return ncclInternalError;
  r = match(c, func, nBytes);
  if (r == NULL) return ncclSuccess;
  /* Like NVIDIA's example: only a cell NCCL left available is made the cheapest. */
  if (table[r->algo][r->proto] != NCCL_ALGO_PROTO_IGNORE) table[r->algo][r->proto] = 0.0f;
  if (r->channels > 0) *nChannels = r->channels;
  return ncclSuccess;
#endif
}

static ncclResult_t getCollInfoV6(void* context, ncclFunc_t func, size_t nBytes, int numPipeOps, float** collCostTable,
                                  int numAlgo, int numProto, int regBuff, int* nChannels) {
  (void)numPipeOps; (void)regBuff;
  return costTableCall(context, func, nBytes, collCostTable, numAlgo, numProto, nChannels);
}

static ncclResult_t finish(void* context) {
  free(context);
  return ncclSuccess;
}

#if defined(FAULT_V2)
static ncclResult_t initV2(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context) {
  return setup(context, nRanks, nNodes, logFunction);
}
static ncclResult_t getCollInfoV2(void* context, ncclFunc_t func, size_t nBytes, int collNetSupport, int nvlsSupport,
                                  int numPipeOps, int* algorithm, int* protocol, int* nChannels) {
  const Rule* r = match((Context*)context, func, nBytes);
  (void)collNetSupport; (void)nvlsSupport; (void)numPipeOps;
  logCall(func, nBytes);
  if (r == NULL) return ncclSuccess;
  *algorithm = r->algo;
  *protocol = r->proto;
  if (r->channels > 0) *nChannels = r->channels;
  return ncclSuccess;
}
const ncclTuner_v2_t ncclTunerPlugin_v2 = {"test_tuner_v2", initV2, getCollInfoV2, finish};
#elif defined(FAULT_V4)
static ncclResult_t initV4(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context) {
  return setup(context, nRanks, nNodes, logFunction);
}
const ncclTuner_v4_t ncclTunerPlugin_v4 = {"test_tuner_v4", initV4, getCollInfoV6, finish};
#elif defined(FAULT_NEWER_ONLY)
/* A descriptor of a future ABI: Theseus must refuse it by name, not call it. */
const ncclTuner_v6_t ncclTunerPlugin_v9 = {"test_tuner_v9", NULL, NULL, NULL, NULL};
#elif defined(FAULT_NO_SYMBOL)
const int notATuner = 1;
#else
static ncclResult_t initV6(void** context, uint64_t commId, size_t nRanks, size_t nNodes,
                           ncclDebugLogger_t logFunction, ncclNvlDomainInfo_v6_t* nvlDomainInfo,
                           ncclTunerConstants_v6_t* constants) {
  (void)commId; (void)constants;
  if (nvlDomainInfo == NULL || nvlDomainInfo->nNvlDomains != (int)nNodes) return ncclInternalError;
  return setup(context, nRanks, nNodes, logFunction);
}
static ncclResult_t getChunkSize(void* context, ncclFunc_t func, size_t nBytes, int algorithm, int protocol,
                                 int nChannels, size_t* chunkSize) {
  const Rule* r = match((Context*)context, func, nBytes);
  (void)nChannels;
  if (r != NULL && r->chunk > 0 && r->algo == algorithm && r->proto == protocol) *chunkSize = r->chunk;
  return ncclSuccess;
}
const ncclTuner_v6_t ncclTunerPlugin_v6 = {"test_tuner", initV6, getCollInfoV6, finish, getChunkSize};
#endif
