// The alpha-beta cost model: exact times for programs whose cost is known in
// closed form, link serialisation, local copy cost, bytes per link and the
// critical path.
#include <gtest/gtest.h>

#include <algorithm>

#include "program_helpers.h"
#include "schedule/builtins.h"
#include "schedule/user/cost_model.h"
#include "schedule/user/json_schedule.h"

namespace theseus::schedule::user {
namespace {

using namespace theseus::schedule::testing;

constexpr size_t kMiB = 1 << 20;
// alpha 5 us, beta 10 GB/s = 10000 bytes/us.
double transferUs(double bytes) { return bytes / 1e4; }

TEST(CostModel, OneExchange) {
  // 2-rank allgather: both ranks copy, then send their block to each other at once.
  Program p = program(Collective::kAllGather, {{copy(in(0), out(0)), send(1, in(0)), recv(1, out(1))},
                                               {copy(in(0), out(1)), send(0, in(0)), recv(0, out(0))}});
  auto c = estimateCost(p, kMiB, LinkParams{});
  ASSERT_TRUE(c.isOk()) << c.status().message();
  EXPECT_NEAR(c.value().timeUs, 5 + transferUs(kMiB), 1e-9);
  EXPECT_EQ(c.value().messages, 2u);
  EXPECT_EQ(c.value().totalBytes, 2 * kMiB);
  ASSERT_EQ(c.value().links.size(), 2u);
  EXPECT_EQ(c.value().links[0].from, 0);
  EXPECT_EQ(c.value().links[0].to, 1);
  EXPECT_EQ(c.value().links[0].bytes, kMiB);
  // With a local bandwidth the copy comes first (it does not block the send, which reads the input).
  LinkParams slowCopy;
  slowCopy.localGBps = 1;  // 1 MiB in 1048.576 us
  auto d = estimateCost(p, kMiB, slowCopy);
  ASSERT_TRUE(d.isOk());
  EXPECT_NEAR(d.value().timeUs, transferUs(kMiB) * 10, 1e-9);
}

TEST(CostModel, MessagesShareALinkAndStreamsKeepOrder) {
  // Rank 0 sends two halves to rank 1. On one channel the second receive
  // waits for the first (messages of a stream match in order): 2 (alpha + busy).
  auto exchange = [](uint8_t secondChannel) {
    Program p = program(Collective::kAllGather,
                        {{copy(in(0, 2), out(0, 2)), send(1, in(0)), send(1, in(1), secondChannel), recv(1, out(2)),
                          recv(1, out(3), secondChannel)},
                         {copy(in(0, 2), out(2, 2)), send(0, in(0)), send(0, in(1), secondChannel), recv(0, out(0)),
                          recv(0, out(1), secondChannel)}},
                        2, 0, false, 2);
    return estimateCost(p, kMiB, LinkParams{});
  };
  auto same = exchange(0);
  ASSERT_TRUE(same.isOk()) << same.status().message();
  EXPECT_NEAR(same.value().timeUs, 2 * (5 + transferUs(kMiB / 2)), 1e-9);
  EXPECT_EQ(same.value().links[0].messages, 2u);
  // On two channels they are independent streams but share the link: the
  // second starts when the link is free, alpha overlaps: busy + busy + alpha.
  auto two = exchange(1);
  ASSERT_TRUE(two.isOk()) << two.status().message();
  EXPECT_NEAR(two.value().timeUs, 2 * transferUs(kMiB / 2) + 5, 1e-9);
  // Its critical path: the second message waited for the link, i.e. for the first.
  ASSERT_EQ(two.value().criticalPath.size(), 2u);
  EXPECT_EQ(two.value().criticalPath[0].step, 1u);
  EXPECT_EQ(two.value().criticalPath[1].step, 2u);
}

// Ports: rank 0 sends its block to ranks 1 and 2 on two links. Without ports both go at
// once; with each rank on its own port (host) rank 0's NIC sends them one after the other;
// ranks sharing a port (one host) exchange over their link only.
TEST(CostModel, PortsSerialiseARanksMessagesToOtherHosts) {
  Program p = program(Collective::kAllGather,
                      {{copy(in(0), out(0)), send(1, in(0)), send(2, in(0), 1)},
                       {copy(in(0), out(1)), recv(0, out(0))},
                       {copy(in(0), out(2)), recv(0, out(0), 1)}},
                      1, 0, false, 2);
  auto free = estimateCost(p, kMiB, LinkParams{});
  ASSERT_TRUE(free.isOk()) << free.status().message();
  EXPECT_NEAR(free.value().timeUs, 5 + transferUs(kMiB), 1e-9);
  LinkParams nics;
  nics.portOf = {0, 1, 2};
  auto ported = estimateCost(p, kMiB, nics);
  ASSERT_TRUE(ported.isOk()) << ported.status().message();
  EXPECT_NEAR(ported.value().timeUs, 5 + 2 * transferUs(kMiB), 1e-9);
  nics.portOf = {0, 0, 0};
  EXPECT_NEAR(estimateCost(p, kMiB, nics).value().timeUs, 5 + transferUs(kMiB), 1e-9);
  nics.portOf = {0, 1};
  EXPECT_FALSE(estimateCost(p, kMiB, nics).isOk());
}

TEST(CostModel, RingAllreduceMatchesTheClosedForm) {
  auto s = loadJsonSchedule(std::string(THESEUS_EXAMPLES_DIR) + "/ring_allreduce_8.json");
  ASSERT_TRUE(s.isOk()) << s.status().message();
  const Program& p = s.value()->programs()[0].program;
  const size_t bytes = 8 * kMiB;
  auto c = estimateCost(p, bytes, LinkParams{});
  ASSERT_TRUE(c.isOk()) << c.status().message();
  // 2 (n - 1) dependent messages of S / n each.
  EXPECT_NEAR(c.value().timeUs, 14 * (5 + transferUs(bytes / 8.0)), 1e-6);
  EXPECT_EQ(c.value().messages, 8u * 14u);
  ASSERT_EQ(c.value().links.size(), 8u);
  for (const LinkLoad& l : c.value().links) EXPECT_EQ(l.bytes, 14 * bytes / 8);
  EXPECT_EQ(c.value().maxLinkBytes, 14 * bytes / 8);
  // The critical path goes twice around the ring: 14 messages, each a step of
  // the next rank in the ring order (0 2 4 6 7 5 3 1), step index one higher.
  const std::vector<CriticalStep>& path = c.value().criticalPath;
  ASSERT_EQ(path.size(), 14u);
  const int order[] = {0, 2, 4, 6, 7, 5, 3, 1};
  auto position = [&](int rank) { return static_cast<int>(std::find(order, order + 8, rank) - order); };
  for (size_t i = 1; i < path.size(); ++i) {
    EXPECT_EQ(position(path[i].rank), (position(path[i - 1].rank) + 1) % 8);
    EXPECT_EQ(path[i].step, path[i - 1].step + 1);
    EXPECT_NEAR(path[i].endUs - path[i - 1].endUs, 5 + transferUs(bytes / 8.0), 1e-6);
  }
  for (int r = 0; r < 8; ++r) EXPECT_NEAR(c.value().rankTimeUs[r], c.value().timeUs, 1e-6);
}

TEST(CostModel, FewerRoundsWinForSmallMessages) {
  // Bandwidth-bound sizes favour the ring, latency-bound ones recursive doubling.
  GenerateRequest req;
  req.collective = Collective::kAllReduce;
  req.nranks = 8;
  auto ring = generateBuiltin("ring", req), rd = generateBuiltin("recursive_doubling", req);
  ASSERT_TRUE(ring.isOk() && rd.isOk());
  auto cost = [&](const Program& p, size_t bytes) {
    auto c = estimateCost(p, bytes, LinkParams{});
    EXPECT_TRUE(c.isOk()) << c.status().message();
    return c.isOk() ? c.value().timeUs : -1.0;
  };
  auto small = [&](const Program& p) { return cost(p, 64); };
  auto large = [&](const Program& p) { return cost(p, 64 * kMiB); };
  EXPECT_LT(small(rd.value()), small(ring.value()));
  EXPECT_LT(large(ring.value()), large(rd.value()));
}

TEST(CostModel, BadInput) {
  Program p = program(Collective::kAllGather, {{copy(in(0), out(0)), send(1, in(0)), recv(1, out(1))},
                                               {copy(in(0), out(1)), send(0, in(0)), recv(0, out(0))}});
  LinkParams zero;
  zero.betaGBps = 0;
  auto c = estimateCost(p, kMiB, zero);
  ASSERT_FALSE(c.isOk());
  EXPECT_NE(c.status().message().find("beta > 0"), std::string::npos);
  p.ranks[1].steps.pop_back();  // rank 0's message to... rank 1 never receives it
  auto u = estimateCost(p, kMiB, LinkParams{});
  ASSERT_FALSE(u.isOk());
  EXPECT_NE(u.status().message().find("send without a matching receive"), std::string::npos) << u.status().message();
  p.ranks[0].steps[1].sendPeer = 9;
  EXPECT_FALSE(estimateCost(p, kMiB, LinkParams{}).isOk());
}

}  // namespace
}  // namespace theseus::schedule::user
