// One rank of the recovery demo (scripts/recovery-demo.sh, ranks under theseus-run --keep-going):
// a training-like loop of allreduces whose results are checked; at step --kill-step, rank
// --kill-rank is killed with SIGKILL (as the OOM killer or a failing node would). The survivors'
// next allreduce fails, every one of them naming the dead rank; they shrink it away with
// ncclCommShrink(NCCL_SHRINK_ABORT) and finish the loop on the smaller communicator. The lowest
// surviving rank prints what happened and how long each part took.
//
// Usage: theseus-recovery-demo [--steps N] [--kill-rank R] [--kill-step S] [--bytes B]
// Environment: THESEUS_RANK/THESEUS_NRANKS (or RANK/WORLD_SIZE) and NCCL_COMM_ID.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../common/rank_env.h"
#include "nccl.h"

namespace {

using theseus::tools::envInt;
using theseus::tools::ncclOk;
using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

struct Options {
  int steps = 60, killRank = 2, killStep = 20;
  size_t bytes = 1 << 20;
};

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    long v = strtol(argv[i + 1], nullptr, 10);
    if (a == "--steps") o->steps = static_cast<int>(v);
    else if (a == "--kill-rank") o->killRank = static_cast<int>(v);
    else if (a == "--kill-step") o->killStep = static_cast<int>(v);
    else if (a == "--bytes") o->bytes = static_cast<size_t>(v);
    else return false;
  }
  return argc % 2 == 1 && o->steps > 0 && o->killStep >= 0 && o->killStep < o->steps && o->bytes >= 4;
}

// Allreduce of (my rank + 1) in every element; true when the sum is right.
ncclResult_t step(ncclComm_t comm, int rank, int nranks, std::vector<float>& buf, bool* right) {
  std::fill(buf.begin(), buf.end(), static_cast<float>(rank + 1));
  ncclResult_t r = ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr);
  *right = true;
  for (float x : buf) *right = *right && x == static_cast<float>(nranks * (nranks + 1) / 2);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  const int rank = envInt("THESEUS_RANK", "RANK"), nranks = envInt("THESEUS_NRANKS", "WORLD_SIZE");
  if (!parse(argc, argv, &o) || rank < 0 || nranks < 2 || o.killRank < 0 || o.killRank >= nranks) {
    fprintf(stderr, "usage: theseus-recovery-demo [--steps N] [--kill-rank R] [--kill-step S] [--bytes B]\n"
                    "(2 or more ranks, THESEUS_RANK/THESEUS_NRANKS and NCCL_COMM_ID set, e.g. by theseus-run)\n");
    return 2;
  }
  const bool reporter = rank == (o.killRank == 0 ? 1 : 0);
  ncclUniqueId id;
  ncclComm_t comm;
  if (!ncclOk(ncclGetUniqueId(&id), "ncclGetUniqueId", rank) ||
      !ncclOk(ncclCommInitRank(&comm, nranks, id, rank), "ncclCommInitRank", rank))
    return 1;
  std::vector<float> buf(o.bytes / sizeof(float));
  int size = nranks, me = rank;
  auto start = Clock::now();
  for (int s = 0; s < o.steps; ++s) {
    if (s == o.killStep && rank == o.killRank) raise(SIGKILL);
    bool right = false;
    auto t0 = Clock::now();
    ncclResult_t r = step(comm, me, size, buf, &right);
    if (r == ncclSuccess && !right) {
      fprintf(stderr, "[rank %d] step %d: wrong result\n", rank, s);
      return 1;
    }
    if (r == ncclSuccess) continue;
    // The failure: every survivor names the same rank; shrink it away and go on.
    const std::string why = ncclGetLastError(nullptr);
    const double failMs = msSince(t0);
    if (reporter) {
      printf("step %d: %d ranks, %.1f ms per step so far\n", s, size, msSince(start) / s);
      printf("step %d: allreduce failed after %.1f ms: %s\n", s, failMs, why.c_str());
    }
    if (why.find("rank " + std::to_string(o.killRank) + " (") == std::string::npos) {
      fprintf(stderr, "[rank %d] the error does not name rank %d: %s\n", rank, o.killRank, why.c_str());
      return 1;
    }
    auto t1 = Clock::now();
    ncclComm_t smaller;
    int excluded[1] = {o.killRank};
    if (!ncclOk(ncclCommShrink(comm, excluded, 1, &smaller, nullptr, NCCL_SHRINK_ABORT), "ncclCommShrink", rank))
      return 1;
    (void)ncclCommDestroy(comm);
    comm = smaller;
    ncclCommCount(comm, &size);
    ncclCommUserRank(comm, &me);
    if (reporter) printf("step %d: shrunk to %d ranks in %.1f ms (ncclCommShrink, NCCL_SHRINK_ABORT); going on\n", s, size,
                         msSince(t1));
    --s;  // redo this step on the smaller communicator
    start = Clock::now();
    o.killStep = -1;
  }
  if (reporter) printf("done: %d steps, the last ones on %d ranks, every result checked (%.1f ms per step after "
                       "the shrink)\n", o.steps, size, msSince(start) / std::max(1, o.steps - 1));
  return ncclOk(ncclCommDestroy(comm), "ncclCommDestroy", rank) ? 0 : 1;
}
