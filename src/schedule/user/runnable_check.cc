// checkRunnable (user_schedules.h): the executor's own per-rank template
// builder, run ahead of time on user programs.
#include "exec/rank_template.h"
#include "schedule/analysis.h"
#include "schedule/describe.h"
#include "schedule/user/user_schedules.h"

namespace theseus::schedule::user {

Status checkRunnable(const Program& p) {
  for (int r = 0; r < p.nranks && r < static_cast<int>(p.ranks.size()); ++r) {
    if (p.ranks[r].steps.empty()) continue;
    Result<RankPlan> plan = analyzeRank(p, r);
    if (!plan.isOk()) return plan.status().withContext(programLabel(p));
    Result<std::unique_ptr<exec::RankTemplate>> t = exec::buildRankTemplate(p, r, plan.value());
    if (!t.isOk())
      return invalidArgument("%s: the executor cannot run it: %s", programLabel(p).c_str(),
                             t.status().message().c_str());
  }
  return Status::ok();
}

}  // namespace theseus::schedule::user
