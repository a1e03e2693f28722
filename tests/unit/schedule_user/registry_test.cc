// The registry: THESEUS_SCHEDULES loading (directories, files, plugins, bad
// entries skipped with a WARN), names and paths, and the integration contract
// (knows / supports / generate) driving a ProgramCache the way the collective
// engine does, with results checked on numbers.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "common/log.h"
#include "reference_interpreter.h"
#include "schedule/program_cache.h"
#include "schedule/user/user_schedules.h"

namespace theseus::schedule::user {
namespace {

const std::string kExamples = THESEUS_EXAMPLES_DIR;
constexpr bool kHaveXml = THESEUS_TEST_HAVE_XML;  // builds without tinyxml2 refuse *.xml files

std::string tempDir() {
  char path[] = "/tmp/theseus_usersched_XXXXXX";
  const char* d = mkdtemp(path);
  EXPECT_NE(d, nullptr);
  return d ? d : "/tmp";
}

void writeFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

GenerateRequest request(Collective c, int n, bool inPlace = false, int onlyRank = -1) {
  GenerateRequest req;
  req.collective = c;
  req.nranks = n;
  req.inPlace = inPlace;
  req.onlyRank = onlyRank;
  return req;
}

bool contains(const std::vector<Status>& errors, const std::string& text) {
  for (const Status& s : errors)
    if (s.message().find(text) != std::string::npos) return true;
  return false;
}

TEST(Registry, SpecLoadsDirectoriesFilesAndPluginsAndReportsEachProblem) {
  const std::string dir = tempDir();
  // Same name as an example: the first one registered stays.
  std::string dup = readFile(kExamples + "/allgather_rd.json");
  writeFile(dir + "/dup.json", dup);
  writeFile(dir + "/notes.txt", "ignored in a directory");
  Registry reg;
  std::vector<Status> errors =
      reg.addSpec(kExamples + ", " + THESEUS_BRUCK_PLUGIN + ":" + dir + ":/nonexistent/x.json:" + dir + "/notes.txt");
  std::vector<std::string> names;
  for (const ScheduleHandle& s : reg.all()) names.push_back(s->name());
  // Directory entries load in name order; the broken example is skipped.
  if (kHaveXml) {
    EXPECT_EQ(names, (std::vector<std::string>{"rd_allgather", "allpairs_allreduce_4", "rhd_allreduce_4",
                                               "ring_allreduce_4", "ring_allreduce_8_interleaved", "bruck_allgather"}));
  } else {
    EXPECT_EQ(names, (std::vector<std::string>{"rd_allgather", "rhd_allreduce_4", "ring_allreduce_8_interleaved",
                                               "bruck_allgather"}));
  }
  EXPECT_EQ(errors.size(), kHaveXml ? 4u : 6u);
  EXPECT_TRUE(contains(errors, "broken_allreduce_4.json: schedule broken_allreduce_4 allreduce nranks=4: rank 0 "
                               "output chunk 3"));
  EXPECT_TRUE(contains(errors, dir + "/dup.json: schedule name 'rd_allgather' is already taken by " + kExamples +
                                   "/allgather_rd.json (the first one stays)"));
  EXPECT_TRUE(contains(errors, "/nonexistent/x.json: No such file or directory"));
  EXPECT_TRUE(contains(errors, dir + "/notes.txt: unknown schedule file type"));
  // Names and paths.
  ASSERT_TRUE(reg.find("bruck_allgather").isOk());
  Result<ScheduleHandle> byPath = reg.find("file:" + dir + "/dup.json");
  ASSERT_TRUE(byPath.isOk()) << byPath.status().message();
  EXPECT_EQ(byPath.value()->name(), "rd_allgather");
  Result<ScheduleHandle> missing = reg.find("nope");
  ASSERT_FALSE(missing.isOk());
  EXPECT_NE(missing.status().message().find("unknown schedule 'nope' (user schedules loaded from THESEUS_SCHEDULES: "
                                            "rd_allgather, "),
            std::string::npos)
      << missing.status().message();
  Result<ScheduleHandle> badPath = reg.find(kExamples + "/broken_allreduce_4.json");
  ASSERT_FALSE(badPath.isOk());
  EXPECT_NE(badPath.status().message().find("output chunk 3"), std::string::npos);
}

// The process-wide registry reads THESEUS_SCHEDULES once, on first use; this
// is the only test in this binary that touches it.
TEST(ProcessRegistry, EngineContractThroughTheProgramCache) {
  const std::string spec = kExamples + ":" + THESEUS_PLUGIN_DIR + ":/nonexistent/schedules";
  ASSERT_EQ(setenv("THESEUS_SCHEDULES", spec.c_str(), 1), 0);
  EXPECT_TRUE(knows("rhd_allreduce_4"));
  EXPECT_TRUE(knows("bruck_allgather"));
  EXPECT_EQ(knows("allpairs_allreduce_4"), kHaveXml);
  EXPECT_FALSE(knows("broken_allreduce_4"));
  EXPECT_FALSE(knows("ring"));  // built-ins are not user schedules
  EXPECT_TRUE(knows("file:" + kExamples + "/allgather_rd.json"));
  EXPECT_TRUE(supports("rd_allgather", Collective::kAllGather, 8));
  EXPECT_FALSE(supports("rd_allgather", Collective::kAllGather, 3));
  EXPECT_FALSE(supports("rd_allgather", Collective::kAllReduce, 8));
  EXPECT_TRUE(supports("bruck_allgather", Collective::kAllGather, 11));
  // Every skipped entry was a WARN (which also sets the last error).
  EXPECT_NE(std::string(log::lastError()).find("THESEUS_SCHEDULES: /nonexistent/schedules: No such file or directory "
                                               "(skipped)"),
            std::string::npos)
      << log::lastError();

  ProgramCache cache(ProgramCache::Options{.external = generate});
  struct Want {
    std::string name;
    Collective c;
    int n;
  };
  const Want wants[] = {{"rhd_allreduce_4", Collective::kAllReduce, 4},
                        {"ring_allreduce_8_interleaved", Collective::kAllReduce, 8},
                        {"allpairs_allreduce_4", Collective::kAllReduce, 4},
                        {"ring_allreduce_4", Collective::kAllReduce, 4},
                        {"rd_allgather", Collective::kAllGather, 4},
                        {"bruck_allgather", Collective::kAllGather, 13},
                        {"file:" + kExamples + "/allgather_rd.json", Collective::kAllGather, 8}};
  for (const Want& w : wants) {
    if (!kHaveXml && (w.name == "allpairs_allreduce_4" || w.name == "ring_allreduce_4")) continue;
    for (bool inPlace : {false, true}) {
      SCOPED_TRACE(w.name + (inPlace ? " in-place" : ""));
      auto all = cache.get(ProgramKey::make(w.name, request(w.c, w.n, inPlace)));
      ASSERT_TRUE(all.isOk()) << all.status().message();
      EXPECT_TRUE(all.value()->verified);
      // Same numbers as the collective's definition, hence as any built-in.
      EXPECT_EQ(testing::runAndCheck(all.value()->program, 9, 7), "");
      auto one = cache.get(ProgramKey::make(w.name, request(w.c, w.n, inPlace, w.n - 1)));
      ASSERT_TRUE(one.isOk()) << one.status().message();
      EXPECT_TRUE(one.value()->verified);
      EXPECT_EQ(one.value()->program.ranks[w.n - 1].steps.size(), all.value()->program.ranks[w.n - 1].steps.size());
      EXPECT_EQ(one.value()->plans[w.n - 1].steps.size(), all.value()->plans[w.n - 1].steps.size());
    }
  }
  auto broken = cache.get(ProgramKey::make("file:" + kExamples + "/broken_allreduce_4.json",
                                           request(Collective::kAllReduce, 4)));
  ASSERT_FALSE(broken.isOk());
  EXPECT_NE(broken.status().message().find("rank 0 output chunk 3 holds {r0:c3, r2:c3}"), std::string::npos)
      << broken.status().message();
  auto unknown = cache.get(ProgramKey::make("my_missing_schedule", request(Collective::kAllReduce, 4)));
  ASSERT_FALSE(unknown.isOk());
  EXPECT_NE(unknown.status().message().find("unknown schedule 'my_missing_schedule'"), std::string::npos);
  auto wrongCount = cache.get(ProgramKey::make("rhd_allreduce_4", request(Collective::kAllReduce, 8)));
  ASSERT_FALSE(wrongCount.isOk());
  EXPECT_NE(wrongCount.status().message().find("has no program for allreduce nranks=8"), std::string::npos)
      << wrongCount.status().message();
}

}  // namespace
}  // namespace theseus::schedule::user
