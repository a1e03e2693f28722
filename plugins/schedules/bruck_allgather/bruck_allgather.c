/*
 * Bruck allgather for any rank count, as a Theseus schedule plugin.
 *
 * Algorithm. After round k (k = 0, 1, ...) rank r holds the 2^(k+1) blocks
 * r, r+1, ..., r + 2^(k+1) - 1 (mod n) of the output. In round k it sends the
 * d = 2^k blocks it holds, starting at block r, to rank r - d, and receives
 * the d blocks starting at block r + d from rank r + d; in the last round
 * only min(d, n - d) blocks are still missing. So allgather takes
 * ceil(log2 n) rounds for any n: ceil(log2 n) alpha + (n-1)/n beta nS, the
 * latency of recursive doubling without its power-of-two restriction.
 *
 * The classic formulation gathers into a rotated scratch buffer and rotates
 * at the end. Here every block is written straight to its final place in the
 * output (block b at offset b), so no rotation is needed; a run of blocks
 * that wraps past block n-1 is sent as two messages, split at the same place
 * on both sides, so sends and receives still match in order.
 *
 * Invariants the verifier checks: a round only sends blocks received in
 * earlier rounds (or the rank's own block) and only receives blocks nobody
 * on this rank has touched yet, so no receive waits for a send of its own
 * rank and the schedule is deadlock-free under rendezvous.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "theseus/schedule_plugin.h"

#define EXPORT __attribute__((visibility("default")))

static theseusSchedLogger_t g_log = NULL;

typedef struct {
  theseusSchedRankProgram_v1_t* ranks;
  theseusSchedStep_v1_t* steps; /* one allocation for every rank's steps */
} BruckProgram;

static theseusSchedResult_t bruckInit(void** context, theseusSchedLogger_t logger) {
  g_log = logger;
  *context = NULL;
  if (g_log) g_log(THESEUS_SCHED_LOG_INFO, "bruck_allgather plugin ready");
  return theseusSchedSuccess;
}

static int bruckSupports(void* context, int collective, int nranks) {
  (void)context;
  return collective == THESEUS_SCHED_ALLGATHER && nranks >= 1;
}

static int rounds(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

/* Worst case steps of one rank: a copy, then per round up to two sends and two receives. */
static unsigned maxSteps(int n) { return 1u + 4u * (unsigned)rounds(n); }

static theseusSchedStep_v1_t* addStep(theseusSchedRankProgram_v1_t* rp, theseusSchedStep_v1_t* base, unsigned op) {
  theseusSchedStep_v1_t* s = &base[rp->nsteps++];
  memset(s, 0, sizeof(*s));
  s->op = op;
  s->recv_peer = -1;
  s->send_peer = -1;
  return s;
}

/* Blocks [first, first + count) mod n as at most two contiguous ranges. */
static int splitRun(int n, int first, int count, theseusSchedRange_v1_t out[2]) {
  int head = count < n - first ? count : n - first;
  out[0].buf = THESEUS_SCHED_BUF_OUTPUT;
  out[0].first = (uint32_t)first;
  out[0].count = (uint32_t)head;
  if (head == count) return 1;
  out[1].buf = THESEUS_SCHED_BUF_OUTPUT;
  out[1].first = 0;
  out[1].count = (uint32_t)(count - head);
  return 2;
}

static void buildRank(int n, int r, int inPlace, theseusSchedRankProgram_v1_t* rp, theseusSchedStep_v1_t* base) {
  rp->steps = base;
  rp->nsteps = 0;
  if (!inPlace) {
    theseusSchedStep_v1_t* c = addStep(rp, base, THESEUS_SCHED_OP_COPY);
    c->src.buf = THESEUS_SCHED_BUF_INPUT;
    c->src.count = 1;
    c->dst.buf = THESEUS_SCHED_BUF_OUTPUT;
    c->dst.first = (uint32_t)r;
    c->dst.count = 1;
  }
  for (int d = 1; d < n; d *= 2) {
    int count = d < n - d ? d : n - d;
    theseusSchedRange_v1_t parts[2];
    int np = splitRun(n, r, count, parts);
    for (int i = 0; i < np; ++i) {
      theseusSchedStep_v1_t* s = addStep(rp, base, THESEUS_SCHED_OP_SEND);
      s->send_peer = (r - d + n) % n;
      s->src = parts[i];
    }
    np = splitRun(n, (r + d) % n, count, parts);
    for (int i = 0; i < np; ++i) {
      theseusSchedStep_v1_t* s = addStep(rp, base, THESEUS_SCHED_OP_RECV);
      s->recv_peer = (r + d) % n;
      s->dst = parts[i];
    }
  }
}

static theseusSchedResult_t bruckGenerate(void* context, const theseusSchedRequest_v1_t* req,
                                          theseusSchedProgram_v1_t* out, char* error, size_t errorSize) {
  (void)context;
  if (req->struct_size < sizeof(theseusSchedRequest_v1_t)) {
    snprintf(error, errorSize, "request struct_size %zu is smaller than expected %zu", req->struct_size,
             sizeof(theseusSchedRequest_v1_t));
    return theseusSchedInvalidArgument;
  }
  if (req->collective != THESEUS_SCHED_ALLGATHER || req->nranks < 1) {
    snprintf(error, errorSize, "bruck_allgather implements allgather only (asked for collective %d, %d ranks)",
             req->collective, req->nranks);
    return theseusSchedInvalidArgument;
  }
  if (req->params[0] != '\0') {
    snprintf(error, errorSize, "bruck_allgather takes no parameters (got '%s')", req->params);
    return theseusSchedInvalidArgument;
  }
  const int n = req->nranks;
  const unsigned perRank = maxSteps(n);
  BruckProgram* prog = (BruckProgram*)calloc(1, sizeof(BruckProgram));
  if (prog) prog->ranks = (theseusSchedRankProgram_v1_t*)calloc((size_t)n, sizeof(theseusSchedRankProgram_v1_t));
  /* With only_rank set, only that rank's steps are needed. */
  const size_t filled = req->only_rank >= 0 ? 1 : (size_t)n;
  if (prog && prog->ranks) prog->steps = (theseusSchedStep_v1_t*)calloc(filled * perRank, sizeof(theseusSchedStep_v1_t));
  out->handle = prog;
  if (!prog || !prog->ranks || !prog->steps) {
    snprintf(error, errorSize, "out of memory for %d ranks", n);
    return theseusSchedInternalError;
  }
  size_t slot = 0;
  for (int r = 0; r < n; ++r) {
    if (req->only_rank >= 0 && r != req->only_rank) continue;
    buildRank(n, r, req->in_place, &prog->ranks[r], prog->steps + slot * perRank);
    ++slot;
  }
  out->chunks_per_block = 1;
  out->scratch_blocks = 0;
  out->nchannels = 1;
  out->ranks = prog->ranks;
  return theseusSchedSuccess;
}

static void bruckRelease(void* context, theseusSchedProgram_v1_t* program) {
  (void)context;
  BruckProgram* prog = (BruckProgram*)program->handle;
  if (!prog) return;
  free(prog->steps);
  free(prog->ranks);
  free(prog);
  program->handle = NULL;
}

static theseusSchedResult_t bruckFinalize(void* context) {
  (void)context;
  g_log = NULL;
  return theseusSchedSuccess;
}

EXPORT const theseusSchedulePlugin_v1_t theseusSchedulePlugin_v1 = {
    sizeof(theseusSchedulePlugin_v1_t),
    THESEUS_SCHEDULE_PLUGIN_ABI_V1,
    "bruck_allgather",
    "Bruck allgather: ceil(log2 n) rounds for any rank count, blocks written in place (no final rotation)",
    0,
    0,
    bruckInit,
    bruckSupports,
    bruckGenerate,
    bruckRelease,
    bruckFinalize,
};
