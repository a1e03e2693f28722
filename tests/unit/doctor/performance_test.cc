// The doctor's performance analysis (doctor/performance.h) over synthetic measurements of 8 ranks
// on 4 hosts (2 each): one slow link, a pipeline's innocent upstream links, a host that sends
// slowly, a host whose every link is slow, a rank whose own sends are slow, a rank alone on its
// host, a compute straggler from idle times, a link slow only over the window, and a healthy
// cluster whose links scatter.
#include <gtest/gtest.h>

#include "doctor/performance.h"

namespace theseus::doctor {
namespace {

constexpr double kShm = 8.0, kNet = 1.0;  // GB/s of healthy links within and between hosts

Placement fourHosts(int ranksPerHost = 2) {
  Placement p;
  p.nranks = 4 * ranksPerHost;
  for (int r = 0; r < p.nranks; ++r) p.hostOf.push_back(r / ranksPerHost);
  return p;
}

// Every link measured: healthy throughput (scattered by +-30%) with a small bottleneck fraction.
Measurements healthy(const Placement& p) {
  Measurements m(p);
  for (int a = 0; a < p.nranks; ++a)
    for (int b = 0; b < p.nranks; ++b) {
      if (a == b) continue;
      const double typical = p.hostIndex(a) == p.hostIndex(b) ? kShm : kNet;
      m.link(a, b).gbps = typical * (0.7 + 0.6 * ((a * 5 + b * 3) % 7) / 6.0);
      m.link(a, b).bottleneck = 0.05;
    }
  for (RankMeasure& r : m.ranks) {
    r.collUs = 5000;
    r.idleUs = 2000;
    r.waitUs = 300;
  }
  return m;
}

void slow(Measurements* m, int a, int b, double factor, double bottleneck = 0.7) {
  m->link(a, b).gbps /= factor;
  m->link(a, b).bottleneck = bottleneck;
}

std::vector<std::string> kinds(const std::vector<Finding>& f) {
  std::vector<std::string> k;
  for (const Finding& x : f) k.push_back(x.kind);
  return k;
}

}  // namespace

TEST(DoctorPerformance, AHealthyClusterWhoseLinksScatterHasNoFinding) {
  EXPECT_TRUE(analyzePerformance(healthy(fourHosts())).empty());
}

TEST(DoctorPerformance, OneSlowLinkIsNamedWithItsSlownessAndItsSender) {
  Measurements m = healthy(fourHosts());
  slow(&m, 3, 4, 20);
  auto f = analyzePerformance(m);
  ASSERT_EQ(kinds(f), std::vector<std::string>({"slow_link"}));
  EXPECT_EQ(f[0].links, std::vector<Link>({{3, 4}}));
  EXPECT_EQ(f[0].ranks, std::vector<int>({3}));
  EXPECT_GT(f[0].factor, 10);
  EXPECT_NE(f[0].words.find("between hosts"), std::string::npos) << f[0].words;
}

TEST(DoctorPerformance, LinksThatOnlyLookSlowBecauseAnotherHoldsThemBackAreNotBlamed) {
  // Upstream of the slow link 3 -> 4 the senders have data queued (low throughput) but their
  // receivers do not wait: small bottleneck fractions.
  Measurements m = healthy(fourHosts());
  slow(&m, 3, 4, 20);
  for (int a : {0, 1, 2}) slow(&m, a, a + 1, 10, 0.02);
  auto f = analyzePerformance(m);
  ASSERT_EQ(kinds(f), std::vector<std::string>({"slow_link"}));
  EXPECT_EQ(f[0].links, std::vector<Link>({{3, 4}}));
}

TEST(DoctorPerformance, ASlowPathBetweenTwoHostsIsOneVerdictAndItsReverseIsItsAcknowledgements) {
  // Host 1 -> host 2 (ranks 2, 3 -> 4, 5) shaped; TCP acknowledgements of host 2's transfers to
  // host 1 wait in the same queue, so two of the reverse links look even slower.
  Measurements m = healthy(fourHosts());
  for (int a : {2, 3})
    for (int b : {4, 5}) slow(&m, a, b, 50);
  slow(&m, 4, 3, 60);
  slow(&m, 5, 2, 20);
  auto f = analyzePerformance(m);
  ASSERT_EQ(kinds(f), std::vector<std::string>({"slow_link"})) << f[1].words;
  EXPECT_EQ(f[0].links.size(), 4u);
  EXPECT_EQ(f[0].ranks, std::vector<int>({2, 3}));
  EXPECT_NE(f[0].words.find("path from host 1 to host 2"), std::string::npos) << f[0].words;
  EXPECT_NE(f[0].evidence.back().find("acknowledgements"), std::string::npos) << f[0].evidence.back();
}

TEST(DoctorPerformance, LinksSlowedInTheWakeOfAFarSlowerOneAreItsEvidence) {
  Measurements m = healthy(fourHosts());
  slow(&m, 3, 4, 100);
  slow(&m, 5, 6, 10, 0.3);  // downstream in the pipeline: slower, but a tenth as slow
  auto f = analyzePerformance(m);
  ASSERT_EQ(kinds(f), std::vector<std::string>({"slow_link"}));
  EXPECT_EQ(f[0].links, std::vector<Link>({{3, 4}}));
  EXPECT_NE(f[0].evidence.back().find("link 5 -> 6"), std::string::npos) << f[0].evidence.back();
  // Two faults of similar severity are both named.
  slow(&m, 5, 6, 3, 0.3);
  EXPECT_EQ(analyzePerformance(m).size(), 2u);
}

TEST(DoctorPerformance, AHostThatSendsSlowlyIsOneVerdictNotTwelveLinks) {
  Measurements m = healthy(fourHosts());
  for (int a : {4, 5})
    for (int b = 0; b < 8; ++b)
      if (b != 4 && b != 5) slow(&m, a, b, 15);
  auto f = analyzePerformance(m);
  ASSERT_EQ(kinds(f), std::vector<std::string>({"slow_host"}));
  EXPECT_EQ(f[0].hosts, std::vector<int>({2}));
  EXPECT_EQ(f[0].ranks, std::vector<int>({4, 5}));
  EXPECT_EQ(f[0].links.size(), 12u);
  EXPECT_NE(f[0].words.find("sends slowly"), std::string::npos) << f[0].words;
}

TEST(DoctorPerformance, AHostWhoseEveryLinkIsSlow) {
  Measurements m = healthy(fourHosts());
  for (int a : {2, 3})
    for (int b = 0; b < 8; ++b)
      if (b != 2 && b != 3) {
        slow(&m, a, b, 15);
        slow(&m, b, a, 15);
      }
  auto f = analyzePerformance(m);
  ASSERT_EQ(kinds(f), std::vector<std::string>({"slow_host"}));
  EXPECT_EQ(f[0].hosts, std::vector<int>({1}));
  EXPECT_NE(f[0].words.find("both ways"), std::string::npos) << f[0].words;
}

TEST(DoctorPerformance, ARankWhoseOwnSendsAreSlowStragglesInCommunication) {
  // Rank 6's sends are slow on every link, its host neighbour 7's are not.
  Measurements m = healthy(fourHosts());
  for (int b = 0; b < 8; ++b)
    if (b != 6) slow(&m, 6, b, 10);
  auto f = analyzePerformance(m);
  ASSERT_EQ(kinds(f), std::vector<std::string>({"comm_straggler"}));
  EXPECT_EQ(f[0].ranks, std::vector<int>({6}));
  EXPECT_TRUE(f[0].hosts.empty());
  EXPECT_NE(f[0].words.find("sends slowly"), std::string::npos) << f[0].words;
}

TEST(DoctorPerformance, ARankAloneOnItsHostIsItsHost) {
  Measurements m = healthy(fourHosts(1));
  for (int b = 0; b < 4; ++b)
    if (b != 1) slow(&m, 1, b, 10);
  auto f = analyzePerformance(m);
  ASSERT_EQ(kinds(f), std::vector<std::string>({"slow_host"}));
  EXPECT_EQ(f[0].hosts, std::vector<int>({1}));
  EXPECT_EQ(f[0].ranks, std::vector<int>({1}));
}

TEST(DoctorPerformance, AComputeStragglerSpendsMoreTimeBetweenCollectives) {
  Measurements m = healthy(fourHosts());
  m.ranks[5].idleUs = 22000;  // 20 ms later than the others' 2 ms
  for (int r = 0; r < 8; ++r) m.ranks[r].collUs = r == 5 ? 4000 : 24000;
  auto f = analyzePerformance(m);
  ASSERT_EQ(kinds(f), std::vector<std::string>({"compute_straggler"}));
  EXPECT_EQ(f[0].ranks, std::vector<int>({5}));
  EXPECT_NEAR(f[0].factor, 20000, 1);
  // Half a millisecond late is noise, and so is 2 ms when collectives take 100 ms.
  m.ranks[5].idleUs = 2500;
  EXPECT_TRUE(analyzePerformance(m).empty());
  m.ranks[5].idleUs = 4000;
  for (RankMeasure& r : m.ranks) r.collUs = 100000;
  EXPECT_TRUE(analyzePerformance(m).empty());
}

TEST(DoctorPerformance, ALinkSlowOnlyOverTheWindowRecoveredOrFlaps) {
  Measurements m = healthy(fourHosts());
  for (int a = 0; a < 8; ++a)
    for (int b = 0; b < 8; ++b)
      if (a != b) {
        m.link(a, b).windowGbps = m.link(a, b).gbps;
        m.link(a, b).windowBottleneck = 0.05;
      }
  m.link(0, 7).windowGbps /= 8;
  m.link(0, 7).windowBottleneck = 0.4;
  auto f = analyzePerformance(m);
  ASSERT_EQ(kinds(f), std::vector<std::string>({"slow_link"}));
  EXPECT_EQ(f[0].links, std::vector<Link>({{0, 7}}));
  EXPECT_NE(f[0].words.find("fine in the latest"), std::string::npos) << f[0].words;
}

TEST(DoctorPerformance, ProbesJudgeLinksTheDataPathDoesNotUse) {
  // Only probes between hosts (the data path uses a ring that avoids host 3's links).
  Placement p = fourHosts(1);
  Measurements m(p);
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b)
      if (a != b) m.link(a, b).probeGbps = a == 3 || b == 3 ? 0.05 : 1.0;
  auto f = analyzePerformance(m);
  ASSERT_EQ(kinds(f), std::vector<std::string>({"slow_host"}));
  EXPECT_EQ(f[0].hosts, std::vector<int>({3}));
}

}  // namespace theseus::doctor
