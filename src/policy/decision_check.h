// Checks that keep policy output runnable: does a schedule serve a
// collective at a rank count, does a built-in accept the parameters.
#pragma once

#include <string>

#include "common/status.h"
#include "policy/decision_table.h"
#include "schedule/builtins.h"

namespace theseus::policy {

// Whether `name` - a built-in, a user schedule (THESEUS_SCHEDULES) or a file
// ("file:/abs/x.json") - serves collective c with n ranks.
bool scheduleServes(const std::string& name, schedule::Collective c, int nranks);
// Whether `name` has a program for this exact request (layout and root too).
bool scheduleServesRequest(const std::string& name, const schedule::GenerateRequest& req);

// Whether a built-in accepts `params` for (c, nranks): it generates rank 0's
// program once per distinct question (remembered process-wide). User
// schedules interpret their parameters themselves: always true.
bool paramsUsable(const std::string& name, schedule::Collective c, int nranks, const schedule::ScheduleParams& params);

// Both of the above, with an error that says what is wrong.
Status checkDecision(const Decision& d, schedule::Collective c, int nranks);

}  // namespace theseus::policy
