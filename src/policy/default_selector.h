// The default schedule choice (size thresholds), used until a policy decides.
// It depends only on the request and on settings that are identical on every
// rank (NCCL_ALGO, rank and node counts), so all ranks choose alike.
#pragma once

#include <string>

#include "policy/algo_filter.h"
#include "schedule/builtins.h"

namespace theseus::policy {

struct Choice {
  std::string schedule;             // a built-in name
  schedule::ScheduleParams params;
};

// Whether a schedule (built-in or user) serves collective c with n ranks.
bool scheduleSupports(const std::string& name, schedule::Collective c, int nranks);

// Size classes of the default choice: 0 = small (latency-bound), 1 = large.
int sizeClass(size_t bytes);
// The largest size of the small class (THESEUS_SMALL_MSG_BYTES).
size_t smallMessageBytes();

struct RequestShape {
  schedule::Collective collective;
  int sizeClass;     // sizeClass(bytes of the larger of the input/output buffers)
  int nranks;
  int nnodes;
};

// THESEUS_SCHEDULE forces a schedule by name: "ring" (every collective it
// serves) or per collective "allreduce:my_allreduce;allgather:bruck". Names may
// be built-ins or user schedules (THESEUS_SCHEDULES). Returns "" when nothing
// is forced for `c`.
std::string forcedSchedule(schedule::Collective c);

// The forced schedule when it serves the request (`supports` tells), else the
// size-class default filtered by NCCL_ALGO.
Choice defaultChoice(const RequestShape& req, const AlgoFilter& filter);

}  // namespace theseus::policy
