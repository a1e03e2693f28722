// What the schedule fuzz targets (JSON and MSCCL XML) do with a schedule that
// loaded: use it the way the collective engine and the tools do, and check
// that every step of the way accepts what the loader accepted.
//   * every program is handed out again through FixedSchedule::generate for
//     each layout it claims and, for broadcast and reduce, for a rotated root,
//     and the result must verify (the program cache re-verifies what the hook
//     returns; a loaded file must never produce a program that fails there);
//   * each rank is analysed and turned into the executor's RankTemplate;
//   * the schedule is exported (programsToJson, what `theseus-schedule export`
//     writes) and the export must load again and export to the same text.
#pragma once

#include <string>
#include <vector>

#include "exec/rank_template.h"
#include "fuzz_util.h"
#include "schedule/analysis.h"
#include "schedule/user/json_schedule.h"
#include "schedule/verifier.h"

namespace theseus::fuzz {

using namespace theseus::schedule;
using namespace theseus::schedule::user;

inline void exerciseSchedule(const FixedSchedule& s) {
  for (const FixedProgram& fp : s.programs()) {
    const Program& p = fp.program;
    for (bool inPlace : {false, true}) {
      if (fp.layout != Layout::kBoth && (fp.layout == Layout::kInPlace) != inPlace) continue;
      std::vector<int> roots = {p.root};
      if (s.collective() == Collective::kBroadcast || s.collective() == Collective::kReduce)
        roots.push_back((p.root + 1) % p.nranks);
      for (int root : roots) {
        GenerateRequest req;
        req.collective = s.collective();
        req.nranks = p.nranks;
        req.root = root;
        req.inPlace = inPlace;
        FUZZ_CHECK(s.serves(req), "a loaded program does not serve its own request (nranks %d)", p.nranks);
        Result<Program> got = s.generate(req);
        FUZZ_CHECK(got.isOk(), "generate failed: %s", got.status().message().c_str());
        Status st = verifyProgram(got.value());
        FUZZ_CHECK(st.isOk(), "a loaded schedule hands out a program that fails verification: %s",
                   st.message().c_str());
        for (int r = 0; r < p.nranks; ++r) {
          Result<RankPlan> plan = analyzeRank(got.value(), r);
          FUZZ_CHECK(plan.isOk(), "analysis of a verified program failed: %s", plan.status().message().c_str());
          auto t = exec::buildRankTemplate(got.value(), r, plan.value());
          FUZZ_CHECK(t.isOk(), "the executor cannot template a verified program: %s", t.status().message().c_str());
        }
      }
    }
  }
  const std::string exported = programsToJson(s.name(), s.collective(), s.info().description, s.programs());
  auto again = parseJsonSchedule(exported, "exported.json");
  FUZZ_CHECK(again.isOk(), "the export of a loaded schedule does not load: %s", again.status().message().c_str());
  const std::string twice =
      programsToJson(again.value()->name(), again.value()->collective(), again.value()->info().description,
                     again.value()->programs());
  FUZZ_CHECK(twice == exported, "export -> load -> export changed the schedule");
}

}  // namespace theseus::fuzz
