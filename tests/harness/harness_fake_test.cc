// The *_perf driver end to end, in one process, against the in-process fake
// NCCL (fake_nccl.cc, preloaded only here): threads (-t), several ranks per
// thread (-g), grouped and parallel init (-p), aggregation (-m), blocking
// modes (-z), misalignment (-u), registration (-R), averaging (-a), JSON (-J),
// timeouts (-T), the corruption interposer, and the exact output format.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "proc_runner.h"

namespace theseus::test {
namespace {

ProcResult perf(const std::string& prog, std::vector<std::string> args, std::map<std::string, std::string> env = {},
                double timeout = 120) {
  args.insert(args.begin(), std::string(PERF_BIN_DIR) + "/" + prog);
  if (env.count("LD_PRELOAD") == 0) env["LD_PRELOAD"] = FAKE_NCCL_LIB;
  for (const char* v : {"THESEUS_RANK", "THESEUS_NRANKS", "THESEUS_LOCAL_RANK", "NCCL_COMM_ID",
                        "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (env.count(v) == 0) env[v] = "";
  return runProcess(args, env, timeout);
}

// Data rows of the table: lines that start with a size.
std::vector<std::string> rows(const std::string& out) {
  std::vector<std::string> r;
  std::istringstream in(out);
  std::string line;
  static const std::regex kRow(R"(^ +[0-9]+ +[0-9]+ +\S+ +\S+ +-?[0-9]+ .*)");
  while (std::getline(in, line))
    if (std::regex_match(line, kRow)) r.push_back(line);
  return r;
}

std::string diag(const ProcResult& r) { return "exit " + std::to_string(r.exitCode) + "\n" + r.out + "\n" + r.err; }

// `uncheckedInPlace`: sendrecv's in-place half is not checked (N/A on every row).
void expectPassed(const ProcResult& r, size_t nrows, bool uncheckedInPlace = false) {
  EXPECT_EQ(r.exitCode, 0) << diag(r);
  EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos) << diag(r);
  std::vector<std::string> rs = rows(r.out);
  EXPECT_EQ(rs.size(), nrows) << diag(r);
  for (const std::string& row : rs) {
    EXPECT_EQ(row.find("N/A") != std::string::npos, uncheckedInPlace) << row;
    EXPECT_EQ(row.find("N/A"), uncheckedInPlace ? row.size() - 3 : std::string::npos) << row;
  }
}

// Every collective, every datatype (and op), 4 ranks as 2 threads x 2 ranks.
TEST(HarnessFake, EveryCollectiveTypeAndOpChecksOut) {
  const std::vector<std::string> common = {"-t", "2", "-g", "2", "-b", "8", "-e", "4K", "-f", "8",
                                           "-n", "2", "-w", "1", "-c", "1", "-d", "all"};
  struct Case {
    const char* prog;
    std::vector<std::string> extra;
    size_t nrows;  // (type, op) pairs x roots x sizes; -o all has no fp8 avg/mulsum: 12*6-4 = 68 pairs
  };
  const Case cases[] = {
      {"all_reduce_perf", {"-o", "all"}, 68 * 4}, {"reduce_scatter_perf", {"-o", "all"}, 68 * 4},
      {"reduce_perf", {"-o", "all", "-r", "3"}, 68 * 4}, {"broadcast_perf", {"-r", "all"}, 12 * 4 * 4},
      {"all_gather_perf", {}, 12 * 4},                   {"alltoall_perf", {}, 12 * 4},
      {"gather_perf", {"-r", "2"}, 12 * 4},              {"scatter_perf", {"-r", "1"}, 12 * 4},
      {"sendrecv_perf", {}, 12 * 4},                     {"hypercube_perf", {}, 12 * 4},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = common;
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    SCOPED_TRACE(c.prog);
    expectPassed(perf(c.prog, args), c.nrows, std::string(c.prog) == "sendrecv_perf");
  }
}

TEST(HarnessFake, OutputFormatIsNcclTests) {
  ProcResult r = perf("all_reduce_perf", {"-g", "2", "-b", "1K", "-e", "4K", "-f", "4", "-n", "3", "-c", "1"});
  ASSERT_EQ(r.exitCode, 0) << diag(r);
  std::istringstream in(r.out);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_GE(lines.size(), 15u) << r.out;
  EXPECT_EQ(lines[0], "# nccl-tests version 2.19.6 (Theseus nccl-tests-compat) nccl-headers=23007 nccl-library=23007");
  EXPECT_EQ(lines[1], "# Collective test starting: all_reduce_perf");
  EXPECT_EQ(lines[2], "# nThread 1 nGpus 2 minBytes 1024 maxBytes 4096 step: 4(factor) warmup iters: 1 iters: 3 "
                      "agg iters: 1 validation: 1 graph: 0 unalign: 0");
  EXPECT_EQ(lines[3], "#");
  EXPECT_EQ(lines[4], "# Using devices");
  EXPECT_TRUE(std::regex_match(lines[5], std::regex(R"(#  Rank  0 Group  0 Pid +[0-9]+ on +\S+ device  - \[host\] .*)")))
      << lines[5];
  EXPECT_TRUE(std::regex_match(lines[6], std::regex(R"(#  Rank  1 Group  0 .*)"))) << lines[6];
  EXPECT_EQ(lines[7], "#");
  EXPECT_NE(lines[8].find("out-of-place"), std::string::npos);
  EXPECT_EQ(lines[9].rfind("#       size         count      type   redop    root     time   algbw   busbw  #wrong", 0), 0u);
  std::regex row(R"( {8}1024 {11}256 {5}float {5}sum {6}-1 ( +[0-9.e+]+){3} +0( +[0-9.e+]+){3} +0)");
  EXPECT_TRUE(std::regex_match(lines[11], row)) << lines[11];
  EXPECT_EQ(lines[13], "# Out of bounds values : 0 OK");
  EXPECT_EQ(lines[14].rfind("# Avg bus bandwidth    : ", 0), 0u);
  EXPECT_EQ(lines.back(), "# Collective test concluded: all_reduce_perf");
}

TEST(HarnessFake, ParallelInitThreadsAggregationBlockingAndMore) {
  const std::vector<std::vector<std::string>> variants = {
      {"-t", "3", "-p", "1"},
      {"-t", "2", "-g", "2", "-m", "4"},
      {"-g", "3", "-z", "1"},
      {"-t", "2", "-z", "2", "-m", "2"},
      {"-g", "2", "-z", "3", "-m", "3"},
      {"-g", "2", "-u", "3", "-d", "double,int8"},
      {"-g", "2", "-R", "1"},
      {"-g", "2", "-R", "2", "-x", "1"},
      {"-t", "2", "-a", "0", "-C", "1"},
      {"-t", "2", "-a", "2", "-y", "1"},
      {"-t", "2", "-a", "3", "-N", "2"},
      {"-g", "2", "-w", "0", "-n", "0", "-c", "3"},
      {"-g", "2", "--malloc", "--host"},
  };
  for (const auto& v : variants) {
    std::vector<std::string> args = {"-b", "64", "-e", "1K", "-f", "4", "-n", "2", "-c", "1"};
    args.insert(args.end(), v.begin(), v.end());
    std::string label;
    for (const std::string& a : v) label += a + " ";
    SCOPED_TRACE(label);
    size_t nrows = 3;
    if (label.find("-N 2") != std::string::npos) nrows = 6;
    if (label.find("double,int8") != std::string::npos) nrows = 6;
    expectPassed(perf("all_reduce_perf", args), nrows);
  }
}

TEST(HarnessFake, ExplicitFp8AvgRunsButAllSkipsIt) {
  ProcResult r = perf("all_reduce_perf", {"-g", "3", "-b", "1K", "-e", "1K", "-d", "f8e4m3", "-o", "avg,mulsum"});
  expectPassed(r, 2);
  ProcResult all = perf("all_reduce_perf", {"-g", "3", "-b", "1K", "-e", "1K", "-d", "f8e5m2", "-o", "all"});
  expectPassed(all, 4);
  EXPECT_EQ(all.out.find(" avg "), std::string::npos);
}

TEST(HarnessFake, NoCheckPrintsNA) {
  ProcResult r = perf("all_gather_perf", {"-g", "2", "-b", "1K", "-e", "1K", "-c", "0"});
  EXPECT_EQ(r.exitCode, 0) << diag(r);
  ASSERT_EQ(rows(r.out).size(), 1u) << diag(r);
  EXPECT_EQ(countLines(r.out, "N/A"), 1);
  EXPECT_NE(rows(r.out)[0].find("N/A"), std::string::npos);
}

TEST(HarnessFake, JsonOutput) {
  // Unique per process: /tmp may be shared with concurrent runs of this test.
  std::string path = testing::TempDir() + "harness_fake_test." + std::to_string(getpid()) + ".json";
  ProcResult r = perf("reduce_scatter_perf", {"-g", "2", "-b", "1K", "-e", "4K", "-f", "2", "-o", "max,min", "-J", path});
  ASSERT_EQ(r.exitCode, 0) << diag(r);
  std::ifstream f(path);
  ASSERT_TRUE(f.good());
  auto j = nlohmann::json::parse(f);
  EXPECT_EQ(j["schema"], "theseus.perf.results");
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["program"], "reduce_scatter_perf");
  EXPECT_EQ(j["nranks"], 2);
  EXPECT_EQ(j["memory"], "host");
  ASSERT_EQ(j["results"].size(), 6u);
  EXPECT_EQ(j["results"][0]["size"], 1024);
  EXPECT_EQ(j["results"][0]["count"], 128);
  EXPECT_EQ(j["results"][0]["redop"], "max");
  EXPECT_EQ(j["results"][3]["redop"], "min");
  EXPECT_EQ(j["results"][5]["in_place"]["wrong"], 0);
  EXPECT_EQ(j["devices"].size(), 2u);
  EXPECT_EQ(j["status"], "OK");
  std::remove(path.c_str());
}

// The interposer flips one bit of one element: -c must catch it, print FAILED
// and exit 1, in both the out-of-place and the in-place measurement.
TEST(HarnessFake, CorruptedResultIsCaught) {
  std::map<std::string, std::string> env = {{"LD_PRELOAD", std::string(CORRUPT_LIB) + ":" + FAKE_NCCL_LIB},
                                            {"CORRUPT_COUNT", "256"}};
  ProcResult r = perf("all_reduce_perf", {"-b", "1K", "-e", "1K", "-n", "1"}, env);
  EXPECT_EQ(r.exitCode, 1) << diag(r);
  ASSERT_EQ(rows(r.out).size(), 1u) << diag(r);
  EXPECT_TRUE(std::regex_match(rows(r.out)[0], std::regex(R"(.* 1\s+\S+\s+\S+\s+\S+\s+1$)"))) << rows(r.out)[0];
  EXPECT_NE(r.out.find("# Out of bounds values : 2 FAILED"), std::string::npos) << diag(r);
  EXPECT_NE(r.err.find("1 wrong element(s), first at index 128"), std::string::npos) << diag(r);
  // The same run without the corruption passes (the failure above is the interposer's).
  ProcResult clean = perf("all_reduce_perf", {"-b", "1K", "-e", "1K", "-n", "1"});
  EXPECT_EQ(clean.exitCode, 0) << diag(clean);
}

TEST(HarnessFake, TimeoutAbortsCommunicators) {
  // The 10th collective call hangs; -T 1 must abort and exit 4 within seconds.
  ProcResult r = perf("all_reduce_perf", {"-t", "2", "-b", "8", "-e", "64", "-f", "2", "-T", "1"},
                      {{"FAKE_NCCL_HANG_AT", "10"}}, 60);
  EXPECT_EQ(r.exitCode, 4) << diag(r);
  EXPECT_LT(r.seconds, 20);
  EXPECT_NE(r.err.find("did not complete within 1 s (-T): aborting communicators"), std::string::npos) << diag(r);
}

TEST(HarnessFake, UsageErrorsExit3WithAReason) {
  struct Case {
    const char* prog;
    std::vector<std::string> args;
    std::map<std::string, std::string> env;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"all_reduce_perf", {"-q"}, {}, "unknown option '-q'"},
      {"hypercube_perf", {"-t", "3", "-b", "1K", "-e", "1K"}, {}, "power-of-two number of ranks (got 3)"},
      {"broadcast_perf", {"-g", "2", "-r", "5", "-b", "1K", "-e", "1K"}, {}, "root must be < the number of ranks"},
      {"all_reduce_perf", {}, {{"THESEUS_RANK", "0"}, {"THESEUS_NRANKS", "2"}}, "NCCL_COMM_ID is not set"},
      {"all_reduce_perf", {}, {{"THESEUS_RANK", "2"}, {"THESEUS_NRANKS", "2"}}, "THESEUS_RANK=2 is not in [0,"},
  };
  for (const Case& c : cases) {
    ProcResult r = perf(c.prog, c.args, c.env);
    EXPECT_EQ(r.exitCode, 3) << diag(r);
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << diag(r);
  }
  ProcResult h = perf("all_reduce_perf", {"-h"});
  EXPECT_EQ(h.exitCode, 0);
  EXPECT_NE(h.out.find("USAGE: all_reduce_perf"), std::string::npos);
}

}  // namespace
}  // namespace theseus::test
