/*
 * Theseus schedule plugins: C generators of schedule programs.
 *
 * A schedule plugin is a shared library that exports one constant descriptor
 * under a versioned symbol:
 *
 *   const theseusSchedulePlugin_v1_t theseusSchedulePlugin_v1 = {
 *     sizeof(theseusSchedulePlugin_v1_t), THESEUS_SCHEDULE_PLUGIN_ABI_V1, "my_allreduce", ...
 *   };
 *
 * Theseus loads it from THESEUS_SCHEDULES (a path to the .so, or a directory
 * holding it), looks for the newest symbol version it knows first, checks
 * struct_size and abi_version, calls init() once, then generate() whenever it
 * needs the program of a (collective, rank count, root, layout) it has not
 * built yet. Every program a plugin returns is copied, checked index by index
 * and verified symbolically (result, matching, deadlock freedom) before it
 * can run; an error names the plugin, the request, the rank and the step.
 *
 * The program format is the schedule IR of docs/schedule-format.md, as plain
 * structs: per rank an ordered array of steps; a step has an op, peers, a
 * channel, a source and a destination chunk range and optional explicit
 * dependencies on earlier steps of the same rank. Buffers are split in blocks
 * of U elements (U = NCCL's count for allreduce/broadcast/reduce, sendcount
 * for allgather, recvcount for reducescatter, the per-peer count for
 * alltoall/gather/scatter) and every block into chunks_per_block chunks, so a
 * program is independent of the message size and of the data type.
 *
 * Calls into one plugin are serialised by Theseus (never two at a time on the
 * same context), from any thread. Nothing may throw across this interface.
 * See docs/plugin-guide.md.
 */
#ifndef THESEUS_SCHEDULE_PLUGIN_H_
#define THESEUS_SCHEDULE_PLUGIN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define THESEUS_SCHEDULE_PLUGIN_ABI_V1 1u
#define THESEUS_SCHEDULE_PLUGIN_SYMBOL_V1 "theseusSchedulePlugin_v1"

/* Result codes of plugin functions. */
typedef enum {
  theseusSchedSuccess = 0,
  theseusSchedInvalidArgument = 1, /* the request cannot be served (rank count, collective, params) */
  theseusSchedInternalError = 2,   /* a bug or resource problem inside the plugin */
} theseusSchedResult_t;

/* Log levels for the logger callback (same values as NCCL_DEBUG levels). */
#define THESEUS_SCHED_LOG_WARN 2
#define THESEUS_SCHED_LOG_INFO 3
#define THESEUS_SCHED_LOG_TRACE 5
/* Logs one line (no trailing newline needed); shown with the plugin's name. */
typedef void (*theseusSchedLogger_t)(int level, const char* message);

/* Collectives (values of NCCL's ncclFunc_t). */
#define THESEUS_SCHED_BROADCAST 0
#define THESEUS_SCHED_REDUCE 1
#define THESEUS_SCHED_ALLGATHER 2
#define THESEUS_SCHED_REDUCESCATTER 3
#define THESEUS_SCHED_ALLREDUCE 4
#define THESEUS_SCHED_ALLTOALL 8
#define THESEUS_SCHED_SCATTER 9
#define THESEUS_SCHED_GATHER 10

/* Buffers. */
#define THESEUS_SCHED_BUF_INPUT 0
#define THESEUS_SCHED_BUF_OUTPUT 1
#define THESEUS_SCHED_BUF_SCRATCH 2

/* Ops (docs/schedule-format.md). "(+)" is the collective's reduction. */
#define THESEUS_SCHED_OP_SEND 0                  /* send src to send_peer */
#define THESEUS_SCHED_OP_RECV 1                  /* dst = recv(recv_peer) */
#define THESEUS_SCHED_OP_RECV_REDUCE 2           /* dst = src (+) recv(recv_peer) */
#define THESEUS_SCHED_OP_COPY 3                  /* dst = src */
#define THESEUS_SCHED_OP_REDUCE 4                /* dst = dst (+) src */
#define THESEUS_SCHED_OP_RECV_COPY_SEND 5        /* dst = recv(recv_peer); send dst to send_peer */
#define THESEUS_SCHED_OP_RECV_REDUCE_SEND 6      /* send src (+) recv(recv_peer) to send_peer */
#define THESEUS_SCHED_OP_RECV_REDUCE_COPY_SEND 7 /* dst = src (+) recv(recv_peer); send dst to send_peer */

/* Chunks [first, first + count) of one buffer. */
typedef struct {
  uint32_t buf;
  uint32_t first;
  uint32_t count;
} theseusSchedRange_v1_t;

/* One step. Fields an op does not use are ignored (peers, src or dst). */
typedef struct {
  uint32_t op;
  uint32_t channel;             /* < nchannels */
  int32_t recv_peer;            /* rank, for ops that receive */
  int32_t send_peer;            /* rank, for ops that send */
  theseusSchedRange_v1_t src;   /* for ops that read a source */
  theseusSchedRange_v1_t dst;   /* for ops that write a destination */
  const uint32_t* deps;         /* indices of earlier steps of this rank that must complete first */
  uint32_t ndeps;
} theseusSchedStep_v1_t;

typedef struct {
  const theseusSchedStep_v1_t* steps;
  uint32_t nsteps;
} theseusSchedRankProgram_v1_t;

/* What Theseus asks for. */
typedef struct {
  size_t struct_size;  /* sizeof(theseusSchedRequest_v1_t) */
  int collective;      /* THESEUS_SCHED_* collective */
  int nranks;
  int root;            /* rooted collectives; 0 otherwise */
  int in_place;        /* 1: the in-place buffer layout (docs/schedule-format.md) */
  int only_rank;       /* -1: fill every rank; r >= 0: only rank r's steps are used (others may stay empty) */
  const int* host_of;  /* host index of every rank (nranks entries), or NULL when unknown */
  const char* params;  /* "" or "key=value;key=value" chosen by the policy; never NULL */
} theseusSchedRequest_v1_t;

/* What the plugin returns. Theseus zeroes it and sets struct_size; the plugin
 * fills the rest. The memory it points to belongs to the plugin and must stay
 * valid until release() is called for it (Theseus copies it right away). */
typedef struct {
  size_t struct_size;                        /* sizeof(theseusSchedProgram_v1_t), set by Theseus */
  uint32_t chunks_per_block;                 /* 1..65536 */
  uint32_t scratch_blocks;                   /* scratch buffer size in blocks */
  uint32_t nchannels;                        /* 1..32 */
  const theseusSchedRankProgram_v1_t* ranks; /* nranks entries */
  void* handle;                              /* for the plugin's own bookkeeping (release) */
} theseusSchedProgram_v1_t;

typedef struct {
  size_t struct_size;    /* sizeof(theseusSchedulePlugin_v1_t) */
  uint32_t abi_version;  /* THESEUS_SCHEDULE_PLUGIN_ABI_V1 */
  const char* name;      /* the schedule's name: 1..128 of [A-Za-z0-9_.-] */
  const char* description;
  uint64_t min_bytes;    /* message sizes the schedule is meant for (a policy hint; 0, 0 = any) */
  uint64_t max_bytes;
  /* Called once after loading. *context is passed to every other call. May be NULL. */
  theseusSchedResult_t (*init)(void** context, theseusSchedLogger_t logger);
  /* Nonzero when the plugin can generate `collective` for `nranks` ranks. Required. */
  int (*supports)(void* context, int collective, int nranks);
  /* Fills *out for *request. On failure returns an error and writes a
   * NUL-terminated explanation into error[0..error_size). Required. */
  theseusSchedResult_t (*generate)(void* context, const theseusSchedRequest_v1_t* request,
                                   theseusSchedProgram_v1_t* out, char* error, size_t error_size);
  /* Frees what generate() allocated for *program (called after every generate,
   * also failed ones). May be NULL. */
  void (*release)(void* context, theseusSchedProgram_v1_t* program);
  /* Called once before unloading. May be NULL. */
  theseusSchedResult_t (*finalize)(void* context);
} theseusSchedulePlugin_v1_t;

#ifdef __cplusplus
}
#endif

#endif /* THESEUS_SCHEDULE_PLUGIN_H_ */
