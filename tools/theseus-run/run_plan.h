// Where each rank runs and what it sees: host assignment, network namespace,
// addresses and the environment.
#pragma once

#include <string>
#include <vector>

#include "run_options.h"

namespace theseus::run {

struct RankPlan {
  int rank = 0;
  int host = 0;           // index into Plan::hosts
  int localRank = 0;
  int localSize = 1;
};

struct Plan {
  std::vector<std::string> hosts;   // host names (virtual with --netns)
  std::vector<RankPlan> ranks;
  std::string masterAddr = "127.0.0.1";  // rank 0's address
  int ncclPort = 0;                 // NCCL_COMM_ID port
  int masterPort = 0;               // MASTER_PORT (torch's store)
  // With --netns: each host's namespace and address, and the bridge's namespace
  // (exported to the ranks, so a benchmark can shape its links with tc).
  std::vector<std::string> netns, netnsAddrs;
  std::string netnsBridge;
};

// Assigns ranks to hosts. Without --netns every host must be this machine.
// Returns "" or an error.
std::string planRanks(const Options& o, Plan* plan);

// True for names that denote this machine (localhost, 127.x, ::1, hostname).
bool isLocalHostName(const std::string& name);

// Two distinct free TCP ports on 127.0.0.1 (bind to port 0, read it back).
std::string pickFreePorts(int* a, int* b);

// The environment of `rank`: ours, the -x overrides, then the rank variables.
std::vector<std::string> rankEnvironment(const Options& o, const Plan& plan, int rank);

}  // namespace theseus::run
