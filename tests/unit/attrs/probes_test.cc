// ProbeSet: EWMAs, the small-transfer filter, publishing only what changed,
// folding in cumulative transport counters, concurrent recorders.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "attrs/probes.h"

namespace theseus::attrs {
namespace {

constexpr uint64_t kMiB = 1 << 20;

TEST(Ewma, FirstSampleThenWeightedSteps) {
  Ewma e;
  EXPECT_FALSE(e.hasValue());
  e.add(10, 0.5, 1);
  EXPECT_EQ(e.value(), 10);
  e.add(20, 0.5, 2);
  EXPECT_EQ(e.value(), 15);
  e.add(15, 0.5, 3);
  EXPECT_EQ(e.value(), 15);
  EXPECT_EQ(e.updates(), 3u);
  EXPECT_EQ(e.lastNs(), 3u);
}

TEST(ProbeSet, PublishesConventionalNames) {
  ProbeSet p(1, 4, 0.5);
  AttributeStore s(1);
  p.recordTransfer(2, 4 * kMiB, 4 * kMiB);  // 1 byte/ns = 1 GB/s
  p.recordLatency(2, 12.5);
  p.recordWait(3, 250000);  // 250 us
  p.recordCollective(2000000);
  EXPECT_EQ(p.publish(s), 4u);
  EXPECT_DOUBLE_EQ(s.get("link.1.2.gbps")->value, 1.0);
  EXPECT_EQ(s.get("link.1.2.gbps")->source, Source::kProbe);
  EXPECT_DOUBLE_EQ(s.get("link.1.2.latency_us")->value, 12.5);
  EXPECT_DOUBLE_EQ(s.get("rank.3.wait_us")->value, 250);
  EXPECT_DOUBLE_EQ(s.get("rank.1.coll_us")->value, 2000);
  EXPECT_EQ(s.size(), 4u);
  // Nothing changed: nothing is written again.
  uint64_t gen = s.generation();
  EXPECT_EQ(p.publish(s), 0u);
  EXPECT_EQ(s.generation(), gen);
  p.recordTransfer(2, 4 * kMiB, 2 * kMiB);  // 2 GB/s: EWMA 1.5
  EXPECT_EQ(p.publish(s), 1u);
  EXPECT_DOUBLE_EQ(s.get("link.1.2.gbps")->value, 1.5);
}

TEST(ProbeSet, IgnoresSmallTransfersBadPeersAndItself) {
  ProbeSet p(0, 2, 0.5);
  AttributeStore s(0);
  p.recordTransfer(1, ProbeSet::kMinThroughputBytes - 1, 10);  // latency-bound: not a throughput sample
  p.recordTransfer(1, kMiB, 0);
  p.recordTransfer(0, kMiB, kMiB);
  p.recordTransfer(2, kMiB, kMiB);
  p.recordTransfer(-1, kMiB, kMiB);
  p.recordLatency(5, 1);
  p.recordWait(-3, 1);
  EXPECT_EQ(p.publish(s), 0u);
  EXPECT_EQ(s.size(), 0u);
}

TEST(ProbeSet, FoldsInCumulativePeerStats) {
  constexpr uint64_t kMs = 1000000;
  ProbeSet p(0, 3, 1.0);  // weight 1: the latest sample
  AttributeStore s(0);
  transport::PeerStats st;
  st.bytesSent = 1 * kMiB;
  st.sendBusyNs = 1 * kMiB;
  p.observePeerStats(1, st, 1000 * kMs);  // the first call only sets the baseline
  EXPECT_EQ(p.publish(s), 0u);
  // 100 ms later: 8 MiB sent in 4 Mi ns of busy time, 10 messages received after 30 ms of waiting.
  st.bytesSent += 8 * kMiB;
  st.sendBusyNs += 4 * kMiB;
  st.messagesReceived = 10;
  st.bytesReceived = 2 * kMiB;
  st.recvWaitNs = 30 * kMs;
  p.observePeerStats(1, st, 1100 * kMs);
  p.publish(s);
  EXPECT_DOUBLE_EQ(s.get("link.0.1.gbps")->value, 2.0);
  EXPECT_DOUBLE_EQ(s.get("rank.1.wait_us")->value, 30000);
  EXPECT_NEAR(s.get("link.0.1.bottleneck")->value, double(4 * kMiB) / double(100 * kMs), 1e-12);  // queued
  EXPECT_DOUBLE_EQ(s.get("link.1.0.bottleneck")->value, 0.3);                                     // waited
  // Too few new bytes: nothing yet, the next sample covers both intervals.
  st.bytesSent += 1024;
  st.sendBusyNs += 1024;
  p.observePeerStats(1, st, 1200 * kMs);
  EXPECT_EQ(p.publish(s), 0u);
  st.bytesSent += 4 * kMiB;
  st.sendBusyNs += 8 * kMiB;
  st.messagesReceived += 5;
  st.bytesReceived += 1 * kMiB;
  st.recvWaitNs += 180 * kMs;
  p.observePeerStats(1, st, 1300 * kMs);
  p.publish(s);
  EXPECT_NEAR(s.get("link.0.1.gbps")->value, double(4 * kMiB + 1024) / double(8 * kMiB + 1024), 1e-12);
  EXPECT_NEAR(s.get("link.0.1.bottleneck")->value, double(8 * kMiB + 1024) / double(200 * kMs), 1e-12);
  EXPECT_DOUBLE_EQ(s.get("rank.1.wait_us")->value, 180000);
  EXPECT_DOUBLE_EQ(s.get("link.1.0.bottleneck")->value, 180.0 / 200.0);
  // No new messages: no wait sample, even if the wait counter moved.
  st.recvWaitNs += 99999;
  p.observePeerStats(1, st, 1400 * kMs);
  p.publish(s);
  EXPECT_DOUBLE_EQ(s.get("rank.1.wait_us")->value, 180000);
  // Counters that went backwards (a new connection) restart the baseline without a sample.
  transport::PeerStats fresh;
  p.observePeerStats(1, fresh, 1500 * kMs);
  EXPECT_EQ(p.publish(s), 0u);
  // Fractions never exceed 1 (busy time measured on several channels at once).
  fresh.bytesSent = 1 * kMiB;
  fresh.sendBusyNs = 500 * kMs;
  p.observePeerStats(1, fresh, 1600 * kMs);
  p.publish(s);
  EXPECT_DOUBLE_EQ(s.get("link.0.1.bottleneck")->value, 1.0);
}

// A TCP sender's queue empties into the kernel long before a slow link delivers the
// bytes; the kernel's in-flight time (PeerStats::linkBusyNs) is what the link took.
TEST(ProbeSet, TheLongerOfQueueAndPathTimeMeasuresTheLink) {
  constexpr uint64_t kMs = 1000000;
  ProbeSet p(0, 2, 1.0);
  AttributeStore s(0);
  transport::PeerStats st;
  p.observePeerStats(1, st, 1000 * kMs);
  st.bytesSent = 8 * kMiB;
  st.sendBusyNs = 1 * kMs;   // queued 1 ms: 8 GB/s by our own queue
  st.linkBusyNs = 80 * kMs;  // in flight 80 ms: ~0.1 GB/s, the link
  p.observePeerStats(1, st, 1100 * kMs);
  p.publish(s);
  EXPECT_NEAR(s.get("link.0.1.gbps")->value, double(8 * kMiB) / double(80 * kMs), 1e-12);
  EXPECT_NEAR(s.get("link.0.1.bottleneck")->value, 0.8, 1e-12);
  // An emulated throttle holds data in our queue instead: the queue time counts.
  st.bytesSent += 8 * kMiB;
  st.sendBusyNs += 50 * kMs;
  st.linkBusyNs += 2 * kMs;
  p.observePeerStats(1, st, 1200 * kMs);
  p.publish(s);
  EXPECT_NEAR(s.get("link.0.1.gbps")->value, double(8 * kMiB) / double(50 * kMs), 1e-12);
  // The path alone (the kernel's view, for the doctor): 8 MiB in 2 ms, whatever the queue said.
  EXPECT_NEAR(s.get("link.0.1.path_gbps")->value, double(8 * kMiB) / double(2 * kMs), 1e-12);
}

// Idle time: from the end of one collective to the start of the next (rank.<me>.idle_us).
TEST(ProbeSet, TheTimeBetweenCollectivesIsIdleTime) {
  constexpr uint64_t kMs = 1000000;
  ProbeSet p(2, 4, 1.0);
  AttributeStore s(2);
  p.recordCollective(3 * kMs, 100 * kMs);  // ran 97..100 ms
  p.publish(s);
  EXPECT_FALSE(s.get("rank.2.idle_us").has_value()) << "no previous collective yet";
  p.recordCollective(2 * kMs, 125 * kMs);  // ran 123..125 ms: 23 ms after the previous one ended
  p.publish(s);
  EXPECT_DOUBLE_EQ(s.get("rank.2.idle_us")->value, 23000);
  p.recordCollective(10 * kMs, 130 * kMs);  // started before the previous one ended (a group): no sample
  p.publish(s);
  EXPECT_DOUBLE_EQ(s.get("rank.2.idle_us")->value, 23000);
}

// Every probe is its own sample (no averaging), published as probe_gbps.
TEST(ProbeSet, PublishesEveryProbe) {
  ProbeSet p(2, 4, 0.25);
  AttributeStore s(2);
  p.recordProbe(0, 1.5);
  p.recordProbe(2, 9);   // itself
  p.recordProbe(7, 9);   // no such peer
  p.recordProbe(1, 0);   // nothing measured
  EXPECT_EQ(p.publish(s), 1u);
  EXPECT_DOUBLE_EQ(s.get("link.2.0.probe_gbps")->value, 1.5);
  p.recordProbe(0, 0.05);
  EXPECT_EQ(p.publish(s), 1u);
  EXPECT_DOUBLE_EQ(s.get("link.2.0.probe_gbps")->value, 0.05);
}

TEST(ProbeSet, ConcurrentRecordersNeverLoseTheValueRange) {
  ProbeSet p(0, 2, 0.1);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20000; ++i) p.recordTransfer(1, kMiB, kMiB / (t + 1));  // 1..4 GB/s
    });
  }
  AttributeStore s(0);
  for (int i = 0; i < 50; ++i) p.publish(s);
  for (auto& th : threads) th.join();
  p.publish(s);
  double v = s.get("link.0.1.gbps")->value;
  EXPECT_GE(v, 1.0);
  EXPECT_LE(v, 4.0);
}

}  // namespace
}  // namespace theseus::attrs
