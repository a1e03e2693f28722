// NCCL's algorithm and protocol vocabulary in Theseus' terms: one table that
// NCCL_ALGO, NCCL_PROTO and NCCL tuner plugins all read.
//
// Algorithms -> schedules (the first that serves the collective and rank count):
//   Tree           allreduce, broadcast, reduce -> double_binary_tree, tree
//                  (NCCL's tree is a double binary tree)
//   Ring           ring (allreduce, allgather, reducescatter, broadcast, reduce)
//   PAT            allgather -> recursive_doubling, reducescatter -> halving_doubling
//                  (log-step exchanges, as NCCL's PAT for one rank per node)
//   CollNetDirect, CollNetChain, NVLS, NVLSTree: no equivalent (in-network or
//                  NVLink-switch reduction); never chosen
// Protocols (LL, LL128, Simple) do not change the schedule: Theseus moves data
// with one protocol (flag-ordered slices, like Simple); LL and LL128 run it too.
#pragma once

#include <string>
#include <vector>

#include "schedule/ir.h"

namespace theseus::policy {

constexpr int kNcclAlgorithms = 7;  // NCCL_NUM_ALGORITHMS
constexpr int kNcclProtocols = 3;   // NCCL_NUM_PROTOCOLS

const char* ncclAlgorithmName(int algo);     // "Tree", "Ring", ..., "?" out of range
const char* ncclProtocolName(int proto);     // "LL", "LL128", "Simple", "?"
int ncclAlgorithmIndex(const std::string& name);  // case-insensitive; -1 unknown
int ncclProtocolIndex(const std::string& name);   // case-insensitive; -1 unknown

// The schedules NCCL algorithm `algo` stands for, for collective c (preference order; empty: none).
const std::vector<std::string>& schedulesForNcclAlgorithm(int algo, schedule::Collective c);
// All schedules an algorithm stands for over every collective (for NCCL_ALGO lists).
std::vector<std::string> schedulesForNcclAlgorithm(int algo);

}  // namespace theseus::policy
