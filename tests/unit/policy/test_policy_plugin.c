/*
 * Policy plugins for the loader tests, built once per FAULT_* definition
 * (tests/unit/policy/CMakeLists.txt):
 *   descriptor faults: ABI_VERSION, STRUCT_SIZE, NO_SYMBOL, FUTURE_SYMBOL,
 *                      NULL_DECIDE, BAD_NAME, INIT_FAILS
 *   GOOD: a valid plugin ("test_policy"). What decide() returns depends on the
 *         attribute "test.mode" of the view, so one library covers every
 *         misbehaviour of decide():
 *           0 (or absent)  a valid table that uses the host services
 *           1              a decision with collective 7 (not a collective)
 *           2              overlapping ranges
 *           3              a schedule name without NUL terminator
 *           4              decide() fails with a message
 *           5              count larger than the capacity
 *           6              parameters that do not parse
 */
#include <stdio.h>
#include <string.h>

#include "theseus/policy_plugin.h"

#define EXPORT __attribute__((visibility("default")))

static int g_decides = 0;
static int g_finalized = 0;
EXPORT int testPolicyDecides(void) { return g_decides; }
EXPORT int testPolicyFinalized(void) { return g_finalized; }

static theseusPolicyResult_t testInit(void** context, theseusPolicyLogger_t logger) {
  static int state = 0;
  *context = &state;
  if (logger) logger(THESEUS_POLICY_LOG_INFO, "test policy init");
#ifdef FAULT_INIT_FAILS
  return theseusPolicyInternalError;
#else
  return theseusPolicySuccess;
#endif
}

static double attr(const theseusPolicyInput_v1_t* in, const char* name, double fallback) {
  for (size_t i = 0; i < in->nattrs; ++i)
    if (strcmp(in->attrs[i].name, name) == 0) return in->attrs[i].value;
  return fallback;
}

static theseusPolicyDecision_v1_t* add(theseusPolicyTable_v1_t* out, int coll, uint64_t lo, uint64_t hi,
                                       const char* schedule, const char* params) {
  theseusPolicyDecision_v1_t* d = &out->decisions[out->count++];
  d->collective = coll;
  d->min_bytes = lo;
  d->max_bytes = hi;
  snprintf(d->schedule, sizeof(d->schedule), "%s", schedule);
  snprintf(d->params, sizeof(d->params), "%s", params);
  return d;
}

static theseusPolicyResult_t testDecide(void* context, const theseusPolicyInput_v1_t* in,
                                        theseusPolicyTable_v1_t* out, char* error, size_t error_size) {
  (void)context;
  ++g_decides;
  const theseusPolicyHost_v1_t* host = in->host;
  int mode = (int)attr(in, "test.mode", 0);
  switch (mode) {
    case 1: add(out, 7, 0, UINT64_MAX, "ring", ""); return theseusPolicySuccess;
    case 2:
      add(out, THESEUS_POLICY_ALLREDUCE, 0, 100, "ring", "");
      add(out, THESEUS_POLICY_ALLREDUCE, 50, 200, "tree", "");
      return theseusPolicySuccess;
    case 3: {
      theseusPolicyDecision_v1_t* d = add(out, THESEUS_POLICY_ALLREDUCE, 0, UINT64_MAX, "ring", "");
      memset(d->schedule, 'x', sizeof(d->schedule));
      return theseusPolicySuccess;
    }
    case 4: snprintf(error, error_size, "no idea what to do"); return theseusPolicyInternalError;
    case 5: out->count = out->capacity + 1; return theseusPolicySuccess;
    case 6: add(out, THESEUS_POLICY_ALLREDUCE, 0, UINT64_MAX, "ring", "speed=11"); return theseusPolicySuccess;
    default: break;
  }
  /* The services must answer sensibly. */
  if (!host->schedule_supports(host->ctx, "tree", THESEUS_POLICY_BROADCAST, in->nranks) ||
      host->schedule_supports(host->ctx, "tree", THESEUS_POLICY_ALLGATHER, in->nranks)) {
    snprintf(error, error_size, "schedule_supports gave a wrong answer");
    return theseusPolicyInternalError;
  }
  int order[64];
  if (in->nranks > 64 || host->avoid_slow_links_order(host->ctx, 0, order) != theseusPolicySuccess) {
    snprintf(error, error_size, "avoid_slow_links_order failed");
    return theseusPolicyInternalError;
  }
  char params[256] = "order=";
  for (int i = 0; i < in->nranks; ++i) {
    char num[16];
    snprintf(num, sizeof(num), i ? ",%d" : "%d", order[i]);
    strncat(params, num, sizeof(params) - strlen(params) - 1);
  }
  theseusPolicyDecision_v1_t* d = add(out, THESEUS_POLICY_ALLREDUCE, 0, UINT64_MAX, "ring", params);
  theseusPolicyLinkModel_v1_t model;
  memset(&model, 0, sizeof(model));
  model.struct_size = sizeof(model);
  model.alpha_us = 5;
  model.beta_gbps = 10;
  double us = 0;
  char why[256];
  if (host->estimate_cost(host->ctx, "ring", "", THESEUS_POLICY_ALLREDUCE, 1 << 20, &model, &us, why, sizeof(why)) !=
      theseusPolicySuccess) {
    snprintf(error, error_size, "estimate_cost: %s", why);
    return theseusPolicyInternalError;
  }
  snprintf(d->why, sizeof(d->why), "test: ring %.3f us at 1 MiB; %zu attributes, %zu current", us, in->nattrs,
           in->ncurrent);
  add(out, THESEUS_POLICY_BROADCAST, 0, 1023, "tree", "");
  d = add(out, THESEUS_POLICY_BROADCAST, 1024, UINT64_MAX, "ring", "channels=2");
  d->slice_bytes = 65536;
  return theseusPolicySuccess;
}

static theseusPolicyResult_t testFinalize(void* context) {
  (void)context;
  ++g_finalized;
  return theseusPolicySuccess;
}

#if defined(FAULT_NO_SYMBOL)
EXPORT const theseusPolicyPlugin_v1_t somethingElse = {
#elif defined(FAULT_FUTURE_SYMBOL)
EXPORT const theseusPolicyPlugin_v1_t theseusPolicyPlugin_v3 = {
#else
EXPORT const theseusPolicyPlugin_v1_t theseusPolicyPlugin_v1 = {
#endif
#ifdef FAULT_STRUCT_SIZE
    sizeof(theseusPolicyPlugin_v1_t) + 8,
#else
    sizeof(theseusPolicyPlugin_v1_t),
#endif
#ifdef FAULT_ABI_VERSION
    THESEUS_POLICY_PLUGIN_ABI_V1 + 1,
#else
    THESEUS_POLICY_PLUGIN_ABI_V1,
#endif
#ifdef FAULT_BAD_NAME
    "bad name!",
#else
    "test_policy",
#endif
    "a policy for the loader tests",
    testInit,
#ifdef FAULT_NULL_DECIDE
    NULL,
#else
    testDecide,
#endif
    testFinalize,
};
