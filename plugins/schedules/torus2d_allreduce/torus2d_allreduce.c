/*
 * Two-dimensional ring allreduce ("2D torus") for any rank count, as a
 * Theseus schedule plugin.
 *
 * Algorithm. The n ranks form an R x C grid, rank (i, j) = i * C + j. A block
 * is cut into n chunks in C groups of R: group g = chunks [g R, (g + 1) R).
 *   1. Every row runs a ring reduce-scatter over the C groups: rank (i, j)
 *      ends with the row sum of group g = (j + 1) mod C.
 *   2. Every column (all holding the same group g) runs a ring allreduce over
 *      the R chunks of g: now every rank of the column has g fully reduced.
 *   3. Every row runs a ring allgather of the groups.
 * Rows move (C-1)/C of the data twice, columns only (R-1)/(R C) of it, so when
 * rows are hosts and columns cross hosts, inter-host traffic shrinks by C
 * compared with one flat ring, for 2 (R + C - 2) message latencies instead of
 * 2 (n - 1).
 *
 * Grid. When the request carries host_of and the hosts are regular - H hosts
 * with n / H consecutive ranks each - rows are hosts (R = H). Otherwise R is
 * the largest divisor of n not above sqrt(n) (a prime n gives 1 x n: a plain
 * ring). A dimension of size 1 skips its phase.
 *
 * Invariants the verifier checks: each ring phase only reads chunks the
 * previous phase finished, rows and columns never share a peer, and the two
 * row phases use one (peer, channel) stream in the same order on both ends.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "theseus/schedule_plugin.h"

#define EXPORT __attribute__((visibility("default")))

typedef struct {
  theseusSchedRankProgram_v1_t* ranks;
  theseusSchedStep_v1_t* steps;
} TorusProgram;

/* One ring: the members' ranks in ring order and this member's position. */
typedef struct {
  int prev, next;   /* ranks */
  int pos, size;
  uint32_t base;    /* first chunk of segment 0 */
  uint32_t segLen;  /* chunks per segment */
  uint32_t stride;  /* chunks between consecutive segments */
} Ring;

static int mod(int a, int m) { return ((a % m) + m) % m; }

static theseusSchedRange_v1_t seg(const Ring* g, uint32_t buf, int q) {
  theseusSchedRange_v1_t r = {buf, g->base + (uint32_t)mod(q, g->size) * g->stride, g->segLen};
  return r;
}

static theseusSchedStep_v1_t* add(theseusSchedRankProgram_v1_t* rp, unsigned op, int recvPeer, int sendPeer) {
  theseusSchedStep_v1_t* s = (theseusSchedStep_v1_t*)&rp->steps[rp->nsteps++];
  memset(s, 0, sizeof(*s));
  s->op = op;
  s->recv_peer = recvPeer;
  s->send_peer = sendPeer;
  return s;
}

/* Member p ends with segment p + 1 reduced into the output. */
static void reduceScatter(theseusSchedRankProgram_v1_t* rp, const Ring* g, uint32_t srcBuf) {
  const int p = g->pos, k = g->size;
  add(rp, THESEUS_SCHED_OP_SEND, -1, g->next)->src = seg(g, srcBuf, p);
  for (int t = 1; t <= k - 2; ++t) add(rp, THESEUS_SCHED_OP_RECV_REDUCE_SEND, g->prev, g->next)->src = seg(g, srcBuf, p - t);
  theseusSchedStep_v1_t* last = add(rp, THESEUS_SCHED_OP_RECV_REDUCE, g->prev, -1);
  last->src = seg(g, srcBuf, p + 1);
  last->dst = seg(g, THESEUS_SCHED_BUF_OUTPUT, p + 1);
}

/* Member p starts with segment p + 1 of the output and ends with all of them. */
static void allGather(theseusSchedRankProgram_v1_t* rp, const Ring* g) {
  const int p = g->pos, k = g->size;
  add(rp, THESEUS_SCHED_OP_SEND, -1, g->next)->src = seg(g, THESEUS_SCHED_BUF_OUTPUT, p + 1);
  for (int t = 1; t <= k - 2; ++t)
    add(rp, THESEUS_SCHED_OP_RECV_COPY_SEND, g->prev, g->next)->dst = seg(g, THESEUS_SCHED_BUF_OUTPUT, p + 1 - t);
  add(rp, THESEUS_SCHED_OP_RECV, g->prev, -1)->dst = seg(g, THESEUS_SCHED_BUF_OUTPUT, p + 2);
}

/* Rows = hosts when host_of describes H hosts of n / H consecutive ranks each. */
static int rowsFromHosts(const int* hostOf, int n) {
  if (!hostOf) return 0;
  int hosts = 1;
  for (int r = 1; r < n; ++r)
    if (hostOf[r] != hostOf[r - 1]) ++hosts;
  if (n % hosts) return 0;
  const int c = n / hosts;
  for (int r = 0; r < n; ++r) {
    if (hostOf[r] != hostOf[r - r % c]) return 0;           /* a row spans two hosts */
    if (r >= c && hostOf[r] == hostOf[r - c]) return 0;     /* a host spans two rows */
  }
  return hosts;
}

static int rowsFor(int n, const int* hostOf) {
  int rows = rowsFromHosts(hostOf, n);
  if (rows > 0) return rows;
  rows = 1;
  for (int d = 1; d * d <= n; ++d)
    if (n % d == 0) rows = d;
  return rows;
}

static void buildRank(int n, int rows, int r, int inPlace, theseusSchedRankProgram_v1_t* rp) {
  const int cols = n / rows, i = r / cols, j = r % cols;
  if (n == 1) {
    if (!inPlace) {
      theseusSchedStep_v1_t* c = add(rp, THESEUS_SCHED_OP_COPY, -1, -1);
      c->src = (theseusSchedRange_v1_t){THESEUS_SCHED_BUF_INPUT, 0, 1};
      c->dst = (theseusSchedRange_v1_t){THESEUS_SCHED_BUF_OUTPUT, 0, 1};
    }
    return;
  }
  /* Row ring over groups (segments of R chunks); column ring over the chunks of one group. */
  Ring row = {i * cols + mod(j - 1, cols), i * cols + mod(j + 1, cols), j, cols, 0, (uint32_t)rows, (uint32_t)rows};
  int group = cols > 1 ? mod(j + 1, cols) : 0;
  Ring col = {mod(i - 1, rows) * cols + j, mod(i + 1, rows) * cols + j, i, rows,
              (uint32_t)(group * rows), 1, 1};
  if (cols > 1) {
    reduceScatter(rp, &row, THESEUS_SCHED_BUF_INPUT);
  } else if (!inPlace) {
    theseusSchedStep_v1_t* c = add(rp, THESEUS_SCHED_OP_COPY, -1, -1);
    c->src = (theseusSchedRange_v1_t){THESEUS_SCHED_BUF_INPUT, 0, (uint32_t)n};
    c->dst = (theseusSchedRange_v1_t){THESEUS_SCHED_BUF_OUTPUT, 0, (uint32_t)n};
  }
  if (rows > 1) {
    reduceScatter(rp, &col, THESEUS_SCHED_BUF_OUTPUT);
    allGather(rp, &col);
  }
  if (cols > 1) allGather(rp, &row);
}

static int torusSupports(void* context, int collective, int nranks) {
  (void)context;
  return collective == THESEUS_SCHED_ALLREDUCE && nranks >= 1 && nranks <= (1 << 16);
}

static theseusSchedResult_t torusGenerate(void* context, const theseusSchedRequest_v1_t* req,
                                          theseusSchedProgram_v1_t* out, char* error, size_t errorSize) {
  (void)context;
  if (req->collective != THESEUS_SCHED_ALLREDUCE || !torusSupports(NULL, req->collective, req->nranks)) {
    snprintf(error, errorSize, "torus2d_allreduce implements allreduce for 1..65536 ranks (asked: collective %d, "
             "%d ranks)", req->collective, req->nranks);
    return theseusSchedInvalidArgument;
  }
  if (req->params[0] != '\0') {
    snprintf(error, errorSize, "torus2d_allreduce takes no parameters (got '%s')", req->params);
    return theseusSchedInvalidArgument;
  }
  const int n = req->nranks, rows = rowsFor(n, req->host_of);
  const unsigned perRank = 2u * (unsigned)(rows + n / rows) + 1u;
  const size_t filled = req->only_rank >= 0 ? 1 : (size_t)n;
  TorusProgram* prog = (TorusProgram*)calloc(1, sizeof(TorusProgram));
  if (prog) prog->ranks = (theseusSchedRankProgram_v1_t*)calloc((size_t)n, sizeof(theseusSchedRankProgram_v1_t));
  if (prog && prog->ranks) prog->steps = (theseusSchedStep_v1_t*)calloc(filled * perRank, sizeof(theseusSchedStep_v1_t));
  out->handle = prog;
  if (!prog || !prog->ranks || !prog->steps) {
    snprintf(error, errorSize, "out of memory for %d ranks", n);
    return theseusSchedInternalError;
  }
  size_t slot = 0;
  for (int r = 0; r < n; ++r) {
    if (req->only_rank >= 0 && r != req->only_rank) continue;
    prog->ranks[r].steps = prog->steps + slot++ * perRank;
    buildRank(n, rows, r, req->in_place, &prog->ranks[r]);
  }
  out->chunks_per_block = (uint32_t)n;
  out->scratch_blocks = 0;
  out->nchannels = 1;
  out->ranks = prog->ranks;
  return theseusSchedSuccess;
}

static void torusRelease(void* context, theseusSchedProgram_v1_t* program) {
  (void)context;
  TorusProgram* prog = (TorusProgram*)program->handle;
  if (!prog) return;
  free(prog->steps);
  free(prog->ranks);
  free(prog);
  program->handle = NULL;
}

EXPORT const theseusSchedulePlugin_v1_t theseusSchedulePlugin_v1 = {
    sizeof(theseusSchedulePlugin_v1_t),
    THESEUS_SCHEDULE_PLUGIN_ABI_V1,
    "torus2d_allreduce",
    "2D ring allreduce: row reduce-scatter, column allreduce, row allgather; rows = hosts when they are regular",
    0,
    0,
    NULL,
    torusSupports,
    torusGenerate,
    torusRelease,
    NULL,
};
