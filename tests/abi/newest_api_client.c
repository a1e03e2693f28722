/*
 * A client built against the newest nccl.h (ours, NCCL 2.30.7) that calls
 * every entry point NCCL added after 2.28.9 and checks the result: real
 * results where Theseus implements the call, the documented ncclInvalidUsage
 * with a ncclGetLastError text where it cannot apply (one-sided operations,
 * GIN resources). Strict C99, no CUDA header. It grows a one-rank communicator
 * to two by starting itself again as the joining rank (argv: --join <id hex>).
 * argv[1], when not --join, is the library under test (as in abi_client.c).
 */
#define _POSIX_C_SOURCE 200809L
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <nccl.h>

/* Host functions of the device API that nccl_device/core.h declares (a CUDA
   C++ header): own declarations with the same ABI. */
typedef struct {
  int nRanks, rank, stride;
} apiTeam;
typedef struct {
  void* mcBasePtr;
} apiMultimemHandle;
/* ncclCommProperties as 2.29.5+ lays it out (56 bytes) and as 2.29.2/2.29.3 did (40 bytes). */
typedef struct {
  size_t size;
  unsigned magic, version;
  int rank, nRanks, cudaDev, nvmlDev;
  unsigned char deviceApiSupport, multimemSupport;
  int ginType, nLsaTeams;
  unsigned char hostRmaSupport;
  int railedGinType;
} apiProperties;
typedef struct {
  size_t size;
  unsigned magic, version;
  int rank, nRanks, cudaDev, nvmlDev;
  unsigned char deviceApiSupport, multimemSupport, ginType;
} apiProperties22902;
ncclResult_t ncclCommQueryProperties(ncclComm_t comm, void* props);
ncclResult_t ncclGetLsaDevicePointer(ncclWindow_t window, size_t offset, int lsaRank, void** outPtr);
ncclResult_t ncclGetLsaMultimemDevicePointer(ncclWindow_t window, size_t offset, void** outPtr);
ncclResult_t ncclGetMultimemDevicePointer(ncclWindow_t window, size_t offset, apiMultimemHandle multimem,
                                          void** outPtr);
ncclResult_t ncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer, void** outPtr);
ncclResult_t ncclGinOutboxCreateRequirement(int nBlocks, int size_log2, void* outHandle, void* outReq);
ncclResult_t ncclGinInboxA2ACreateRequirement(apiTeam peers, int nBlocks, int size_log2, void* outHandle,
                                              void* outReq);

static int failures = 0;

static void check(int ok, const char* what) {
  printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  if (!ok) ++failures;
}

/* A refused call returns `want` and the last error mentions `text`. */
static void checkError(ncclResult_t got, ncclResult_t want, const char* text, const char* what) {
  const char* last = ncclGetLastError(NULL);
  char line[512];
  int ok = got == want && last != NULL && strstr(last, text) != NULL;
  snprintf(line, sizeof line, "%s returns %d (got %d), last error \"%s\"", what, (int)want, (int)got,
           last != NULL ? last : "(null)");
  check(ok, line);
}

static void toHex(const ncclUniqueId* id, char* out) {
  int i;
  for (i = 0; i < NCCL_UNIQUE_ID_BYTES; ++i) sprintf(out + 2 * i, "%02x", (unsigned char)id->internal[i]);
}

static int fromHex(const char* hex, ncclUniqueId* id) {
  int i;
  unsigned v;
  if (strlen(hex) != 2 * NCCL_UNIQUE_ID_BYTES) return 0;
  for (i = 0; i < NCCL_UNIQUE_ID_BYTES; ++i) {
    if (sscanf(hex + 2 * i, "%2x", &v) != 1) return 0;
    id->internal[i] = (char)v;
  }
  return 1;
}

/* Sums each rank's number over `comm` and checks the result. */
static int allReduceRanks(ncclComm_t comm) {
  int rank = -1, n = 0, buf[64], i, ok = 1;
  if (ncclCommUserRank(comm, &rank) != ncclSuccess || ncclCommCount(comm, &n) != ncclSuccess) return 0;
  for (i = 0; i < 64; ++i) buf[i] = rank;
  if (ncclAllReduce(buf, buf, 64, ncclInt32, ncclSum, comm, NULL) != ncclSuccess) return 0;
  for (i = 0; i < 64; ++i) ok &= buf[i] == n * (n - 1) / 2;
  return ok;
}

static int joinGrow(const char* hex) {
  ncclUniqueId id;
  ncclComm_t grown = NULL;
  if (!fromHex(hex, &id)) return 2;
  if (ncclCommGrow(NULL, 2, &id, 1, &grown, NULL) != ncclSuccess) return 3;
  if (!allReduceRanks(grown)) return 4;
  return ncclCommDestroy(grown) == ncclSuccess ? 0 : 5;
}

static void parameters(void) {
  ncclParamHandle_t h = NULL, h2 = NULL;
  int8_t i8;
  int16_t i16;
  int32_t i32;
  int64_t i64;
  uint8_t u8;
  uint16_t u16;
  uint32_t u32;
  uint64_t u64;
  const char* s = NULL;
  const char** keys = NULL;
  char buf[8];
  int n = 0, len = 0, i, sawBuffsize = 0, sawSlice = 0;
  setenv("THESEUS_SLICE_BYTES", "65536", 1);
  check(ncclParamBind(&h, "THESEUS_SLICE_BYTES") == ncclSuccess && h != NULL, "ncclParamBind(THESEUS_SLICE_BYTES)");
  check(ncclParamBind(&h2, "THESEUS_SLICE_BYTES") == ncclSuccess && h2 == h, "ncclParamBind: one handle per key");
  check(ncclParamGetI32(h, &i32) == ncclSuccess && i32 == 65536, "ncclParamGetI32 reads the environment's value");
  check(ncclParamGetI64(h, &i64) == ncclSuccess && i64 == 65536, "ncclParamGetI64");
  check(ncclParamGetU32(h, &u32) == ncclSuccess && u32 == 65536u, "ncclParamGetU32");
  check(ncclParamGetU64(h, &u64) == ncclSuccess && u64 == 65536u, "ncclParamGetU64");
  checkError(ncclParamGetI8(h, &i8), ncclInvalidArgument, "does not fit", "ncclParamGetI8(65536)");
  checkError(ncclParamGetI16(h, &i16), ncclInvalidArgument, "does not fit", "ncclParamGetI16(65536)");
  checkError(ncclParamGetU8(h, &u8), ncclInvalidArgument, "does not fit", "ncclParamGetU8(65536)");
  checkError(ncclParamGetU16(h, &u16), ncclInvalidArgument, "does not fit", "ncclParamGetU16(65536)");
  check(ncclParamGetStr(h, &s) == ncclSuccess && strcmp(s, "65536") == 0, "ncclParamGetStr");
  check(ncclParamGet(h, buf, sizeof buf, &len) == ncclSuccess && len == 6 && strcmp(buf, "65536") == 0,
        "ncclParamGet copies the text");
  check(ncclParamGet(h, buf, 3, &len) == ncclSuccess && len == 6 && strcmp(buf, "65") == 0,
        "ncclParamGet truncates and says the size needed");
  /* NCCL's keys leave the prefix off. */
  check(ncclParamBind(&h, "BUFFSIZE") == ncclSuccess && ncclParamGetI64(h, &i64) == ncclSuccess && i64 == -1,
        "ncclParamBind(BUFFSIZE) is NCCL_BUFFSIZE, default -1");
  checkError(ncclParamGetU64(h, &u64), ncclInvalidArgument, "does not fit", "ncclParamGetU64(-1)");
  setenv("NCCL_ALGO", "ring", 1);
  check(ncclParamGetParameter("ALGO", &s, &len) == ncclSuccess && strcmp(s, "ring") == 0 && len == 4,
        "ncclParamGetParameter(ALGO)");
  unsetenv("NCCL_ALGO");
  checkError(ncclParamGetParameter("ALGO", &s, &len), ncclInvalidArgument, "has no value",
             "ncclParamGetParameter of an unset parameter without default");
  checkError(ncclParamBind(&h, "NO_SUCH_PARAMETER"), ncclInvalidArgument, "no parameter", "ncclParamBind(unknown)");
  check(ncclParamGetAllParameterKeys(&keys, &n) == ncclSuccess && n > 50, "ncclParamGetAllParameterKeys");
  for (i = 0; i < n; ++i) {
    sawBuffsize |= strcmp(keys[i], "BUFFSIZE") == 0;
    sawSlice |= strcmp(keys[i], "THESEUS_SLICE_BYTES") == 0;
  }
  check(sawBuffsize && sawSlice, "the keys include BUFFSIZE and THESEUS_SLICE_BYTES");
  ncclParamDumpAll();
  unsetenv("THESEUS_SLICE_BYTES");
}

static void configs(void) {
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  check(c.size == 96 && c.version == 23007, "NCCL_CONFIG_INITIALIZER is the 96-byte 2.30.7 config");
  check(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
  c.graphUsageMode = 3;
  checkError(ncclCommInitRankConfig(&comm, 1, id, 0, &c), ncclInvalidArgument, "graphUsageMode",
             "config.graphUsageMode = 3");
  c.graphUsageMode = 1;
  c.numRmaCtx = -1;
  checkError(ncclCommInitRankConfig(&comm, 1, id, 0, &c), ncclInvalidArgument, "numRmaCtx", "config.numRmaCtx = -1");
  c.numRmaCtx = 0;
  c.maxP2pPeers = 0;
  checkError(ncclCommInitRankConfig(&comm, 1, id, 0, &c), ncclInvalidArgument, "maxP2pPeers",
             "config.maxP2pPeers = 0");
  c.maxP2pPeers = 2;
  c.graphStreamOrdering = 2;
  checkError(ncclCommInitRankConfig(&comm, 1, id, 0, &c), ncclInvalidArgument, "graphStreamOrdering",
             "config.graphStreamOrdering = 2");
  /* A 2.30.4 caller's graphStreamOrdering bytes are padding: ignored. */
  c.version = NCCL_VERSION(2, 30, 4);
  check(ncclCommInitRankConfig(&comm, 1, id, 0, &c) == ncclSuccess && allReduceRanks(comm),
        "a 2.30.4 config with garbage in its padding works");
  check(ncclCommDestroy(comm) == ncclSuccess, "ncclCommDestroy");
}

static void properties(ncclComm_t comm) {
  apiProperties p;
  apiProperties22902 old;
  memset(&p, 0x7f, sizeof p);
  p.size = sizeof p;
  p.magic = NCCL_API_MAGIC;
  p.version = NCCL_VERSION_CODE;
  check(sizeof p == 56 && sizeof old == 40, "the test's property structs have NCCL's sizes");
  check(ncclCommQueryProperties(comm, &p) == ncclSuccess && p.rank == 0 && p.nRanks == 1 && !p.deviceApiSupport &&
            !p.multimemSupport && p.ginType == 0 && p.nLsaTeams == 1 && !p.hostRmaSupport && p.railedGinType == 0,
        "ncclCommQueryProperties (2.30 layout)");
  memset(&old, 0x7f, sizeof old);
  old.size = sizeof old;
  old.magic = NCCL_API_MAGIC;
  old.version = NCCL_VERSION(2, 29, 2);
  check(ncclCommQueryProperties(comm, &old) == ncclSuccess && old.nRanks == 1 && old.ginType == 0,
        "ncclCommQueryProperties (2.29.2 layout, nothing written past 40 bytes)");
  p.magic = 0;
  checkError(ncclCommQueryProperties(comm, &p), ncclInvalidUsage, "initializer", "ncclCommQueryProperties(no magic)");
  p.magic = NCCL_API_MAGIC;
  p.version = NCCL_VERSION(2, 31, 0);
  checkError(ncclCommQueryProperties(comm, &p), ncclInvalidUsage, "newer than this library",
             "ncclCommQueryProperties(a newer header)");
}

static void windows(ncclComm_t comm) {
  static char buffer[8192];
  ncclWindow_t win = (ncclWindow_t)1;
  void* p = NULL;
  apiMultimemHandle none = {NULL}, some = {buffer};
  ncclWaitSignalDesc_t desc = {1, 0, 0, 0};
  checkError(ncclCommWindowRegister(comm, NULL, 0, &win, NCCL_WIN_DEFAULT), ncclInvalidArgument, "invalid",
             "ncclCommWindowRegister(NULL, 0)");
  check(win == NULL, "... and *win is NULL");
  check(ncclCommWindowRegister(comm, buffer, sizeof buffer, &win, NCCL_WIN_COLL_SYMMETRIC | NCCL_WIN_STRICT_ORDERING) ==
                ncclSuccess && win != NULL,
        "ncclCommWindowRegister(NCCL_WIN_STRICT_ORDERING)");
  check(ncclWinGetUserPtr(comm, win, &p) == ncclSuccess && p == buffer, "ncclWinGetUserPtr");
  check(ncclGetLsaDevicePointer(win, 16, 0, &p) == ncclSuccess && p == buffer + 16, "ncclGetLsaDevicePointer(self)");
  checkError(ncclGetLsaDevicePointer(win, 0, 1, &p), ncclInvalidArgument, "lsaRank", "ncclGetLsaDevicePointer(1)");
  check(ncclGetPeerDevicePointer(win, 8, 0, &p) == ncclSuccess && p == buffer + 8, "ncclGetPeerDevicePointer(self)");
  checkError(ncclGetPeerDevicePointer(win, 0, 1, &p), ncclInvalidArgument, "peer", "ncclGetPeerDevicePointer(2nd)");
  check(ncclGetLsaMultimemDevicePointer(win, 0, &p) == ncclSuccess && p == NULL,
        "ncclGetLsaMultimemDevicePointer: no multimem, NULL");
  check(ncclGetMultimemDevicePointer(win, 0, some, &p) == ncclSuccess && p == NULL, "ncclGetMultimemDevicePointer");
  checkError(ncclGetMultimemDevicePointer(win, 0, none, &p), ncclInvalidArgument, "mcBasePtr",
             "ncclGetMultimemDevicePointer(NULL mcBasePtr)");
  checkError(ncclGetLsaDevicePointer((ncclWindow_t)buffer, 0, 0, &p), ncclInvalidArgument, "not a registered window",
             "ncclGetLsaDevicePointer(garbage window)");
  /* One-sided operations: argument errors as NCCL, then the documented refusal. */
  checkError(ncclPutSignal(buffer, 16, ncclChar, 0, win, 0, 1, 0, 0, comm, NULL), ncclInvalidArgument, "sigIdx",
             "ncclPutSignal(sigIdx 1)");
  checkError(ncclPutSignal(buffer, 16, ncclChar, 0, win, 0, 0, 0, 0, comm, NULL), ncclInvalidUsage, "one-sided",
             "ncclPutSignal");
  checkError(ncclSignal(0, 0, 0, 0, comm, NULL), ncclInvalidUsage, "one-sided", "ncclSignal");
  checkError(ncclSignal(3, 0, 0, 0, comm, NULL), ncclInvalidArgument, "peer", "ncclSignal(peer 3)");
  checkError(ncclWaitSignal(1, &desc, comm, NULL), ncclInvalidUsage, "one-sided", "ncclWaitSignal");
  checkError(ncclWaitSignal(1, NULL, comm, NULL), ncclInvalidArgument, "NULL", "ncclWaitSignal(NULL descs)");
  check(ncclCommWindowDeregister(comm, win) == ncclSuccess, "ncclCommWindowDeregister");
  checkError(ncclWinGetUserPtr(comm, win, &p), ncclInvalidArgument, "not registered", "ncclWinGetUserPtr(stale)");
}

static void suspendResume(ncclComm_t comm) {
  uint64_t before = 0, v = 7;
  check(allReduceRanks(comm), "an allreduce before suspending");
  /* One rank needs no scratch or FIFOs; the multi-rank test (lifecycle_mp_test) checks real byte counts. */
  check(ncclCommMemStats(comm, ncclStatGpuMemSuspend, &before) == ncclSuccess, "ncclCommMemStats(Suspend)");
  check(ncclCommSuspend(comm, NCCL_SUSPEND_MEM) == ncclSuccess, "ncclCommSuspend(NCCL_SUSPEND_MEM)");
  check(ncclCommMemStats(comm, ncclStatGpuMemSuspended, &v) == ncclSuccess && v == 1, "MemStats(Suspended) == 1");
  check(ncclCommMemStats(comm, ncclStatGpuMemSuspend, &v) == ncclSuccess && v == 0, "nothing left to release");
  checkError(ncclAllReduce(&v, &v, 1, ncclUint64, ncclSum, comm, NULL), ncclInvalidUsage, "suspended",
             "a collective while suspended");
  check(ncclCommResume(comm) == ncclSuccess, "ncclCommResume");
  check(ncclCommMemStats(comm, ncclStatGpuMemSuspend, &v) == ncclSuccess && v == before, "the scratch is back");
  check(ncclCommMemStats(comm, ncclStatGpuMemPersist, &v) == ncclSuccess, "MemStats(Persist)");
  check(ncclCommMemStats(comm, ncclStatGpuMemTotal, &v) == ncclSuccess && v >= before, "MemStats(Total)");
  check(allReduceRanks(comm), "an allreduce after resuming");
}

static void grow(ncclComm_t comm, const char* self) {
  ncclUniqueId id;
  char hex[2 * NCCL_UNIQUE_ID_BYTES + 1];
  char* argv[4];
  pid_t pid;
  int status = -1;
  ncclComm_t grown = NULL;
  int n = 0, rank = -1;
  extern char** environ;
  check(ncclCommGetUniqueId(comm, &id) == ncclSuccess, "ncclCommGetUniqueId");
  toHex(&id, hex);
  argv[0] = (char*)self;
  argv[1] = (char*)"--join";
  argv[2] = hex;
  argv[3] = NULL;
  check(posix_spawn(&pid, self, NULL, NULL, argv, environ) == 0, "start the joining rank");
  check(ncclCommGrow(comm, 2, &id, -1, &grown, NULL) == ncclSuccess, "ncclCommGrow(1 -> 2 ranks)");
  check(grown != NULL && ncclCommCount(grown, &n) == ncclSuccess && n == 2 &&
            ncclCommUserRank(grown, &rank) == ncclSuccess && rank == 0,
        "the grown communicator has 2 ranks, this one keeps rank 0");
  check(grown != NULL && allReduceRanks(grown), "an allreduce on the grown communicator");
  check(ncclCommDestroy(grown) == ncclSuccess, "ncclCommDestroy(grown)");
  check(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
        "the joining rank grew, reduced and exited cleanly");
}

int main(int argc, char** argv) {
  ncclComm_t comm = NULL;
  apiTeam team = {1, 0, 1};
  char scratch[64];
  if (argc == 3 && strcmp(argv[1], "--join") == 0) return joinGrow(argv[2]);
  check(strcmp(ncclGetErrorString(ncclTimeout), "timeout") == 0, "ncclGetErrorString(ncclTimeout)");
  parameters();
  configs();
  check(ncclCommInitAll(&comm, 1, NULL) == ncclSuccess, "ncclCommInitAll(1)");
  properties(comm);
  windows(comm);
  suspendResume(comm);
  checkError(ncclGinOutboxCreateRequirement(1, 12, scratch, scratch), ncclInvalidUsage, "device API",
             "ncclGinOutboxCreateRequirement");
  checkError(ncclGinInboxA2ACreateRequirement(team, 1, 12, scratch, scratch), ncclInvalidUsage, "device API",
             "ncclGinInboxA2ACreateRequirement");
  grow(comm, "/proc/self/exe");
  check(ncclCommDestroy(comm) == ncclSuccess, "ncclCommDestroy");
  printf("%d failure(s)\n", failures);
  return failures == 0 ? 0 : 1;
}
