// The leader's live verdicts (doctor/live_doctor.h): published after two evaluations agree, with
// the culprit; kept while the fault comes and goes; withdrawn once it is gone for the hold time;
// written into (and cleared from) an attribute store.
#include <gtest/gtest.h>

#include "doctor/live_doctor.h"

namespace theseus::doctor {
namespace {

constexpr uint64_t kSecond = 1'000'000'000;

// 4 ranks on 4 hosts; every link 1 GB/s but `slowFrom` -> `slowTo` (if any) at 0.05 GB/s.
attrs::ClusterView view(uint64_t nowNs, int slowFrom = -1, int slowTo = -1) {
  attrs::ClusterView v;
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b) {
      if (a == b) continue;
      const bool slow = a == slowFrom && b == slowTo;
      const std::string link = "link." + std::to_string(a) + "." + std::to_string(b);
      v.set(link + ".gbps", slow ? 0.05 : 1.0, attrs::Source::kProbe, a, nowNs);
      v.set(link + ".bottleneck", slow ? 0.8 : 0.05, attrs::Source::kProbe, a, nowNs);
    }
  return v;
}

LiveDoctor doctorOf4() {
  Placement p;
  p.nranks = 4;
  p.hostOf = {0, 1, 2, 3};
  return LiveDoctor(p);
}

}  // namespace

TEST(LiveDoctor, AVerdictIsPublishedOnceTwoEvaluationsAgree) {
  LiveDoctor d = doctorOf4();
  EXPECT_FALSE(d.evaluate(view(kSecond, 2, 3), kSecond));
  EXPECT_TRUE(d.published().empty());
  EXPECT_TRUE(d.evaluate(view(2 * kSecond, 2, 3), 2 * kSecond));
  ASSERT_EQ(d.published().count("doctor.slow_link.2.3"), 1u);
  EXPECT_NEAR(d.published().at("doctor.slow_link.2.3"), 20, 0.5);
  EXPECT_EQ(d.published().at("doctor.culprit.rank"), 2);
  EXPECT_EQ(d.published().at("doctor.culprit.host"), 2);
  EXPECT_EQ(d.published().size(), 3u);
  EXPECT_NE(d.describe().find("link 2 -> 3"), std::string::npos) << d.describe();
}

TEST(LiveDoctor, OneOddEvaluationPublishesNothing) {
  LiveDoctor d = doctorOf4();
  EXPECT_FALSE(d.evaluate(view(kSecond, 2, 3), kSecond));
  EXPECT_FALSE(d.evaluate(view(2 * kSecond), 2 * kSecond));
  EXPECT_FALSE(d.evaluate(view(3 * kSecond, 2, 3), 3 * kSecond));
  EXPECT_TRUE(d.published().empty());
}

TEST(LiveDoctor, AFlappingLinkStaysNamedAndAHealedOneIsWithdrawnAfterTheHoldTime) {
  LiveDoctor d = doctorOf4();
  uint64_t t = kSecond;
  d.evaluate(view(t, 0, 1), t);
  d.evaluate(view(t + kSecond, 0, 1), t + kSecond);
  ASSERT_EQ(d.published().count("doctor.slow_link.0.1"), 1u);
  // Fine for a second, slow for a second, ...: named throughout.
  for (int i = 2; i < 10; ++i) {
    t = kSecond * (1 + i);
    d.evaluate(i % 2 ? view(t, 0, 1) : view(t), t);
    EXPECT_EQ(d.published().count("doctor.slow_link.0.1"), 1u) << i;
  }
  // Healed: withdrawn once not seen for longer than the hold time.
  for (int i = 10; i < 16; ++i) {
    t = kSecond * (1 + i);
    d.evaluate(view(t), t);
  }
  EXPECT_TRUE(d.published().empty());
}

TEST(LiveDoctor, PublishWritesTheVerdictIntoTheStoreAndClearsItAfterwards) {
  LiveDoctor d = doctorOf4();
  attrs::AttributeStore store(0);
  ASSERT_TRUE(store.set("doctor.slow_link.1.0", 9, attrs::Source::kProbe).isOk());  // an old verdict
  ASSERT_TRUE(store.set("job.phase", 2, attrs::Source::kApi).isOk());
  d.evaluate(view(kSecond, 3, 0), kSecond);
  d.evaluate(view(2 * kSecond, 3, 0), 2 * kSecond);
  d.publish(store);
  EXPECT_FALSE(store.get("doctor.slow_link.1.0").has_value());
  ASSERT_TRUE(store.get("doctor.slow_link.3.0").has_value());
  EXPECT_EQ(store.get("doctor.culprit.rank")->value, 3);
  EXPECT_TRUE(store.get("job.phase").has_value());
  for (int i = 3; i < 9; ++i) d.evaluate(view(i * kSecond), i * kSecond);
  d.publish(store);
  for (const auto& [name, a] : store.list()) EXPECT_NE(name.rfind("doctor.", 0), 0u) << name;
  EXPECT_TRUE(store.get("job.phase").has_value());
}

}  // namespace theseus::doctor
