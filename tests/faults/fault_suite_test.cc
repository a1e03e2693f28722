// The randomized fault suite (fault_trial.h): THESEUS_FAULT_TRIALS trials (default 12, the
// short sample `make test` runs; `make test-faults` runs 240), each a 4-rank job with one rank
// killed at a random moment of a random phase. THESEUS_FAULT_SEED replays a run (the seed is
// printed first); every failing trial prints its parameters.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "fault_trial.h"
#include "mp_test.h"
#include "scoped_env.h"

using theseus::test::runRanks;
using theseus::test::SpawnOptions;

namespace {

using theseus::test::ScopedEnv;

int envInt(const char* name, int fallback) {
  const char* v = getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

struct Tally {
  int trials = 0, failed = 0;
  double maxSeconds = 0;
};

TEST(Faults, AnyRankKilledAtAnyMoment) {
  const int trials = envInt("THESEUS_FAULT_TRIALS", 12);
  const char* seedText = getenv("THESEUS_FAULT_SEED");
  const uint64_t seed = seedText != nullptr ? std::strtoull(seedText, nullptr, 10) : std::random_device{}();
  fprintf(stderr, "fault suite: %d trials, THESEUS_FAULT_SEED=%llu\n", trials, static_cast<unsigned long long>(seed));
  // The root of each trial lives in this process: its timeout bounds a rank that died before joining.
  ScopedEnv bootstrapTimeout("THESEUS_BOOTSTRAP_TIMEOUT_MS", "5000");
  std::mt19937_64 gen(seed);
  std::map<std::string, Tally> byPhase;
  for (int i = 0; i < trials; ++i) {
    const fault_test::Trial t = fault_test::randomTrial(gen);
    theseus::test::SpawnResult r;
    const bool ok = fault_test::runTrial(t, SpawnOptions{}, &r);
    Tally& tally = byPhase[t.phase];
    ++tally.trials;
    tally.maxSeconds = std::max(tally.maxSeconds, r.seconds);
    if (!ok) {
      ++tally.failed;
      ADD_FAILURE() << "trial " << i << " (" << fault_test::describe(t) << "): " << r.describe();
    }
  }
  for (const auto& [phase, tally] : byPhase)
    fprintf(stderr, "fault suite: %-10s %3d trials, %d failed, slowest %.2f s\n", phase.c_str(), tally.trials,
            tally.failed, tally.maxSeconds);
}

}  // namespace
