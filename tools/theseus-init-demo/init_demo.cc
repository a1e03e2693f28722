// One rank of the communicator demo that `make run` starts four times
// (scripts/demo.sh): every rank creates the world communicator from
// NCCL_COMM_ID, splits it into even and odd ranks, prints what each
// communicator reports, and tears everything down. Uses only the NCCL API.
//
// Environment: THESEUS_RANK/THESEUS_NRANKS (or RANK/WORLD_SIZE, as set by
// theseus-run or torchrun) and NCCL_COMM_ID=<ip>:<port>.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "../common/rank_env.h"
#include "nccl.h"

namespace {

using theseus::tools::envInt;

using theseus::tools::ncclOk;

bool describe(const char* name, ncclComm_t comm, int worldRank) {
  int rank = -1, size = -1, dev = -1;
  if (!ncclOk(ncclCommUserRank(comm, &rank), "ncclCommUserRank", worldRank) ||
      !ncclOk(ncclCommCount(comm, &size), "ncclCommCount", worldRank) ||
      !ncclOk(ncclCommCuDevice(comm, &dev), "ncclCommCuDevice", worldRank))
    return false;
  printf("[rank %d] %-5s communicator: rank %d of %d, device %d\n", worldRank, name, rank, size, dev);
  fflush(stdout);
  return true;
}

}  // namespace

int main() {
  const int rank = envInt("THESEUS_RANK", "RANK");
  const int nranks = envInt("THESEUS_NRANKS", "WORLD_SIZE");
  if (rank < 0 || nranks < 1 || rank >= nranks || getenv("NCCL_COMM_ID") == nullptr) {
    fprintf(stderr, "theseus-init-demo: set THESEUS_RANK, THESEUS_NRANKS and NCCL_COMM_ID (theseus-run does)\n");
    return 2;
  }
  int version = 0;
  ncclGetVersion(&version);
  if (rank == 0) printf("[rank 0] libnccl reports version %d\n", version);

  ncclUniqueId id;  // from NCCL_COMM_ID: identical on every rank, no exchange needed
  ncclComm_t world = nullptr, half = nullptr;
  if (!ncclOk(ncclGetUniqueId(&id), "ncclGetUniqueId", rank) ||
      !ncclOk(ncclCommInitRank(&world, nranks, id, rank), "ncclCommInitRank", rank) ||
      !describe("world", world, rank))
    return 1;
  const char* parity = rank % 2 == 0 ? "even" : "odd";
  if (!ncclOk(ncclCommSplit(world, rank % 2, rank, &half, nullptr), "ncclCommSplit", rank) ||
      !describe(parity, half, rank))
    return 1;
  if (!ncclOk(ncclCommFinalize(half), "ncclCommFinalize", rank) || !ncclOk(ncclCommDestroy(half), "ncclCommDestroy", rank) ||
      !ncclOk(ncclCommFinalize(world), "ncclCommFinalize", rank) || !ncclOk(ncclCommDestroy(world), "ncclCommDestroy", rank))
    return 1;
  printf("[rank %d] destroyed both communicators\n", rank);
  return 0;
}
