// JSON policy loading: every mistake is rejected with a message that names the
// file, the rule (index and name) and the field.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "policy/json_policy.h"
#include "policy/policy.h"

namespace theseus::policy {
namespace {

class PolicyErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/theseus_policy_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/my_policy.json";
  }
  void TearDown() override { (void)system(("rm -rf " + dir_).c_str()); }

  // Loads a document whose rules are `rules` (a JSON array text) and returns the error.
  std::string errorOf(const std::string& document) {
    std::ofstream(path_) << document;
    auto p = JsonPolicy::loadFile(path_);
    EXPECT_FALSE(p.isOk()) << document;
    if (p.isOk()) return "";
    EXPECT_EQ(p.status().message().rfind(path_ + ": ", 0), 0u) << "the error starts with the file: "
                                                               << p.status().message();
    return p.status().message();
  }
  std::string ruleError(const std::string& rules) { return errorOf(R"json({"version":1,"rules":)json" + rules + "}"); }

  std::string dir_, path_;
};

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

TEST_F(PolicyErrors, DocumentLevel) {
  EXPECT_HAS(errorOf("{"), "not valid JSON");
  EXPECT_HAS(errorOf("[]"), "the top level must be an object");
  EXPECT_HAS(errorOf(R"json({"rules":[]})json"), "field 'version': missing");
  EXPECT_HAS(errorOf(R"json({"version":2,"rules":[]})json"), "field 'version': unsupported version 2");
  EXPECT_HAS(errorOf(R"json({"version":1,"rule":[]})json"), "unknown field 'rule'");
  EXPECT_HAS(errorOf(R"json({"version":1})json"), "field 'rules': missing");
  EXPECT_HAS(errorOf(R"json({"version":1,"rules":{}})json"), "field 'rules': expected an array");
  EXPECT_HAS(errorOf(R"json({"version":1,"name":3,"rules":[]})json"), "field 'name': expected a non-empty string");
  EXPECT_HAS(errorOf(R"json({"version":1,"settings":{"hold":0},"rules":[]})json"),
             "field 'settings.hold': expected an integer in 1..1000000 (got 0)");
  EXPECT_HAS(errorOf(R"json({"version":1,"settings":{"dwell":5},"rules":[]})json"),
             "field 'settings': unknown field 'dwell'");
  EXPECT_HAS(errorOf(R"json({"version":1,"settings":{"slow_link_ratio":2},"rules":[]})json"),
             "field 'settings.slow_link_ratio': expected a number in 0.01..0.99");
  // Bounded documents (issue 14): at most 100,000 rules and 16 MiB.
  std::string many = R"json({"version":1,"rules":[)json";
  for (int i = 0; i <= 100000; ++i) many += std::string(i ? "," : "") + R"json({"use":"default"})json";
  EXPECT_HAS(errorOf(many + "]}"), "field 'rules': 100001 rules; a policy may have at most 100000");
  EXPECT_HAS(errorOf(R"json({"version":1,"description":")json" + std::string(17 << 20, 'x') + R"json(","rules":[]})json"),
             "a policy may have at most 16 MiB");
  auto missing = JsonPolicy::loadFile(dir_ + "/absent.json");
  ASSERT_FALSE(missing.isOk());
  EXPECT_HAS(missing.status().message(), dir_ + "/absent.json: cannot open it");
}

TEST_F(PolicyErrors, RuleShapeAndMatching) {
  EXPECT_HAS(ruleError("[1]"), "rules[0]: expected an object");
  EXPECT_HAS(ruleError(R"json([{"name":"r","min_byte":1,"use":"ring"}])json"), "rules[0] ('r'): unknown field 'min_byte'");
  EXPECT_HAS(ruleError(R"json([{"use":"ring"},{"name":"second"}])json"), "rules[1] ('second'): field 'use' is missing");
  EXPECT_HAS(ruleError(R"json([{"name":"r","collectives":["allreduce","allreduc"],"use":"ring"}])json"),
             "rules[0] ('r'): field 'collectives[1]': \"allreduc\" is not a collective");
  EXPECT_HAS(ruleError(R"json([{"name":"r","collectives":[],"use":"ring"}])json"), "field 'collectives': expected \"all\"");
  EXPECT_HAS(ruleError(R"json([{"use":"ring"},{"name":"big","min_bytes":"64Q","use":"ring"}])json"),
             "rules[1] ('big'): field 'min_bytes': '64Q': unknown size suffix 'Q'");
  EXPECT_HAS(ruleError(R"json([{"name":"r","max_bytes":-1,"use":"ring"}])json"), "field 'max_bytes': expected a size");
  EXPECT_HAS(ruleError(R"json([{"name":"r","min_bytes":"1M","max_bytes":"64K","use":"ring"}])json"),
             "field 'min_bytes': 1048576 is larger than max_bytes 65536");
  EXPECT_HAS(ruleError(R"json([{"name":"r","ranks":{"min":8,"max":2},"use":"ring"}])json"),
             "rules[0] ('r'): field 'ranks': min 8 is larger than max 2");
  EXPECT_HAS(ruleError(R"json([{"name":"r","nodes":{"least":2},"use":"ring"}])json"), "field 'nodes': unknown field 'least'");
  EXPECT_HAS(ruleError(R"json([{"name":"r","ranks":0,"use":"ring"}])json"), "field 'ranks': expected an integer in 1..");
  EXPECT_HAS(ruleError(R"json([{"name":"r","hold":-1,"use":"ring"}])json"), "rules[0] ('r'): field 'hold'");
  EXPECT_HAS(ruleError(R"json([{"name":"r","margin":"x","use":"ring"}])json"), "rules[0] ('r'): field 'margin'");
}

TEST_F(PolicyErrors, Conditions) {
  EXPECT_HAS(ruleError(R"json([{"name":"slow","when":"min(link.*.*.gbps) <","use":"ring"}])json"),
             "rules[0] ('slow'): field 'when': at character 21: expression ends");
  EXPECT_HAS(ruleError(R"json([{"name":"slow","when":"link.*.*.gbps < 1","use":"ring"}])json"),
             "rules[0] ('slow'): field 'when': at character 1: 'link.*...' is a pattern");
  EXPECT_HAS(ruleError(R"json([{"name":"slow","when":true,"use":"ring"}])json"), "field 'when': expected a condition");
}

TEST_F(PolicyErrors, Schedules) {
  EXPECT_HAS(ruleError(R"json([{"name":"r","use":"rnig"}])json"), "rules[0] ('r'): field 'use.schedule': unknown schedule 'rnig'");
  EXPECT_HAS(ruleError(R"json([{"name":"r","use":{"schedule":["ring",7]}}])json"), "field 'use.schedule[1]': expected a schedule");
  EXPECT_HAS(ruleError(R"json([{"name":"r","use":{"schedule":["ring","tree","bogus"]}}])json"),
             "field 'use.schedule[2]': unknown schedule 'bogus'");
  EXPECT_HAS(ruleError(R"json([{"name":"r","use":{"schedule":[]}}])json"), "field 'use.schedule': expected a schedule name");
  EXPECT_HAS(ruleError(R"json([{"name":"r","use":{"order":"identity"}}])json"), "field 'use': field 'schedule' is missing");
  EXPECT_HAS(ruleError(R"json([{"name":"r","use":{"schedule":"ring","speed":1}}])json"), "field 'use': unknown field 'speed'");
  EXPECT_HAS(ruleError(R"json([{"name":"r","use":{"schedule":"file:nope.json"}}])json"),
             "field 'use.schedule': schedule file '" + dir_ + "/nope.json' does not exist");
  EXPECT_HAS(ruleError(R"json([{"name":"r","collectives":["allgather"],"use":"tree"}])json"),
             "rules[0] ('r'): field 'use': no schedule of this rule serves allgather (schedule 'tree' for allgather: "
             "schedule 'tree' does not implement allgather");
  EXPECT_HAS(ruleError(R"json([{"name":"r","collectives":["allreduce"],
                             "use":{"schedule":"recursive_doubling","order":"avoid_slow_links"}}])json"),
             "no schedule of this rule serves allreduce (schedule 'recursive_doubling' for allreduce: schedule "
             "'recursive_doubling' takes no 'order' parameter)");
  EXPECT_HAS(ruleError(R"json([{"name":"r","collectives":["alltoall"],"use":{"schedule":"direct","pipeline":4}}])json"),
             "serves alltoall");
}

TEST_F(PolicyErrors, Parameters) {
  EXPECT_HAS(ruleError(R"json([{"name":"r","use":{"schedule":"ring","order":"fast"}}])json"),
             "field 'use.order': unknown order 'fast'");
  EXPECT_HAS(ruleError(R"json([{"name":"r","use":{"schedule":"ring","order":[0,0,1]}}])json"),
             "field 'use.order[1]': rank 0 appears twice");
  EXPECT_HAS(ruleError(R"json([{"name":"r","use":{"schedule":"ring","order":[0,3,1]}}])json"),
             "field 'use.order[1]': expected an integer in 0..2 (got 3)");
  EXPECT_HAS(ruleError(R"json([{"name":"r","ranks":{"min":8},"use":{"schedule":"ring","order":[0,1,2,3]}}])json"),
             "field 'use.order': lists 4 ranks, outside the rule's rank range");
  EXPECT_HAS(ruleError(R"json([{"name":"r","use":{"schedule":"ring","channels":0}}])json"),
             "field 'use.channels': expected an integer in 1..32 (got 0)");
  EXPECT_HAS(ruleError(R"json([{"name":"r","use":{"schedule":"ring","pipeline":65}}])json"), "field 'use.pipeline'");
  EXPECT_HAS(ruleError(R"json([{"name":"r","use":{"schedule":"ring","bidirectional":1}}])json"),
             "field 'use.bidirectional': expected true or false");
  EXPECT_HAS(ruleError(R"json([{"name":"r","use":{"schedule":"ring","slice_bytes":"8"}}])json"),
             "field 'use.slice_bytes': 8 is outside 64 bytes..1G");
  EXPECT_HAS(ruleError(R"json([{"name":"r","use":{"schedule":"tree","root":"leader"}}])json"),
             "field 'use.root': expected a rank or \"straggler\"");
}

TEST(PolicySpecs, LoadDispatchesOnTheSpec) {
  auto p = load("static");
  ASSERT_TRUE(p.isOk()) << p.status().message();
  EXPECT_EQ(p.value()->name(), "static");
  auto bad = load("policy.yaml");
  ASSERT_FALSE(bad.isOk());
  EXPECT_HAS(bad.status().message(), "THESEUS_POLICY='policy.yaml': expected \"static\"");
  auto missingSo = load("/nonexistent/libpolicy.so");
  ASSERT_FALSE(missingSo.isOk());
  EXPECT_HAS(missingSo.status().message(), "/nonexistent/libpolicy.so: cannot load policy plugin");
}

TEST(PolicySizes, Parse) {
  EXPECT_EQ(parseSize("4096").value(), 4096u);
  EXPECT_EQ(parseSize("64K").value(), 65536u);
  EXPECT_EQ(parseSize("3M").value(), 3u << 20);
  EXPECT_EQ(parseSize("2GiB").value(), 2ull << 30);
  EXPECT_EQ(parseSize("1T").value(), 1ull << 40);
  EXPECT_EQ(parseSize("inf").value(), UINT64_MAX);
  EXPECT_EQ(parseSize("$small_msg_bytes").value(), 32u << 10);
  EXPECT_FALSE(parseSize("").isOk());
  EXPECT_FALSE(parseSize("K").isOk());
  EXPECT_FALSE(parseSize("1.5M").isOk());
  EXPECT_FALSE(parseSize("99999999999999999T").isOk());
}

}  // namespace
}  // namespace theseus::policy
