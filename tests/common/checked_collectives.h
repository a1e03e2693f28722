// A seeded mix of collectives whose results are checked (fault suite, soak): allreduce,
// allgather, reducescatter, broadcast from a drawn root, and a ring of grouped send/recv.
// Rank r contributes r + 1 everywhere, so every result has one right value per element.
// Every rank of a communicator must draw from generators seeded alike: the calls then match.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "nccl.h"

namespace theseus::test {

// Runs one collective of at most a.size() / nranks elements per rank (`a`, `b`: equal sizes).
// A call that returns ncclSuccess with a wrong element sets *wrong.
ncclResult_t checkedCollective(ncclComm_t comm, int rank, int nranks, std::mt19937_64& gen, std::vector<float>& a,
                               std::vector<float>& b, bool* wrong);

// Large messages across every slice and channel: an allreduce of 4 MiB of floats plus an odd
// tail, an allgather of 100,003 floats per rank and a broadcast of 4 MiB from `root`, with
// integer-valued floats so every element is exact. "" when all is right, else what went wrong.
std::string largeCollectivesCheck(ncclComm_t comm, int rank, int nranks, int root);

// Collectives on buffers registered with ncclCommRegister (networks may send them zero-copy):
// allreduce out of place and in place (4 MiB + 3 floats), allgather out of place and in place,
// reducescatter and broadcast, 5 rounds with new values each, every element checked; the buffers
// are deregistered and freed before it returns. "" when all is right, else what went wrong.
std::string registeredCollectivesCheck(ncclComm_t comm, int rank, int nranks);

}  // namespace theseus::test
