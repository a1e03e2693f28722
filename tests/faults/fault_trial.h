// Randomized fault trials (issue 14, "faults at any moment").
//
// A trial is one 4-rank job in which one rank, the victim, is killed with SIGKILL at a random
// moment of one phase: init, a run of mixed collectives (over shared memory or TCP), a run
// with a schedule swap every few collectives (so kills land between PREPARE and COMMIT),
// repeated splits, repeated shrinks, or destroy. The kill comes from a timer thread of the
// victim, so it lands wherever the victim's main thread happens to be. Every survivor must
//  - return an error (never hang: the spawner's timeout kills a hung job and fails it) within
//    kSurvivorLimitSec of the phase's start,
//  - name the victim as the rank that failed first ("rank V (host pid P) failed first", or
//    the bootstrap's "rank V ..." during init), never a live neighbour,
//  - recover: ncclCommShrink(NCCL_SHRINK_ABORT) without the victim gives a communicator on
//    which an allreduce returns the right sum (phases after init).
// In the destroy phase survivors only have to return from ncclCommDestroy in time.
// The rank function is `fault_trial`; a trial's parameters travel as its arguments. With
// NCCL_COMM_ID set (netns hosts) the ranks make their unique id from it.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "mp_test.h"

namespace fault_test {

constexpr double kSurvivorLimitSec = 20.0;

struct Trial {
  std::string phase;      // init, collective, swap, split, shrink, destroy
  int victim = 0;         // 0..3 (0 is the leader)
  int delayUs = 0;        // from the phase's start to the kill
  std::string transport;  // THESEUS_TRANSPORT: auto (shared memory) or socket (TCP)
  uint64_t seed = 0;      // the collectives' sizes and kinds
};

// `withInit` false: never the init phase (hosts that bootstrap through NCCL_COMM_ID have their
// root in rank 0's process, so rank 0 dying in init takes the root along without a word).
Trial randomTrial(std::mt19937_64& gen, bool withInit = true);
std::string describe(const Trial& t);

// Runs trial `t` as 4 ranks of `fault_trial` on top of `base` (a netns test's options, say) and
// returns whether it passed: the victim killed, every survivor exiting 0, no timeout.
bool runTrial(const Trial& t, theseus::test::SpawnOptions base, theseus::test::SpawnResult* result);

}  // namespace fault_test
