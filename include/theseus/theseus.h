/*
 * Theseus extension API: what libnccl.so.2 offers next to NCCL's own API.
 *
 * Everything here is plain C, exported by libnccl.so.2 (symbols theseus*),
 * and follows NCCL's conventions: every function returns ncclResult_t, never
 * throws, and leaves a readable ncclGetLastError() text when it fails. A
 * program that uses these functions still links against NCCL's header; it
 * includes this one in addition.
 *
 * Sections:
 *   1. Runtime attributes (docs/attributes.md)           - src/attrs
 *   2. Policies (docs/policy-language.md)                - src/policy
 *   3. Decision log (docs/epochs.md)                     - src/epoch
 */
#ifndef THESEUS_THESEUS_H_
#define THESEUS_THESEUS_H_

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* 1. Runtime attributes                                                     */
/* ------------------------------------------------------------------------ */
/*
 * Attributes are named numbers that describe the running cluster ("link.0.3.gbps",
 * "node.host1.nic.mlx5_0.healthy", "rank.5.wait_us"; see docs/attributes.md for
 * the naming conventions). Every rank keeps its own; the communicator's leader
 * merges all ranks' attributes and evaluates the selection policy over them, so
 * an attribute set on any rank reaches the policy within one reporting interval
 * (THESEUS_ATTRS_INTERVAL_MS).
 *
 * Names: 1..200 characters, dot-separated components that are non-empty and
 * made of [A-Za-z0-9_:-]. Values must be finite. Attributes set here have
 * source "api"; they replace any earlier value of the same name (from a probe
 * or the THESEUS_ATTRS_FILE file) until something writes that name again.
 */

/* Sets attribute `name` of this rank of `comm` to `value`. */
ncclResult_t theseusSetAttribute(ncclComm_t comm, const char* name, double value);

/* Removes attribute `name` from this rank of `comm` (whatever set it). Not an
 * error when it is not set. */
ncclResult_t theseusClearAttribute(ncclComm_t comm, const char* name);

/* This rank's value of attribute `name`: *isSet = 1 and *value = the value, or
 * *isSet = 0 (and *value untouched) when the rank has no such attribute. */
ncclResult_t theseusGetAttribute(ncclComm_t comm, const char* name, double* value, int* isSet);

/* This rank's attributes as JSON text:
 *   {"version":1,"rank":r,"attributes":{"<name>":{"value":v,"source":"api|file|probe|merged","age_ms":a},...}}
 * Buffer protocol (shared by the text queries below): writes at most `size`
 * bytes including the terminating NUL into `buffer` (which may be NULL when
 * size is 0) and stores the full text length plus one in *needed. When
 * *needed > size the text was truncated: call again with a larger buffer. */
ncclResult_t theseusListAttributes(ncclComm_t comm, char* buffer, size_t size, size_t* needed);

/* ------------------------------------------------------------------------ */
/* 2. Policies                                                               */
/* ------------------------------------------------------------------------ */
/*
 * A policy turns the merged attributes into a decision table (which schedule
 * each collective uses for each message size). THESEUS_POLICY selects it:
 * "static" (built in: size thresholds, the default), a JSON policy file
 * (docs/policy-language.md) or a policy plugin (.so, include/theseus/policy_plugin.h).
 */

/* Loads the policy `spec` (THESEUS_POLICY syntax) the way the leader would and
 * reports whether it is valid. On success writes a one-line description of the
 * policy into `message`; on failure the error (naming the file, the rule and the
 * field), which is also the ncclGetLastError() text. `message` may be NULL when
 * messageSize is 0; the text is truncated to messageSize - 1 characters. */
ncclResult_t theseusCheckPolicy(const char* spec, char* message, size_t messageSize);

/* ------------------------------------------------------------------------ */
/* 3. Decision log (implemented by src/epoch)                                */
/* ------------------------------------------------------------------------ */
/*
 * Every rank records, for each decision table that took effect on `comm`: the
 * collective sequence number at which it took effect, the table version, the
 * schedule and parameters per collective and size range, and the reason. All
 * ranks of a communicator record identical logs (the epoch protocol's
 * invariant). THESEUS_DECISION_LOG=path (%r = rank, %p = pid) writes it to a file.
 *
 * The declarations below are owned by the epoch module; see docs/epochs.md.
 */

/* The decision log of this rank of `comm` as text (one entry per line, the
 * format of THESEUS_DECISION_LOG). Buffer protocol of theseusListAttributes. */
ncclResult_t theseusGetDecisionLog(ncclComm_t comm, char* buffer, size_t size, size_t* needed);

/* The decision table in effect on this rank of `comm` for its next collective:
 * its version and its description (one range per line). Buffer protocol of
 * theseusListAttributes; `version` may be NULL. */
ncclResult_t theseusGetDecisionTable(ncclComm_t comm, uint64_t* version, char* buffer, size_t size, size_t* needed);

/* Where this rank of `comm` stands in the epoch protocol: the sequence number
 * its next collective gets (collectives only; send/recv do not count), the
 * version of the decision table in effect for that collective, and the lease
 * (collectives numbered below it start without waiting for the leader;
 * UINT64_MAX with THESEUS_EPOCH=0). Any of the pointers may be NULL. */
ncclResult_t theseusGetEpochInfo(ncclComm_t comm, uint64_t* nextSeq, uint64_t* version, uint64_t* horizon);

/* ------------------------------------------------------------------------ */
/* 4. Timeouts (implemented by src/comm; see docs/reliability.md)            */
/* ------------------------------------------------------------------------ */

/* One bound, in milliseconds, on every wait of this rank of `comm` from now on:
 * an operation that makes no progress, a wait for the epoch leader, control-plane
 * exchanges, and the creation of its children (split, shrink), which inherit it.
 * The shorter of it and each wait's own timeout applies (THESEUS_STALL_TIMEOUT_MS,
 * THESEUS_EPOCH_WAIT_TIMEOUT_MS, THESEUS_BOOTSTRAP_TIMEOUT_MS). 0 returns to the
 * waits' own timeouts. Communicators start with THESEUS_TIMEOUT_MS, which also
 * bounds their initialisation. A wait that runs out fails the operation (ncclTimeout
 * for callers built against NCCL 2.30, else ncclRemoteError), naming what it waited
 * for. Set the same value on every rank. */
ncclResult_t theseusCommSetTimeout(ncclComm_t comm, int64_t timeoutMs);

/* ------------------------------------------------------------------------ */
/* 5. Flight recorder (implemented by src/telemetry; docs/observability.md)  */
/* ------------------------------------------------------------------------ */

/* The flight recorder of this rank of `comm` as JSON: its last operations
 * (THESEUS_FLIGHT_RECORDER_ENTRIES) with their state (queued, running and what
 * they wait for, done, failed and why) and times — what theseus-doctor reads.
 * Buffer protocol of theseusListAttributes. */
ncclResult_t theseusGetFlightRecorder(ncclComm_t comm, char* buffer, size_t size, size_t* needed);

#ifdef __cplusplus
}
#endif

#endif /* THESEUS_THESEUS_H_ */
