// The default schedule choice (size thresholds), used until a policy decides
// and for every collective a policy leaves out. It depends only on the request
// and on settings that are identical on every rank (NCCL_ALGO, rank and node
// counts), so all ranks choose alike.
//
// The choice is written once, as the table of DefaultRules below; the built-in
// "static" policy (staticPolicyText(), shipped as policies/static.json and
// checked equal to it by a test) is generated from the same table.
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

// One entry of a THESEUS_SCHEDULE value: a name for one collective, or for all.
struct ForcedSchedule {
  int collective = -1;  // a schedule::Collective value; -1: every collective the schedule serves
  std::string schedule;
};
// The entries of a THESEUS_SCHEDULE value, in order (empty entries skipped).
// Names are not checked here: forcedSchedule() warns once about unknown ones.
std::vector<ForcedSchedule> parseForcedSchedules(const std::string& text);
// The schedule `entries` force for `c` ("" when none): a per-collective entry
// wins over an entry for all; among equals, the first per-collective entry and
// the last entry for all.
std::string forcedFor(const std::vector<ForcedSchedule>& entries, schedule::Collective c);

// One rule of the default choice: for these collectives (and a size class, or
// both), the first candidate that serves the request and NCCL_ALGO allows.
struct DefaultRule {
  const char* name;                           // "small allreduce"
  std::vector<schedule::Collective> collectives;
  int sizeClass;                              // 0 small, 1 large, -1 any size
  std::vector<const char*> candidates;        // preference order
};
const std::vector<DefaultRule>& defaultRules();

// The size-class default filtered by NCCL_ALGO (THESEUS_SCHEDULE not applied).
Choice staticChoice(const RequestShape& req, const AlgoFilter& filter);
// The forced schedule when it serves (c, nranks), else staticChoice().
Choice defaultChoice(const RequestShape& req, const AlgoFilter& filter);

// The built-in "static" policy: the DefaultRules as a JSON policy (the text of policies/static.json).
const std::string& staticPolicyText();

}  // namespace theseus::policy
