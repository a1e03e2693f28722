/*
 * Deliberately broken schedule plugins for the loader tests. Built once per
 * FAULT_* definition (tests/unit/schedule_user/CMakeLists.txt):
 *   descriptor faults: ABI_VERSION, STRUCT_SIZE, NO_SYMBOL, FUTURE_SYMBOL,
 *                      NULL_GENERATE, BAD_NAME, INIT_FAILS
 *   GENERATOR: a valid descriptor ("faulty_gen", allgather) whose generate()
 *              misbehaves in a different way for each rank count (see below).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "theseus/schedule_plugin.h"

#define EXPORT __attribute__((visibility("default")))

static int g_generates = 0;
static int g_releases = 0;

/* For the test: how many generate()/release() calls this library saw. */
EXPORT int testPluginGenerates(void) { return g_generates; }
EXPORT int testPluginReleases(void) { return g_releases; }

static theseusSchedResult_t testInit(void** context, theseusSchedLogger_t logger) {
  *context = NULL;
  if (logger) logger(THESEUS_SCHED_LOG_INFO, "test plugin init");
#ifdef FAULT_INIT_FAILS
  return theseusSchedInternalError;
#else
  return theseusSchedSuccess;
#endif
}

static int testSupports(void* context, int collective, int nranks) {
  (void)context;
  return collective == THESEUS_SCHED_ALLGATHER && nranks >= 2;
}

/* Storage for one generated program (the tests use at most 16 ranks). */
static theseusSchedRankProgram_v1_t g_ranks[16];
static theseusSchedStep_v1_t g_steps[16][40];
static uint32_t g_deps[4] = {5, 0, 0, 0};

static theseusSchedStep_v1_t* add(int r, unsigned op) {
  theseusSchedStep_v1_t* s = &g_steps[r][g_ranks[r].nsteps++];
  memset(s, 0, sizeof(*s));
  s->op = op;
  s->recv_peer = 12345; /* unused peers hold garbage on purpose: the loader must ignore them */
  s->send_peer = 12345;
  return s;
}

/* Direct allgather: copy own block, send it to everybody, receive everybody's. */
static void directAllgather(int n, int skipCopyOnRank) {
  for (int r = 0; r < n; ++r) {
    g_ranks[r].steps = g_steps[r];
    g_ranks[r].nsteps = 0;
    if (r != skipCopyOnRank) {
      theseusSchedStep_v1_t* c = add(r, THESEUS_SCHED_OP_COPY);
      c->src = (theseusSchedRange_v1_t){THESEUS_SCHED_BUF_INPUT, 0, 1};
      c->dst = (theseusSchedRange_v1_t){THESEUS_SCHED_BUF_OUTPUT, (uint32_t)r, 1};
    }
    for (int q = 0; q < n; ++q) {
      if (q == r) continue;
      theseusSchedStep_v1_t* s = add(r, THESEUS_SCHED_OP_SEND);
      s->send_peer = q;
      s->src = (theseusSchedRange_v1_t){THESEUS_SCHED_BUF_INPUT, 0, 1};
      theseusSchedStep_v1_t* v = add(r, THESEUS_SCHED_OP_RECV);
      v->recv_peer = q;
      v->dst = (theseusSchedRange_v1_t){THESEUS_SCHED_BUF_OUTPUT, (uint32_t)q, 1};
    }
  }
}

/*
 * By rank count: 2 a correct direct allgather; 3 reports an error; 4 op 42;
 * 5 channel 300; 6 NULL steps; 7 ndeps 5000; 8 a forward dep; 9 buffer 7;
 * 10 NULL ranks; 11 chunks_per_block 0; 12 a wrong result (rank 1 never
 * writes its own block); 13 nchannels 0; 14 a dep list that is NULL.
 */
static theseusSchedResult_t testGenerate(void* context, const theseusSchedRequest_v1_t* req,
                                         theseusSchedProgram_v1_t* out, char* error, size_t errorSize) {
  (void)context;
  ++g_generates;
  const int n = req->nranks;
  if (n > 16) {
    snprintf(error, errorSize, "at most 16 ranks");
    return theseusSchedInvalidArgument;
  }
  directAllgather(n, n == 12 ? 1 : -1);
  out->chunks_per_block = 1;
  out->scratch_blocks = 0;
  out->nchannels = 1;
  out->ranks = g_ranks;
  switch (n) {
    case 3: snprintf(error, errorSize, "no program for 3 ranks (test)"); return theseusSchedInvalidArgument;
    case 4: g_steps[1][2].op = 42; break;
    case 5: g_steps[2][1].channel = 300; break;
    case 6: g_ranks[3].steps = NULL; break;
    case 7: g_steps[0][3].ndeps = 5000; g_steps[0][3].deps = g_deps; break;
    case 8: g_steps[0][0].ndeps = 1; g_steps[0][0].deps = g_deps; break;
    case 9: g_steps[0][1].src.buf = 7; break;
    case 10: out->ranks = NULL; break;
    case 11: out->chunks_per_block = 0; break;
    case 13: out->nchannels = 0; break;
    case 14: g_steps[0][2].ndeps = 2; g_steps[0][2].deps = NULL; break;
    default: break;
  }
  return theseusSchedSuccess;
}

static void testRelease(void* context, theseusSchedProgram_v1_t* program) {
  (void)context;
  (void)program;
  ++g_releases;
}

#ifdef FAULT_NO_SYMBOL
#define SYMBOL theseusSchedulePlugin
#elif defined(FAULT_FUTURE_SYMBOL)
#define SYMBOL theseusSchedulePlugin_v2
#else
#define SYMBOL theseusSchedulePlugin_v1
#endif

EXPORT const theseusSchedulePlugin_v1_t SYMBOL = {
#ifdef FAULT_STRUCT_SIZE
    sizeof(theseusSchedulePlugin_v1_t) - 8,
#else
    sizeof(theseusSchedulePlugin_v1_t),
#endif
#ifdef FAULT_ABI_VERSION
    99,
#else
    THESEUS_SCHEDULE_PLUGIN_ABI_V1,
#endif
#ifdef FAULT_BAD_NAME
    "bad name!",
#else
    "faulty_gen",
#endif
    "test plugin",
    0,
    0,
    testInit,
    testSupports,
#ifdef FAULT_NULL_GENERATE
    NULL,
#else
    testGenerate,
#endif
    testRelease,
    NULL,
};
