// The smaller parts of the control plane: the decision log (format, file with
// %r/%p/%c, truncation only by the first opener), random test tables (valid
// for every collective and rank count, deterministic), and telemetry records
// (ring order, counters, waits left unmeasured without transports).
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "epoch/decision_log.h"
#include "epoch/link_prober.h"
#include "epoch/test_tables.h"
#include "exec/plan.h"
#include "schedule/builtins.h"
#include "telemetry/telemetry.h"

namespace theseus {
namespace {

std::string readFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

policy::DecisionTable sampleTable() {
  policy::DecisionTable t;
  policy::Decision small, large;
  small.schedule = "recursive_doubling";
  large.schedule = "ring";
  large.params.order = {0, 2, 1, 3};
  large.sliceBytes = 65536;
  (void)t.add(schedule::Collective::kAllReduce, 0, 32768, small);
  (void)t.add(schedule::Collective::kAllReduce, 32769, UINT64_MAX, large);
  return t;
}

TEST(DecisionLog, LinesAreJsonWithTheCollectiveAndTheTable) {
  epoch::DecisionLog log(0xabcdef, 3);
  EXPECT_TRUE(log.path().empty());
  log.record(0, epoch::DecisionLog::formatBody(1, "initial", sampleTable()));
  log.record(128, epoch::DecisionLog::formatBody(2, "policy 'x': \"quoted\"", sampleTable()));
  log.record(130, epoch::DecisionLog::formatCaptured(2, "allreduce", "ring", 4096));  // captured into a CUDA graph
  std::string text = log.text();
  std::istringstream in(text);
  std::string line;
  std::vector<nlohmann::json> lines;
  while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(log.lines(), 3u);
  EXPECT_EQ(lines[2]["seq"], 130);
  EXPECT_EQ(lines[2]["comm"], "0000000000abcdef");
  EXPECT_EQ(lines[2]["captured"]["collective"], "allreduce");
  EXPECT_EQ(lines[2]["captured"]["schedule"], "ring");
  EXPECT_EQ(lines[2]["captured"]["bytes"], 4096);
  EXPECT_EQ(lines[2]["captured"]["version"], 2);
  EXPECT_EQ(lines[1]["seq"], 128);
  EXPECT_EQ(lines[1]["version"], 2);
  EXPECT_EQ(lines[1]["comm"], "0000000000abcdef");
  EXPECT_EQ(lines[1]["reason"], "policy 'x': \"quoted\"");
  ASSERT_EQ(lines[1]["table"].size(), 2u);
  EXPECT_EQ(lines[1]["table"][1]["collective"], "allreduce");
  EXPECT_EQ(lines[1]["table"][1]["schedule"], "ring");
  EXPECT_EQ(lines[1]["table"][1]["params"], "order=0,2,1,3");
  EXPECT_EQ(lines[1]["table"][1]["slice"], 65536);
  EXPECT_EQ(lines[1]["table"][1]["min"], 32769);
}

TEST(DecisionLog, FileWithPatternsAndOneTruncationPerProcess) {
  std::string dir = "/tmp/theseus-declog-" + std::to_string(getpid());
  ASSERT_EQ(system(("mkdir -p " + dir).c_str()), 0);
  std::string pattern = dir + "/log.%r.%c";
  {
    std::ofstream stale(dir + "/log.2.0000000000000007");
    stale << "stale line from an earlier run\n";
  }
  setenv("THESEUS_DECISION_LOG", pattern.c_str(), 1);
  {
    epoch::DecisionLog a(7, 2);
    EXPECT_EQ(a.path(), dir + "/log.2.0000000000000007");
    a.record(0, epoch::DecisionLog::formatBody(1, "a", sampleTable()));
    epoch::DecisionLog b(7, 2);  // same path in the same process: appends
    b.record(5, epoch::DecisionLog::formatBody(2, "b", sampleTable()));
  }
  unsetenv("THESEUS_DECISION_LOG");
  std::string text = readFile(dir + "/log.2.0000000000000007");
  EXPECT_EQ(text.find("stale"), std::string::npos);
  EXPECT_NE(text.find("\"seq\":0"), std::string::npos);
  EXPECT_NE(text.find("\"seq\":5"), std::string::npos);
  setenv("THESEUS_DECISION_LOG", "/x/%p/y", 1);
  EXPECT_EQ(epoch::DecisionLog::configuredPath(0, 1), "/x/" + std::to_string(getpid()) + "/y");
  unsetenv("THESEUS_DECISION_LOG");
  (void)system(("rm -rf " + dir).c_str());
}

TEST(RandomTables, ValidForEveryCollectiveAndDeterministic) {
  for (int n = 1; n <= 8; ++n) {
    for (uint64_t v = 1; v <= 20; ++v) {
      policy::DecisionTable t = epoch::randomTable(42, v, n, {});
      EXPECT_TRUE(t.sameDecisions(epoch::randomTable(42, v, n, {})));
      for (int c = 0; c < policy::DecisionTable::kCollectives; ++c) {
        auto coll = static_cast<schedule::Collective>(c);
        for (const auto& r : t.ranges(coll)) {
          schedule::GenerateRequest req;
          req.collective = coll;
          req.nranks = n;
          req.root = n - 1;
          req.params = r.decision.params;
          req.onlyRank = 0;
          auto prog = schedule::generateBuiltin(r.decision.schedule, req);
          ASSERT_TRUE(prog.isOk()) << r.decision.toString() << " for " << schedule::collectiveName(coll) << " on "
                                   << n << " ranks: " << prog.status().message();
          EXPECT_LE(r.decision.sliceBytes, 128u << 10);
          EXPECT_EQ(r.decision.sliceBytes % 64, 0u);
        }
        if (c == 5 || c == 6 || c == 7) continue;  // not collectives
        ASSERT_FALSE(t.ranges(coll).empty()) << c;
        EXPECT_EQ(t.ranges(coll).front().minBytes, 0u);
        EXPECT_EQ(t.ranges(coll).back().maxBytes, UINT64_MAX);
      }
      auto copy = policy::DecisionTable::deserialize(t.serialize());
      ASSERT_TRUE(copy.isOk());
      EXPECT_TRUE(copy.value().sameDecisions(t));
    }
  }
  EXPECT_FALSE(epoch::randomTable(1, 1, 4, {}).sameDecisions(epoch::randomTable(1, 2, 4, {})));
}

// The table's wire format is read strictly (a PREPARE comes from another process): numbers must be
// integers of the right sign (found by fuzzing: a float beyond 2^64 for "min" was converted, which
// is undefined behaviour), fields must have their types, and a plugin's non-UTF-8 `why` serializes.
TEST(DecisionTableWire, RejectsWhatIsNotExactlyItsFormatAndSerializesAnyWhy) {
  auto table = [](const std::string& range) {
    return R"({"format": 1, "version": 3, "ranges": [)" + range + "]}";
  };
  const std::string good = R"({"collective": 4, "min": 0, "max": 65536, "schedule": "ring", "params": "", "slice": 0})";
  ASSERT_TRUE(policy::DecisionTable::deserialize(table(good)).isOk());
  struct Case {
    std::string text, expect;
  };
  const std::vector<Case> cases = {
      {table(R"({"collective": 4, "min": 1.8464e19, "max": 1, "schedule": "ring", "params": "", "slice": 0})"),
       "\"min\" must be a non-negative integer"},
      {table(R"({"collective": 4.5, "min": 0, "max": 1, "schedule": "ring", "params": "", "slice": 0})"),
       "\"collective\" must be a non-negative integer"},
      {table(R"({"collective": 4, "min": 0, "max": 1, "schedule": "ring", "params": "", "slice": -64})"),
       "\"slice\" must be a non-negative integer"},
      {table(R"({"collective": 7, "min": 0, "max": 1, "schedule": 3, "params": "", "slice": 0})"),
       "\"schedule\" must be a string"},
      {table(R"({"collective": 11, "min": 0, "max": 1, "schedule": "ring", "params": "", "slice": 0})"),
       "bad collective 11"},
      {table(R"({"collective": 4, "min": 0, "max": 1, "schedule": "ring", "params": "", "slice": 0, "why": 1})"),
       "\"why\" must be a string"},
      {R"({"format": 1.0, "version": 3, "ranges": []})", "unknown wire format"},
      {R"({"format": 1, "version": 1e300, "ranges": []})", "\"version\" must be a non-negative integer"},
      {R"([1, 2])", "not a JSON object"},
      {R"({"format": 1, "version": 1, "ranges": [1]})", "range 0 is not an object"},
  };
  for (const Case& c : cases) {
    auto t = policy::DecisionTable::deserialize(c.text);
    ASSERT_FALSE(t.isOk()) << c.text;
    EXPECT_NE(t.status().message().find(c.expect), std::string::npos) << t.status().message();
  }
  policy::DecisionTable t;
  policy::Decision d;
  d.schedule = "ring";
  d.why = "plugin says \xff\xfe";
  ASSERT_TRUE(t.add(schedule::Collective::kAllReduce, 0, UINT64_MAX, d).isOk());
  auto copy = policy::DecisionTable::deserialize(t.serialize());
  ASSERT_TRUE(copy.isOk()) << copy.status().message();
  EXPECT_TRUE(copy.value().sameDecisions(t));
}

TEST(Telemetry, RecordsInOrderAndCounters) {
  telemetry::Recorder rec(0, 4, nullptr, nullptr, 8);
  exec::Plan p;
  p.opName = "allreduce";
  p.scheduleName = "ring";
  for (uint64_t s = 0; s < 20; ++s) {
    p.seq = s;
    p.bytes = 100 + s;
    rec.onPlanDone(p, 1000 * (s + 1));
  }
  exec::Plan q;
  q.opName = "send/recv";
  q.scheduleName = "p2p";
  q.tag = exec::kP2pTag;  // what makes a plan point-to-point (comm/lower_p2p.cc)
  q.bytes = 7;
  rec.onPlanDone(q, 5);
  auto c = rec.counters();
  EXPECT_EQ(c.collectives, 20u);
  EXPECT_EQ(c.p2pPlans, 1u);
  EXPECT_EQ(c.bytes, 20u * 100 + 190 + 7);
  auto r = rec.recent(100);
  ASSERT_GE(r.size(), 6u);  // the ring holds 8; the newest may be in flight for a concurrent reader
  ASSERT_LE(r.size(), 8u);
  EXPECT_EQ(r.back().op, std::string("send/recv"));
  for (size_t i = 1; i + 1 < r.size(); ++i) EXPECT_EQ(r[i].seq, r[i - 1].seq + 1);
  EXPECT_EQ(r.front().waitPeer, -1);
  EXPECT_NE(telemetry::Recorder::describe(r.front()).find("[ring]"), std::string::npos);
  EXPECT_EQ(rec.recent(3).size(), 3u);
}

// A probe that changes a link's class (below a quarter of the median of the other links'
// latest probes, or not) is confirmed after a quarter of the interval; otherwise the next
// probe comes an interval later.
TEST(LinkProber, AProbeThatChangesALinksClassIsConfirmedSoon) {
  const uint64_t interval = 500'000'000;
  const std::vector<double> others = {1.0, 1.2, -1, 0.9};  // -1: not probed yet
  int cls = -1;
  EXPECT_EQ(epoch::LinkProber::nextProbeDelayNs(1.1, others, &cls, interval), interval);  // first: no change
  EXPECT_EQ(cls, 0);
  EXPECT_EQ(epoch::LinkProber::nextProbeDelayNs(0.9, others, &cls, interval), interval);
  EXPECT_EQ(epoch::LinkProber::nextProbeDelayNs(0.05, others, &cls, interval), interval / 4);  // turned slow
  EXPECT_EQ(cls, 1);
  EXPECT_EQ(epoch::LinkProber::nextProbeDelayNs(0.04, others, &cls, interval), interval);  // still slow
  EXPECT_EQ(epoch::LinkProber::nextProbeDelayNs(0.8, others, &cls, interval), interval / 4);  // healed
  EXPECT_EQ(cls, 0);
  // Nothing to compare with: the usual interval, the class unknown.
  int unknown = -1;
  EXPECT_EQ(epoch::LinkProber::nextProbeDelayNs(0.05, {-1, -1}, &unknown, interval), interval);
  EXPECT_EQ(unknown, -1);
}

}  // namespace
}  // namespace theseus
