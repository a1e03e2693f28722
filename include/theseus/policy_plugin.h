/*
 * Theseus policy plugins: C code that chooses schedules.
 *
 * A policy decides, from the cluster's attributes, which schedule every
 * collective uses for every message size (a decision table). JSON policies
 * (docs/policy-language.md) cover rule-based choices; a plugin can do anything
 * else: a cost model, a learned model, a call to an external scheduler.
 *
 * A policy plugin is a shared library exporting one constant descriptor under
 * a versioned symbol:
 *
 *   const theseusPolicyPlugin_v1_t theseusPolicyPlugin_v1 = {
 *     sizeof(theseusPolicyPlugin_v1_t), THESEUS_POLICY_PLUGIN_ABI_V1, "my_policy", "what it does",
 *     myInit, myDecide, myFinalize,
 *   };
 *
 * THESEUS_POLICY=/path/libmy_policy.so selects it. Theseus looks for the
 * newest descriptor symbol it knows, checks struct_size and abi_version (a
 * mismatch is rejected with a clear error, never called), calls init() once,
 * decide() every policy interval, finalize() before unloading.
 *
 * Only the communicator's leader (rank 0) loads and runs the policy; the table
 * it returns is shipped to every rank and takes effect on all of them at the
 * same collective. decide() therefore need not be deterministic, and it may
 * keep state in its context. Calls into one context are serialised; nothing
 * may throw or longjmp across this interface.
 *
 * Every decision the plugin returns is checked before use: the schedule must
 * exist and serve the collective at the communicator's rank count, the
 * parameters must parse and fit (docs/policy-language.md, "Parameters").
 * Collectives the plugin leaves out keep Theseus' static choice.
 */
#ifndef THESEUS_POLICY_PLUGIN_H_
#define THESEUS_POLICY_PLUGIN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define THESEUS_POLICY_PLUGIN_ABI_V1 1u
#define THESEUS_POLICY_PLUGIN_SYMBOL_V1 "theseusPolicyPlugin_v1"

typedef enum {
  theseusPolicySuccess = 0,
  theseusPolicyInvalidArgument = 1, /* bad input (e.g. a schedule that does not exist) */
  theseusPolicyInternalError = 2,   /* a bug or resource problem inside the plugin */
} theseusPolicyResult_t;

/* Log levels for the logger callback (NCCL_DEBUG levels). */
#define THESEUS_POLICY_LOG_WARN 2
#define THESEUS_POLICY_LOG_INFO 3
#define THESEUS_POLICY_LOG_TRACE 5
/* Logs one line; shown with the plugin's name. */
typedef void (*theseusPolicyLogger_t)(int level, const char* message);

/* Collectives (values of NCCL's ncclFunc_t, as in schedule_plugin.h). */
#define THESEUS_POLICY_BROADCAST 0
#define THESEUS_POLICY_REDUCE 1
#define THESEUS_POLICY_ALLGATHER 2
#define THESEUS_POLICY_REDUCESCATTER 3
#define THESEUS_POLICY_ALLREDUCE 4
#define THESEUS_POLICY_ALLTOALL 8
#define THESEUS_POLICY_SCATTER 9
#define THESEUS_POLICY_GATHER 10

/* Where an attribute came from. */
#define THESEUS_POLICY_SOURCE_PROBE 0
#define THESEUS_POLICY_SOURCE_FILE 1
#define THESEUS_POLICY_SOURCE_API 2
#define THESEUS_POLICY_SOURCE_MERGED 3

/* One attribute of the merged cluster view (docs/attributes.md). */
typedef struct {
  const char* name;  /* "link.0.3.gbps" */
  double value;
  double age_s;      /* seconds since it was measured or set */
  int rank;          /* the rank it came from */
  int source;        /* THESEUS_POLICY_SOURCE_* */
} theseusPolicyAttr_v1_t;

/* One decision: collective, inclusive message-size range (bytes of the larger
 * of the send and receive buffers), schedule and parameters. */
typedef struct {
  int collective;          /* THESEUS_POLICY_* collective */
  uint64_t min_bytes;      /* inclusive */
  uint64_t max_bytes;      /* inclusive; UINT64_MAX = no upper bound */
  char schedule[128];      /* built-in ("ring"), user schedule name, or "file:/abs/path.json" */
  char params[256];        /* "" or "order=0,2,1,3;channels=2;bidirectional=1;pipeline=8" */
  uint64_t slice_bytes;    /* executor slice size; 0 = THESEUS_SLICE_BYTES */
  char why[128];           /* shown in decision logs */
} theseusPolicyDecision_v1_t;

/* How links behave, for estimate_cost(): defaults plus optional per-link
 * values (nranks * nranks entries, [from * nranks + to]; <= 0 = default). */
typedef struct {
  size_t struct_size;        /* sizeof(theseusPolicyLinkModel_v1_t) */
  double alpha_us;           /* per-message latency */
  double beta_gbps;          /* link bandwidth, GB/s */
  double local_gbps;         /* copy/reduce bandwidth; 0 = free */
  const double* link_gbps;   /* may be NULL */
  const double* link_alpha_us; /* may be NULL */
} theseusPolicyLinkModel_v1_t;

/* Services Theseus offers to a deciding plugin (valid during decide() only). */
typedef struct {
  size_t struct_size; /* sizeof(theseusPolicyHost_v1_t) */
  void* ctx;          /* pass to every function below */
  /* Nonzero when `schedule` (built-in or user schedule) serves `collective` with `nranks` ranks. */
  int (*schedule_supports)(void* ctx, const char* schedule, int collective, int nranks);
  /* Alpha-beta estimate (microseconds) of one collective of `bytes` bytes
   * (NCCL's count times the element size) with `schedule` and `params`, on the
   * communicator's ranks and hosts, under `model`. */
  theseusPolicyResult_t (*estimate_cost)(void* ctx, const char* schedule, const char* params, int collective,
                                         uint64_t bytes, const theseusPolicyLinkModel_v1_t* model, double* time_us,
                                         char* error, size_t error_size);
  /* A ring order (nranks entries) that keeps the slowest links out of the
   * ring where possible, computed from the link attributes (what the policy
   * language's "order": "avoid_slow_links" uses). */
  theseusPolicyResult_t (*avoid_slow_links_order)(void* ctx, int bidirectional, int* order);
} theseusPolicyHost_v1_t;

/* What decide() sees. Arrays stay valid during the call only. */
typedef struct {
  size_t struct_size;                        /* sizeof(theseusPolicyInput_v1_t) */
  int nranks;
  int nnodes;
  const int* host_of;                        /* host index of every rank (nranks entries) */
  const char* const* host_names;             /* nnodes names, as in node.<host>.* attributes */
  const theseusPolicyAttr_v1_t* attrs;       /* sorted by name */
  size_t nattrs;
  const uint64_t* sizes;                     /* message sizes of interest (may be empty) */
  size_t nsizes;
  const theseusPolicyDecision_v1_t* current; /* the table in effect (ncurrent entries; 0 before the first) */
  size_t ncurrent;
  double current_age_s;                      /* how long it has been in effect */
  const theseusPolicyHost_v1_t* host;
} theseusPolicyInput_v1_t;

/* Where decide() writes its table: Theseus owns the array. */
typedef struct {
  size_t struct_size;                    /* sizeof(theseusPolicyTable_v1_t) */
  theseusPolicyDecision_v1_t* decisions; /* capacity entries, zeroed */
  size_t capacity;
  size_t count;                          /* set by the plugin */
} theseusPolicyTable_v1_t;

typedef struct {
  size_t struct_size;    /* sizeof(theseusPolicyPlugin_v1_t) */
  uint32_t abi_version;  /* THESEUS_POLICY_PLUGIN_ABI_V1 */
  const char* name;      /* 1..128 of [A-Za-z0-9_.-] */
  const char* description;
  /* Called once after loading; *context is passed to every other call. May be NULL. */
  theseusPolicyResult_t (*init)(void** context, theseusPolicyLogger_t logger);
  /* Fills *out. Ranges of one collective must not overlap. On failure returns
   * an error and writes a NUL-terminated explanation into error. Required. */
  theseusPolicyResult_t (*decide)(void* context, const theseusPolicyInput_v1_t* in, theseusPolicyTable_v1_t* out,
                                  char* error, size_t error_size);
  /* Called once before unloading. May be NULL. */
  theseusPolicyResult_t (*finalize)(void* context);
} theseusPolicyPlugin_v1_t;

#ifdef __cplusplus
}
#endif

#endif /* THESEUS_POLICY_PLUGIN_H_ */
