/*
 * A small NCCL client, built three ways by tests/abi/CMakeLists.txt:
 *   - as C against NVIDIA's reference nccl.h, linked against *our*
 *     libnccl.so.2: a program built for NCCL runs on Theseus;
 *   - as C (-std=c99 -pedantic -Werror) and as C++ (-std=c++11 -pedantic
 *     -Werror) against our include/nccl.h, without any CUDA header.
 * It checks what works without communicators: the version, the exact error
 * strings PyTorch embeds in its exceptions, the last-error text, argument
 * errors, ncclMemAlloc/Free edge cases and the device-API host stubs.
 * argv[1], when given, is the library that must provide the NCCL symbols.
 *
 * Every expectation except the device-API stubs (and Theseus' non-empty
 * last-error texts) was checked against NVIDIA's library: 2.28.9 for the
 * calls that need no GPU (the version and the text of ncclTimeout are 2.30.7's),
 * 2.28.3 on an H200 for ncclMemAlloc/ncclMemFree and
 * ncclCommSplit, where NCCL initialises CUDA before it checks arguments.
 */
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nccl.h>

#ifdef __cplusplus
extern "C" {
#endif
/* Host functions of the device API (declared by nccl_device.h, a CUDA C++
   header); only pointers and a struct of three ints cross the ABI. */
typedef struct {
  int nRanks, rank, stride;
} abiTeam;
struct ncclDevCommRequirements;
struct ncclDevComm;
ncclResult_t ncclDevCommCreate(ncclComm_t comm, const struct ncclDevCommRequirements* reqs,
                               struct ncclDevComm* outDevComm);
ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const struct ncclDevComm* devComm);
ncclResult_t ncclLsaBarrierCreateRequirement(abiTeam team, int nBarriers, void* outHandle, void* outReq);
ncclResult_t ncclGinBarrierCreateRequirement(ncclComm_t comm, abiTeam team, int nBarriers, void* outHandle,
                                             void* outReq);
ncclResult_t ncclLLA2ACreateRequirement(int nBlocks, int nSlots, void* outHandle, void* outReq);
#ifdef __cplusplus
}
#endif

static int failures = 0;

static void check(int ok, const char* what) {
  printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  if (!ok) ++failures;
}

/* A failed call returns `want` and leaves a non-empty last-error text. */
static void checkError(ncclResult_t got, ncclResult_t want, const char* what) {
  const char* last = ncclGetLastError(NULL);
  char line[256];
  snprintf(line, sizeof line, "%s returns %d (got %d), last error \"%s\"", what, (int)want, (int)got,
           last != NULL ? last : "(null)");
  check(got == want && last != NULL && last[0] != '\0', line);
}

/* The library that defines ncclGetVersion must be `expected` (same file). */
static void checkProvider(const char* expected) {
  Dl_info info;
  ncclResult_t (*fn)(int*) = ncclGetVersion;
  void* addr;
  char* got;
  char* want;
  memcpy(&addr, &fn, sizeof addr);
  if (dladdr(addr, &info) == 0 || info.dli_fname == NULL) {
    check(0, "dladdr(ncclGetVersion) finds the providing library");
    return;
  }
  got = realpath(info.dli_fname, NULL);
  want = realpath(expected, NULL);
  printf("     ncclGetVersion comes from %s\n", info.dli_fname);
  check(got != NULL && want != NULL && strcmp(got, want) == 0, "the NCCL symbols come from the library under test");
  free(got);
  free(want);
}

static void versionAndStrings(void) {
  static const char* const kStrings[] = {
      "no error",
      "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
      "unhandled system error (run with NCCL_DEBUG=INFO for details)",
      "internal error - please report this issue to the NCCL developers",
      "invalid argument (run with NCCL_DEBUG=WARN for details)",
      "invalid usage (run with NCCL_DEBUG=WARN for details)",
      "remote process exited or there was a network error",
      "NCCL operation in progress",
  };
  int version = 0, i;
  /* Theseus implements NCCL 2.30.7; programs built against 2.28.9 ... 2.30.7
   * headers see a runtime at least as new as their header. */
  check(ncclGetVersion(&version) == ncclSuccess && version == 23007, "ncclGetVersion == 23007");
  check(version >= NCCL_VERSION_CODE && version == NCCL_VERSION(2, 30, 7), "the runtime is at least the header's version");
  version = 0;
  check(pncclGetVersion(&version) == ncclSuccess && version == 23007, "pncclGetVersion (profiling alias) works");
  for (i = 0; i < 8; ++i) {
    char what[96];
    const char* s = ncclGetErrorString((ncclResult_t)i);
    snprintf(what, sizeof what, "ncclGetErrorString(%d) is NCCL's text", i);
    check(s != NULL && strcmp(s, kStrings[i]) == 0, what);
  }
  check(strcmp(ncclGetErrorString((ncclResult_t)8), "timeout") == 0, "ncclGetErrorString(8) (ncclTimeout, 2.30)");
  check(strcmp(ncclGetErrorString((ncclResult_t)9), "unknown result code") == 0, "ncclGetErrorString(9)");
  check(strcmp(ncclGetErrorString((ncclResult_t)15), "unknown result code") == 0, "ncclGetErrorString(15)");
  check(strcmp(pncclGetErrorString(ncclInvalidUsage), kStrings[5]) == 0, "pncclGetErrorString");
  check(ncclGetLastError(NULL) != NULL, "ncclGetLastError(NULL) is never NULL");
}

static void argumentErrors(void) {
  int n = 0, buf = 0;
  ncclResult_t async = ncclSuccess;
  ncclComm_t child = NULL;
  ncclRedOp_t op = ncclSum;
  void* handle = NULL;
  void* mem = &buf;
  checkError(ncclGetVersion(NULL), ncclInvalidArgument, "ncclGetVersion(NULL)");
  checkError(ncclGetUniqueId(NULL), ncclInvalidArgument, "ncclGetUniqueId(NULL)");
  checkError(ncclCommCount(NULL, &n), ncclInvalidArgument, "ncclCommCount(NULL comm)");
  checkError(ncclCommUserRank(NULL, &n), ncclInvalidArgument, "ncclCommUserRank(NULL comm)");
  checkError(ncclCommCuDevice(NULL, &n), ncclInvalidArgument, "ncclCommCuDevice(NULL comm)");
  checkError(ncclCommGetAsyncError(NULL, &async), ncclInvalidArgument, "ncclCommGetAsyncError(NULL comm)");
  checkError(ncclCommSplit(NULL, 0, 0, &child, NULL), ncclInvalidArgument, "ncclCommSplit(NULL parent)");
  checkError(ncclAllReduce(&buf, &buf, 1, ncclInt32, ncclSum, NULL, NULL), ncclInvalidArgument,
             "ncclAllReduce(NULL comm)");
  checkError(ncclSend(&buf, 1, ncclInt32, 0, NULL, NULL), ncclInvalidArgument, "ncclSend(NULL comm)");
  checkError(ncclRecv(&buf, 1, ncclInt32, 0, NULL, NULL), ncclInvalidArgument, "ncclRecv(NULL comm)");
  checkError(ncclRedOpDestroy(ncclSum, NULL), ncclInvalidArgument, "ncclRedOpDestroy(builtin op)");
  checkError(ncclRedOpCreatePreMulSum(&op, &buf, ncclInt32, ncclScalarHostImmediate, NULL), ncclInvalidArgument,
             "ncclRedOpCreatePreMulSum(NULL comm)");
  checkError(ncclCommRegister(NULL, &buf, sizeof buf, &handle), ncclInvalidArgument, "ncclCommRegister(NULL comm)");
  checkError(ncclCommDeregister(NULL, NULL), ncclInvalidArgument, "ncclCommDeregister(NULL comm)");
  {
    /* NCCL passes the NULL to cudaMalloc and returns its failure (ncclUnhandledCudaError);
       Theseus says ncclInvalidArgument. Either way: an error, and a message. */
    ncclResult_t r = ncclMemAlloc(NULL, 64);
    char what[96];
    snprintf(what, sizeof what, "ncclMemAlloc(NULL ptr) fails (got %d)", (int)r);
    check(r != ncclSuccess && ncclGetLastError(NULL)[0] != '\0', what);
  }
  check(ncclMemAlloc(&mem, 0) == ncclSuccess && mem == NULL, "ncclMemAlloc(size 0) gives NULL");
  check(ncclMemFree(NULL) == ncclSuccess, "ncclMemFree(NULL) succeeds");
  check(ncclCommDestroy(NULL) == ncclSuccess, "ncclCommDestroy(NULL) succeeds");
  check(ncclCommAbort(NULL) == ncclSuccess, "ncclCommAbort(NULL) succeeds");
}

static void deviceApiStubs(void) {
  abiTeam team = {1, 0, 1};
  checkError(ncclDevCommCreate(NULL, NULL, NULL), ncclInvalidUsage, "ncclDevCommCreate");
  checkError(ncclDevCommDestroy(NULL, NULL), ncclInvalidUsage, "ncclDevCommDestroy");
  checkError(ncclLsaBarrierCreateRequirement(team, 1, NULL, NULL), ncclInvalidUsage,
             "ncclLsaBarrierCreateRequirement");
  checkError(ncclGinBarrierCreateRequirement(NULL, team, 1, NULL, NULL), ncclInvalidUsage,
             "ncclGinBarrierCreateRequirement");
  checkError(ncclLLA2ACreateRequirement(1, 1, NULL, NULL), ncclInvalidUsage, "ncclLLA2ACreateRequirement");
}

int main(int argc, char** argv) {
  if (argc > 1) checkProvider(argv[1]);
  versionAndStrings();
  argumentErrors();
  deviceApiStubs();
  printf("%d failure(s)\n", failures);
  return failures == 0 ? 0 : 1;
}
