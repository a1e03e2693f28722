// Text output: nccl-tests' header (golden lines from the reference doc §3.5),
// row and number formats, footer; and the JSON file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "perf_report.h"

namespace theseus::perf {
namespace {

std::string rstrip(std::string s) {
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

TEST(PerfReport, HeaderMatchesNcclTestsGolden) {
  // Copied from the reference doc (nccl-tests 2.19.6 output).
  const std::vector<std::string> golden = {
      "#                                                              out-of-place                       in-place",
      "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  "
      "#wrong",
      "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)",
  };
  std::vector<std::string> h = tableHeader();
  ASSERT_EQ(h.size(), golden.size());
  for (size_t i = 0; i < h.size(); ++i) EXPECT_EQ(rstrip(h[i]), golden[i]) << "line " << i;
  // The column line is exactly nccl-tests' format, without trailing blanks.
  EXPECT_EQ(h[1], golden[1]);
  EXPECT_EQ(tableHeader(true)[1].rfind("#       size         count      type   redop    root  cputime   algbw", 0), 0u);
}

TEST(PerfReport, RowColumnsLineUpWithTheHeader) {
  std::string row = rowPrefix(1048576, 262144, "float", "sum", -1) + rowHalf(123.45, 8.49, 12.74, 0.0) +
                    rowHalf(120.0, 8.74, 13.11, 3.0);
  EXPECT_EQ(row,
            "     1048576        262144     float     sum      -1   123.45    8.49   12.74       0   120.00    8.74"
            "   13.11       3");
  // Every column ends where its header name ends.
  std::string names = tableHeader()[1];
  for (const char* col : {"size", "count", "type", "redop", "root"}) {
    size_t end = names.find(col) + strlen(col);
    EXPECT_NE(row[end - 1], ' ') << col;
    EXPECT_EQ(row[end], ' ') << col;
  }
  EXPECT_EQ(names.size(), row.size());
}

TEST(PerfReport, NotCheckedPrintsNA) {
  EXPECT_EQ(rowHalf(5.0, 0.0, 0.0, std::nullopt), "     5.00    0.00    0.00    N/A");
}

TEST(PerfReport, AHalfThatDidNotRunIsNAInEveryColumnAndKeepsTheColumnsInLine) {
  EXPECT_EQ(rowHalfNotRun(), "      N/A     N/A     N/A     N/A");
  EXPECT_EQ(rowHalfNotRun().size(), rowHalf(120.0, 8.74, 13.11, 3.0).size());
}

TEST(PerfReport, FloatsShrinkToFitTheirColumn) {
  EXPECT_EQ(formatFloat(3.14159, 6), "  3.14");
  EXPECT_EQ(formatFloat(999.994, 6), "999.99");
  EXPECT_EQ(formatFloat(1234.56, 6), "1234.6");
  EXPECT_EQ(formatFloat(123456.7, 6), "123457");
  EXPECT_EQ(formatFloat(12345678.0, 6), "1.2e+07");
  EXPECT_EQ(formatFloat(12345.678, 7), "12345.7");
  EXPECT_EQ(formatFloat(0.0, 7), "   0.00");
}

TEST(PerfReport, Footer) {
  EXPECT_EQ(footer(0, 12.5, -1),
            (std::vector<std::string>{"# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 12.5"}));
  EXPECT_EQ(footer(2, 1.25, -1)[0], "# Out of bounds values : 2 FAILED");
  EXPECT_EQ(footer(0, 10, 10)[1], "# Avg bus bandwidth    : 10 OK");
  EXPECT_EQ(footer(0, 8, 10)[1], "# Avg bus bandwidth    : 8 FAILED");
}

TEST(PerfReport, JsonCarriesEveryRowAndIsVersioned) {
  JsonReport j;
  j.program = "all_reduce_perf";
  j.ncclHeaders = 22809;
  j.ncclLibrary = 22809;
  j.nranks = 4;
  j.nprocs = 2;
  j.nThreads = 1;
  j.nGpus = 2;
  j.memory = "host";
  j.options = {{"minbytes", "8"}};
  ResultRow r;
  r.bytes = 8;
  r.count = 2;
  r.type = "float";
  r.op = "sum";
  r.outOfPlace = {1.5, 0.01, 0.02, 0.0};
  r.inPlace = {1.25, 0.01, 0.02, std::nullopt};
  ResultRow notRun = r;
  notRun.inPlace = Measurement{};
  notRun.inPlace.ran = false;  // --in_place 0
  j.rows = {r, notRun};
  j.outOfBounds = 0;
  j.avgBusBw = 0.02;
  auto parsed = nlohmann::json::parse(j.toJson());
  EXPECT_EQ(parsed["schema"], "theseus.perf.results");
  EXPECT_EQ(parsed["version"], 1);
  EXPECT_EQ(parsed["nranks"], 4);
  ASSERT_EQ(parsed["results"].size(), 2u);
  EXPECT_TRUE(parsed["results"][1]["in_place"].is_null());
  EXPECT_FALSE(parsed["results"][1]["out_of_place"].is_null());
  EXPECT_EQ(parsed["results"][0]["size"], 8);
  EXPECT_EQ(parsed["results"][0]["root"], -1);
  EXPECT_DOUBLE_EQ(parsed["results"][0]["out_of_place"]["time_us"].get<double>(), 1.5);
  EXPECT_EQ(parsed["results"][0]["out_of_place"]["wrong"], 0);
  EXPECT_TRUE(parsed["results"][0]["in_place"]["wrong"].is_null());
  EXPECT_EQ(parsed["status"], "OK");

  std::string path = testing::TempDir() + "perf_report_test." + std::to_string(getpid()) + ".json";
  ASSERT_TRUE(j.write(path).isOk());
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(ss.str(), j.toJson());
  std::remove(path.c_str());
  Status bad = j.write("/nonexistent-dir/x.json");
  EXPECT_FALSE(bad.isOk());
  EXPECT_NE(bad.message().find("/nonexistent-dir/x.json"), std::string::npos);
}

}  // namespace
}  // namespace theseus::perf
