// theseus-doctor's analysis on synthetic flight-recorder dumps: a mismatched collective, a wrong
// count, a rank that never arrived, a missing dump, the end of a wait chain, a straggler, a
// garbage dump, and a healthy job.
#include <gtest/gtest.h>

#include "doctor_analysis.h"

using theseus::doctor::diagnose;
using theseus::doctor::Finding;

namespace {

nlohmann::json entry(uint64_t seq, const char* op, uint64_t count, const char* state, uint64_t startNs = 0,
                     const char* waiting = nullptr) {
  nlohmann::json e = {{"id", seq + 1}, {"seq", seq},     {"op", op},           {"schedule", "ring"},
                      {"count", count}, {"dtype", "float"}, {"bytes", count * 4}, {"peer", -1},
                      {"state", state}, {"queued_ns", startNs}, {"start_ns", startNs}, {"end_ns", startNs + 10}};
  if (waiting != nullptr) e["waiting"] = waiting;
  return e;
}

nlohmann::json dump(int rank, int nranks, std::vector<nlohmann::json> entries) {
  return {{"format", 1}, {"rank", rank}, {"nranks", nranks}, {"comm", "abc"}, {"host", "h"},
          {"pid", 100 + rank}, {"reason", "test"}, {"now_ns", 0}, {"entries", entries}};
}

std::vector<Finding> run(const std::vector<nlohmann::json>& dumps) {
  std::vector<std::string> notes;
  return diagnose(dumps, &notes);
}

}  // namespace

TEST(Doctor, AMismatchedCollectiveNamesTheOddRank) {
  auto f = run({dump(0, 3, {entry(0, "allreduce", 10, "done"), entry(1, "allreduce", 10, "running")}),
                dump(1, 3, {entry(0, "allreduce", 10, "done"), entry(1, "allgather", 10, "running")}),
                dump(2, 3, {entry(0, "allreduce", 10, "done"), entry(1, "allreduce", 10, "running")})});
  ASSERT_FALSE(f.empty());
  EXPECT_EQ(f[0].kind, "mismatch");
  EXPECT_EQ(f[0].ranks, std::vector<int>({1}));
  EXPECT_NE(f[0].words.find("collective #1"), std::string::npos) << f[0].words;
}

TEST(Doctor, AWrongCountIsAMismatch) {
  auto f = run({dump(0, 2, {entry(0, "allreduce", 10, "running")}), dump(1, 2, {entry(0, "allreduce", 20, "running")})});
  ASSERT_FALSE(f.empty());
  EXPECT_EQ(f[0].kind, "mismatch");
  EXPECT_NE(f[0].words.find("10 x float"), std::string::npos) << f[0].words;
}

TEST(Doctor, ARankThatNeverArrivedAndAMissingDump) {
  auto f = run({dump(0, 4, {entry(4, "allreduce", 8, "done"), entry(5, "allreduce", 8, "running", 0, "waits for data from rank 2")}),
                dump(1, 4, {entry(4, "allreduce", 8, "done"), entry(5, "allreduce", 8, "running", 0, "waits for data from rank 0")}),
                dump(2, 4, {entry(4, "allreduce", 8, "done")})});
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].kind, "never_arrived");
  EXPECT_EQ(f[0].ranks, std::vector<int>({2}));
  EXPECT_EQ(f[1].kind, "missing_dump");
  EXPECT_EQ(f[1].ranks, std::vector<int>({3}));
}

TEST(Doctor, TheEndOfAWaitChainIsNamed) {
  // Every rank is at collective #7; 0 waits for 1, 1 for 2, 2 for nobody (it is not stuck).
  auto f = run({dump(0, 3, {entry(7, "allreduce", 8, "running", 0, "waits for data from rank 1")}),
                dump(1, 3, {entry(7, "allreduce", 8, "running", 0, "waits for data from rank 2")}),
                dump(2, 3, {entry(7, "allreduce", 8, "running")})});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].kind, "waits_for");
  EXPECT_EQ(f[0].ranks, std::vector<int>({2}));
}

TEST(Doctor, AStragglerInComputeArrivesLate) {
  std::vector<nlohmann::json> e0, e1, e2;
  for (uint64_t s = 0; s < 20; ++s) {
    const uint64_t t = s * 100000000;
    e0.push_back(entry(s, "allreduce", 8, "done", t));
    e1.push_back(entry(s, "allreduce", 8, "done", t + 200000));
    e2.push_back(entry(s, "allreduce", 8, "done", t + 30000000));  // 30 ms late every time
  }
  auto f = run({dump(0, 3, e0), dump(1, 3, e1), dump(2, 3, e2)});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].kind, "late_arrival");
  EXPECT_EQ(f[0].ranks, std::vector<int>({2}));
}

TEST(Doctor, AHealthyJobHasNoFinding) {
  auto f = run({dump(0, 2, {entry(0, "allreduce", 8, "done", 1000)}), dump(1, 2, {entry(0, "allreduce", 8, "done", 1000)})});
  EXPECT_TRUE(f.empty());
}

TEST(Doctor, AGarbageDumpIsReported) {
  auto f = run({nlohmann::json{{"format", 7}}, nlohmann::json{{"hello", 1}}});
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].kind, "bad_dump");
}
