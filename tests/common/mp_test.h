// Multi-process test harness: a test spawns N real rank processes, each running a
// registered rank function from the same test binary, and checks their exit codes.
//
//   THESEUS_RANK_FN(allreduce_body) {          // ctx: rank, nranks, id, args
//     ncclComm_t comm;
//     RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
//     RANK_CHECK(...);
//     return 0;
//   }
//   TEST(Init, FourRanks) { EXPECT_RANKS_OK(theseus::test::runRanks("allreduce_body", 4)); }
//
// The parent creates the unique id (ncclGetUniqueId) unless told not to, passes
// it to the children in the environment, kills every child when the timeout
// passes, and reports which ranks failed.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "nccl.h"

namespace theseus::test {

struct RankContext {
  int rank = 0;
  int nranks = 1;
  ncclUniqueId id{};
  std::vector<std::string> args;  // SpawnOptions::args
};

using RankFn = int (*)(const RankContext&);

struct Registrar {
  Registrar(const char* name, RankFn fn);
};

struct SpawnOptions {
  int timeoutSec = 120;
  bool createUniqueId = true;                    // parent calls ncclGetUniqueId
  std::map<std::string, std::string> env;        // extra environment for every rank
  std::vector<std::string> args;                 // passed to every rank (RankContext::args)
  // Optional command prefix per rank, e.g. {"ip", "netns", "exec", "ns1"}.
  std::function<std::vector<std::string>(int rank)> prefix;
  // Spawn only these ranks (default: all of 0..nranks-1). Lets tests leave ranks missing.
  std::vector<int> onlyRanks;
};

struct SpawnResult {
  std::vector<int> exitCodes;  // per spawned rank: exit status, 128+signal, or -1 if killed at timeout
  std::vector<int> ranks;      // which rank each entry is
  bool timedOut = false;
  double seconds = 0;
  bool allOk() const;
  std::string describe() const;
};

SpawnResult runRanks(const char* fnName, int nranks, const SpawnOptions& options = {});

// Hex encoding of a unique id (how it travels in the environment).
std::string encodeId(const ncclUniqueId& id);
bool decodeId(const std::string& hex, ncclUniqueId* id);

// True if this process may create network namespaces (root + `ip netns` works).
bool canUseNetns(std::string* whyNot);

}  // namespace theseus::test

#define THESEUS_RANK_FN(name)                                                  \
  static int name(const ::theseus::test::RankContext& ctx);                    \
  static ::theseus::test::Registrar name##_registrar(#name, name);             \
  static int name([[maybe_unused]] const ::theseus::test::RankContext& ctx)

// Inside a rank function: print where and fail the rank.
#define RANK_CHECK(cond)                                                                   \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      fprintf(stderr, "[rank %d] %s:%d: check failed: %s\n", ctx.rank, __FILE__, __LINE__, \
              #cond);                                                                      \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

#define RANK_NCCL(call)                                                                          \
  do {                                                                                           \
    ncclResult_t rank_nccl_r_ = (call);                                                          \
    if (rank_nccl_r_ != ncclSuccess) {                                                           \
      fprintf(stderr, "[rank %d] %s:%d: %s returned %d (%s): %s\n", ctx.rank, __FILE__, __LINE__, \
              #call, rank_nccl_r_, ncclGetErrorString(rank_nccl_r_), ncclGetLastError(nullptr));  \
      return 1;                                                                                  \
    }                                                                                            \
  } while (0)

#define EXPECT_RANKS_OK(result)                        \
  do {                                                 \
    auto rr_ = (result);                               \
    EXPECT_TRUE(rr_.allOk()) << rr_.describe();        \
  } while (0)
