// theseus-schedule: exit codes (0 ok, 1 invalid schedule, 2 usage) and the
// content of its reports, run as a separate process like a user would.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace {

const std::string kTool = THESEUS_SCHEDULE_TOOL;
const std::string kExamples = THESEUS_EXAMPLES_DIR;
constexpr bool kHaveXml = THESEUS_TEST_HAVE_XML;  // builds without tinyxml2 refuse *.xml files

struct ToolRun {
  int code = -1;
  std::string out;  // stdout and stderr
};

ToolRun run(const std::string& args) {
  ToolRun r;
  FILE* p = popen((kTool + " " + args + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

bool has(const ToolRun& r, const std::string& text) { return r.out.find(text) != std::string::npos; }

TEST(ScheduleTool, VerifyExamples) {
  for (const char* f : {"allreduce_rhd_4.json", "ring_allreduce_8.json", "allgather_rd.json",
                        "allreduce_allpairs_4.xml", "allreduce_ring_4.xml"}) {
    if (!kHaveXml && std::string(f).find(".xml") != std::string::npos) continue;
    ToolRun r = run("verify " + kExamples + "/" + f);
    EXPECT_EQ(r.code, 0) << f << "\n" << r.out;
    EXPECT_TRUE(has(r, "OK: ")) << r.out;
  }
  ToolRun ag = run("verify " + kExamples + "/allgather_rd.json");
  EXPECT_TRUE(has(ag, "ok  allgather nranks=8 in-place")) << ag.out;
  EXPECT_TRUE(has(ag, "OK: 6 case(s) verified")) << ag.out;
  ToolRun plugin = run(std::string("verify ") + THESEUS_BRUCK_PLUGIN + " --nranks 12");
  EXPECT_EQ(plugin.code, 0) << plugin.out;
  EXPECT_TRUE(has(plugin, "ok  allgather nranks=12 out-of-place")) << plugin.out;
  EXPECT_TRUE(has(plugin, "OK: 2 case(s) verified")) << plugin.out;
  ToolRun builtin = run("verify tree --collective broadcast --nranks 5");
  EXPECT_EQ(builtin.code, 0) << builtin.out;
  EXPECT_TRUE(has(builtin, "OK: 10 case(s) verified")) << builtin.out;  // 5 roots x 2 layouts
}

TEST(ScheduleTool, VerifyRejects) {
  ToolRun broken = run("verify " + kExamples + "/broken_allreduce_4.json");
  EXPECT_EQ(broken.code, 1) << broken.out;
  EXPECT_TRUE(has(broken, "INVALID: " + kExamples + "/broken_allreduce_4.json: schedule broken_allreduce_4 "
                          "allreduce nranks=4: rank 0 output chunk 3 holds {r0:c3, r2:c3}"))
      << broken.out;
  ToolRun count = run("verify " + kExamples + "/allreduce_rhd_4.json --nranks 5");
  EXPECT_EQ(count.code, 1) << count.out;
  EXPECT_TRUE(has(count, "has no program for the requested rank count")) << count.out;
  ToolRun missing = run("verify /nonexistent/x.json");
  EXPECT_EQ(missing.code, 1);
  EXPECT_TRUE(has(missing, "cannot open")) << missing.out;
  ToolRun typo = run("verify rign");
  EXPECT_EQ(typo.code, 1);
  EXPECT_TRUE(has(typo, "'rign' is neither a schedule file nor a built-in schedule")) << typo.out;
}

TEST(ScheduleTool, UsageErrors) {
  EXPECT_EQ(run("").code, 2);
  EXPECT_EQ(run("frobnicate x.json").code, 2);
  EXPECT_EQ(run("verify").code, 2);
  ToolRun opt = run("verify " + kExamples + "/allreduce_rhd_4.json --nrank 4");
  EXPECT_EQ(opt.code, 2);
  EXPECT_TRUE(has(opt, "unknown option --nrank")) << opt.out;
  EXPECT_EQ(run("show " + kExamples + "/allreduce_rhd_4.json --bytes lots").code, 2);
  EXPECT_EQ(run("show " + kExamples + "/allreduce_rhd_4.json --beta-gbps 0").code, 2);
  ToolRun need = run(std::string("show ") + THESEUS_BRUCK_PLUGIN);
  EXPECT_EQ(need.code, 2) << need.out;
  EXPECT_TRUE(has(need, "add --nranks N")) << need.out;
  ToolRun several = run("show " + kExamples + "/allgather_rd.json");
  EXPECT_EQ(several.code, 2) << several.out;
  EXPECT_TRUE(has(several, "has programs for nranks 2, 4, 8: add --nranks N")) << several.out;
  ToolRun help = run("--help");
  EXPECT_EQ(help.code, 0);
  EXPECT_TRUE(has(help, "exit codes: 0 ok, 1 invalid schedule, 2 usage error"));
}

TEST(ScheduleTool, ShowReportsStepsLinksCostAndCriticalPath) {
  ToolRun r = run("show " + kExamples + "/allreduce_rhd_4.json --bytes 1M --alpha-us 2 --beta-gbps 5");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r, "schedule 'rhd_allreduce_4'")) << r.out;
  EXPECT_TRUE(has(r, "allreduce nranks=4 out-of-place, 4 chunk(s) per block, 0 scratch block(s), 1 channel(s)"));
  EXPECT_TRUE(has(r, "rank 3 (8 steps)")) << r.out;
  EXPECT_TRUE(has(r, "recv_reduce            from 1 ch0")) << r.out;
  // Every rank sends 2 + 1 + 1 + 2 quarters of 1 MiB; the links two ranks apart carry two halves.
  EXPECT_TRUE(has(r, "total 6291456 bytes in 16 messages; busiest link 1048576 bytes")) << r.out;
  // Halving 2 waits for halving 1 ... four dependent rounds of S/2, S/4, S/4, S/2 at 5000 bytes/us + 2 us each.
  char want[96];
  snprintf(want, sizeof(want), "cost estimate (alpha 2 us, beta 5 GB/s, local copies free): %.3f us",
           4 * 2 + (524288 + 262144 + 262144 + 524288) / 5e3);
  EXPECT_TRUE(has(r, want)) << want << "\n" << r.out;
  EXPECT_TRUE(has(r, "critical path: ")) << r.out;
  ToolRun quiet = run("show " + kExamples + (kHaveXml ? "/allreduce_ring_4.xml" : "/allreduce_rhd_4.json") +
                      " --no-steps --in-place");
  ASSERT_EQ(quiet.code, 0) << quiet.out;
  EXPECT_FALSE(has(quiet, "rank 0 (")) << quiet.out;
  EXPECT_TRUE(has(quiet, "allreduce nranks=4 in-place")) << quiet.out;
  ToolRun builtin = run("show ring --collective allgather --nranks 3 --no-steps");
  EXPECT_EQ(builtin.code, 0) << builtin.out;
  EXPECT_TRUE(has(builtin, "built-in ring")) << builtin.out;
}

TEST(ScheduleTool, ExportWritesJsonThatVerifies) {
  char dir[] = "/tmp/theseus_tool_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  struct Case {
    std::string args, file;
  };
  const Case cases[] = {
      {"export " + kExamples + "/allreduce_allpairs_4.xml", "allpairs.json"},
      {"export halving_doubling --collective reducescatter --nranks 6", "hd.json"},
      {std::string("export ") + THESEUS_BRUCK_PLUGIN + " --nranks 7 --name bruck7", "bruck7.json"},
      {"export " + kExamples + "/allgather_rd.json", "rd.json"},
  };
  for (const Case& c : cases) {
    if (!kHaveXml && c.args.find(".xml") != std::string::npos) continue;
    ToolRun e = run(c.args);
    ASSERT_EQ(e.code, 0) << c.args << "\n" << e.out;
    EXPECT_TRUE(has(e, "\"version\": 1")) << e.out;
    std::string path = std::string(dir) + "/" + c.file;
    std::ofstream(path) << e.out;
    ToolRun v = run("verify " + path);
    EXPECT_EQ(v.code, 0) << c.args << "\n" << v.out;
  }
  ToolRun named = run("export ring --collective allreduce --nranks 4");
  EXPECT_EQ(named.code, 0);
  EXPECT_TRUE(has(named, "\"name\": \"ring_allreduce_4\"")) << named.out;
  ToolRun bad = run("export ring --collective allreduce --nranks 4 --name ring");
  EXPECT_EQ(bad.code, 2);
  EXPECT_TRUE(has(bad, "taken by a built-in")) << bad.out;
}

TEST(ScheduleTool, ListShowsWhatLoadsAndWhatIsSkipped) {
  ToolRun r = run("list " + kExamples);
  EXPECT_EQ(r.code, 1) << r.out;  // the broken example is skipped
  EXPECT_TRUE(has(r, "rhd_allreduce_4")) << r.out;
  EXPECT_EQ(has(r, "msccl-xml"), kHaveXml) << r.out;
  EXPECT_TRUE(has(r, "skipped: " + kExamples + "/broken_allreduce_4.json")) << r.out;
  ToolRun ok = run(std::string("list ") + kExamples + "/allgather_rd.json:" + THESEUS_BRUCK_PLUGIN);
  EXPECT_EQ(ok.code, 0) << ok.out;
  EXPECT_TRUE(has(ok, "bruck_allgather")) << ok.out;
  EXPECT_TRUE(has(ok, "nranks=any")) << ok.out;
  EXPECT_TRUE(has(ok, "nranks=2,4,8")) << ok.out;
}

}  // namespace
