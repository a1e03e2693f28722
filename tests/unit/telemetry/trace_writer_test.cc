// The trace writer (telemetry/trace_writer.h): one operation in THESEUS_TRACE_STEPS has its steps
// traced, each step a slice on its peer's track; attribute changes are counters; and what tracing
// costs an operation (printed: the per-operation share of an 8-byte allreduce, measured in
// isolation, where the machine's noise does not drown it).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "exec/plan.h"
#include "telemetry/trace_writer.h"
#include "test_timing.h"

namespace theseus::telemetry {
namespace {

struct TraceDir {
  std::string path;
  TraceDir() {
    char tmpl[] = "/tmp/theseus-trace-unit-XXXXXX";
    path = mkdtemp(tmpl);
    setenv("THESEUS_TRACE", path.c_str(), 1);
  }
  ~TraceDir() {
    unsetenv("THESEUS_TRACE");
    unsetenv("THESEUS_TRACE_STEPS");
    (void)system(("rm -rf " + path).c_str());
  }
};

nlohmann::json readTrace(const std::string& file) {
  std::ifstream in(file);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

// A plan of two steps: a send to rank 1 and a recv_reduce from rank 2.
exec::Plan twoSteps(uint64_t seq) {
  exec::Plan p;
  p.seq = seq;
  p.steps.resize(2);
  p.steps[0].op = schedule::Op::kSend;
  p.steps[0].sendPeer = 1;
  p.steps[0].bytes = 100;
  p.steps[1].op = schedule::Op::kRecvReduce;
  p.steps[1].recvPeer = 2;
  p.steps[1].bytes = 200;
  return p;
}

}  // namespace

TEST(TraceWriter, OneOperationInNHasItsStepsOnItsPeersTracks) {
  TraceDir dir;
  setenv("THESEUS_TRACE_STEPS", "3", 1);
  auto w = TraceWriter::create({0, 3, 0xabc});
  ASSERT_NE(w, nullptr);
  for (uint64_t seq = 0; seq < 7; ++seq) {
    exec::Plan p = twoSteps(seq);
    p.stepTimes = w->sampleSteps(p.steps.size());
    EXPECT_EQ(p.stepTimes != nullptr, seq % 3 == 0) << seq;
    if (p.stepTimes != nullptr) {
      p.stepTimes[0] = {1500, 2500};
      p.stepTimes[1] = {3000, 4000};
    }
    w->operation("allreduce", "ring", seq, 300, 1000, 5000);
    if (p.stepTimes != nullptr) w->steps(p, 1000);
  }
  w->attribute(6000, "link.0.1.gbps", 2.5);
  w->attribute(7000, "link.0.1.gbps", 1.5);
  const std::string path = w->finish();
  ASSERT_FALSE(path.empty());
  auto j = readTrace(path);
  int ops = 0, steps = 0;
  std::vector<double> counter;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X" && e["cat"] == "operation") ++ops;
    if (e["ph"] == "X" && e["cat"] == "step") {
      ++steps;
      const int peer = e["args"]["peer"];
      EXPECT_EQ(e["tid"], 1 + peer);
      EXPECT_EQ(e["args"]["seq"].get<uint64_t>() % 3, 0u);
      if (peer == 2) {
        EXPECT_EQ(e["name"], "recv_reduce");
        EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 3.0);
        EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 1.0);
        EXPECT_DOUBLE_EQ(e["args"]["waited_us"].get<double>(), 2.0);
      }
    }
    if (e["ph"] == "C") {
      EXPECT_EQ(e["name"], "link.0.1.gbps");
      counter.push_back(e["args"]["value"]);
    }
  }
  EXPECT_EQ(ops, 7);
  EXPECT_EQ(steps, 3 * 2);  // operations 0, 3 and 6
  EXPECT_EQ(counter, std::vector<double>({2.5, 1.5}));
}

// The file is streamed text, not a document built in memory: texts with quotes, control bytes and
// bytes that are not UTF-8, a value that is not a number and times to the nanosecond must still
// make valid JSON with the same values.
TEST(TraceWriter, TextsAndNumbersSurviveTheStream) {
  TraceDir dir;
  auto w = TraceWriter::create({2, 3, 0x1234});
  ASSERT_NE(w, nullptr);
  w->setClock(-1500, 40);
  w->operation("allreduce", "ring", 5, 64, 1'234'567'891, 1'234'568'000);
  w->swap(1'300'000'001, 6, 1, 2, "link \"0->1\" slow\n\ttab \xff\xfe end");
  w->error(1'400'000'000, "peer 1: \x01 died");
  w->attribute(1'500'000'000, "link.0.1.gbps", std::nan(""));
  w->attribute(1'500'000'001, "rank.2.idle_us", 1e-7);
  const std::string path = w->finish();
  ASSERT_FALSE(path.empty());
  EXPECT_EQ(w->finish(), "") << "written once";
  auto j = readTrace(path);
  EXPECT_EQ(j["theseus"]["rank"], 2);
  EXPECT_EQ(j["theseus"]["nranks"], 3);
  EXPECT_EQ(j["theseus"]["comm"], "0000000000001234");
  EXPECT_EQ(j["theseus"]["clock_offset_ns"], -1500);
  EXPECT_EQ(j["theseus"]["clock_error_ns"], 40);
  EXPECT_EQ(j["theseus"]["dropped_events"], 0);
  const auto& ev = j["traceEvents"];
  ASSERT_EQ(ev.size(), 2u + 5u);  // process and thread names, then the five events in order
  EXPECT_EQ(ev[2]["name"], "allreduce");
  EXPECT_EQ(ev[2]["pid"], 2);
  EXPECT_DOUBLE_EQ(ev[2]["ts"].get<double>(), 1234567.891);
  EXPECT_DOUBLE_EQ(ev[2]["dur"].get<double>(), 0.109);
  EXPECT_EQ(ev[2]["args"]["schedule"], "ring");
  EXPECT_EQ(ev[3]["name"], "schedule swap");
  EXPECT_EQ(ev[3]["args"]["why"], "link \"0->1\" slow\n\ttab \xEF\xBF\xBD\xEF\xBF\xBD end");
  EXPECT_EQ(ev[3]["args"]["from_seq"], 6);
  EXPECT_EQ(ev[3]["args"]["new_version"], 2);
  EXPECT_EQ(ev[4]["args"]["why"], "peer 1: \x01 died");
  EXPECT_TRUE(ev[5]["args"]["value"].is_null()) << "JSON has no NaN";
  EXPECT_DOUBLE_EQ(ev[6]["args"]["value"].get<double>(), 1e-7);
}

TEST(TraceWriter, StepSamplingOffTracesNoStep) {
  TraceDir dir;
  setenv("THESEUS_TRACE_STEPS", "0", 1);
  auto w = TraceWriter::create({0, 2, 1});
  for (int i = 0; i < 10; ++i) EXPECT_EQ(w->sampleSteps(2), nullptr);
}

TEST(TraceWriter, CostPerOperation) {
  TraceDir dir;
  auto w = TraceWriter::create({0, 4, 2});
  exec::Plan p = twoSteps(0);
  constexpr int kOps = 200000;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kOps; ++i) {
    p.stepTimes = w->sampleSteps(p.steps.size());
    if (p.stepTimes != nullptr) p.stepTimes[0] = p.stepTimes[1] = {10, 20};
    w->operation("allreduce", "ring", static_cast<uint64_t>(i), 8, 0, 10);
    if (p.stepTimes != nullptr) w->steps(p, 0);
  }
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / kOps;
  printf("tracing on (THESEUS_TRACE_STEPS=100): %.1f ns per operation, %.2f%% of a 1.2 us 8-byte allreduce (2 "
         "ranks, shared memory)\n", ns, ns / 12.0);
  EXPECT_LT(ns, 300 * test::kTimeScale) << "a quarter of the fastest collective";
}

}  // namespace theseus::telemetry
