// checkRunnable (user_schedules.h): the rules the executor relies on beyond
// what the verifier proves, checked ahead of time on user programs with the
// same analysis the executor's template builder uses.
#include "schedule/analysis.h"
#include "schedule/describe.h"
#include "schedule/raw_input.h"
#include "schedule/user/user_schedules.h"

namespace theseus::schedule::user {

Status checkRunnable(const Program& p) {
  for (int r = 0; r < p.nranks && r < static_cast<int>(p.ranks.size()); ++r) {
    if (p.ranks[r].steps.empty()) continue;
    Result<RankPlan> plan = analyzeRank(p, r);
    if (!plan.isOk()) return plan.status().withContext(programLabel(p));
    Result<std::vector<RawInputUse>> raw = rawInputUses(p, r);
    if (!raw.isOk())
      return invalidArgument("%s: the executor cannot run it: %s", programLabel(p).c_str(),
                             raw.status().message().c_str());
  }
  return Status::ok();
}

}  // namespace theseus::schedule::user
