// The doctor's live verdict with real ranks: a rank that straggles in compute (THESEUS_EMULATE)
// is named by the leader as doctor.compute_straggler.<r> and doctor.culprit.rank within seconds,
// and a policy that reads the verdict (policies/doctor.json) roots allreduce trees at it; once the
// straggling ends, the verdict is withdrawn.
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "mp_test.h"
#include "theseus/theseus.h"

using theseus::test::runRanks;
using theseus::test::SpawnOptions;

namespace {

using Clock = std::chrono::steady_clock;

bool attribute(ncclComm_t comm, const char* name, double* value) {
  int set = 0;
  return theseusGetAttribute(comm, name, value, &set) == ncclSuccess && set == 1;
}

std::string decisionLog(ncclComm_t comm) {
  size_t needed = 0;
  if (theseusGetDecisionLog(comm, nullptr, 0, &needed) != ncclSuccess) return "";
  std::string text(needed, '\0');
  if (theseusGetDecisionLog(comm, text.data(), text.size(), &needed) != ncclSuccess) return "";
  return text;
}

}  // namespace

// Allreduces until rank 0 saw what it waits for (or 20 s); rank 0's flag travels in the data.
THESEUS_RANK_FN(doctor_live_straggler) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, ctx.nranks, ctx.id, ctx.rank));
  std::vector<float> a(64 << 10, 0.0f), b(a.size());
  const auto start = Clock::now();
  bool named = false, culprit = false, rerouted = false, withdrawn = false;
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    double v = 0;
    if (ctx.rank == 0) {
      if (!named) named = attribute(comm, "doctor.compute_straggler.2", &v) && v >= 1000;
      culprit = culprit || (attribute(comm, "doctor.culprit.rank", &v) && v == 2);
      rerouted = rerouted || decisionLog(comm).find("the doctor names a compute straggler") != std::string::npos;
      // The straggling ends 6 s after creation (THESEUS_EMULATE's window): the verdict goes.
      withdrawn = named && std::chrono::duration<double>(Clock::now() - start).count() > 6.5 &&
                  !attribute(comm, "doctor.compute_straggler.2", &v);
    }
    const bool done = withdrawn || std::chrono::duration<double>(Clock::now() - start).count() > 20;
    a[0] = ctx.rank == 0 && done ? 1.0f : 0.0f;
    RANK_NCCL(ncclAllReduce(a.data(), b.data(), a.size(), ncclFloat, ncclSum, comm, nullptr));
    if (b[0] > 0.5f) break;
  }
  if (ctx.rank == 0) {
    if (!named || !culprit || !rerouted || !withdrawn)
      fprintf(stderr, "named %d culprit %d rerouted %d withdrawn %d\nlog:\n%s\n", named, culprit, rerouted, withdrawn,
              decisionLog(comm).c_str());
    RANK_CHECK(named);
    RANK_CHECK(culprit);
    RANK_CHECK(rerouted);
    RANK_CHECK(withdrawn);
  }
  RANK_NCCL(ncclCommDestroy(comm));
  return 0;
}

TEST(DoctorLive, TheLeaderNamesAComputeStragglerAndAPolicyReactsToTheVerdict) {
  SpawnOptions o;
  o.env["THESEUS_EMULATE"] = "straggle:2:10ms@t=0s-6s";
  o.env["THESEUS_DOCTOR_INTERVAL_MS"] = "200";
  o.env["THESEUS_POLICY"] = THESEUS_SOURCE_DIR "/policies/doctor.json";
  auto r = runRanks("doctor_live_straggler", 4, o);
  EXPECT_TRUE(r.allOk()) << r.describe();
}
