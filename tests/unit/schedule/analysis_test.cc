// Program analysis: hazard edges (RAW, WAR, WAW, in-place aliasing), message
// order per (peer, channel), transitive reduction, reverse edges and peers.
#include <gtest/gtest.h>

#include "program_helpers.h"
#include "schedule/analysis.h"
#include "schedule/builtins.h"

namespace theseus::schedule {
namespace {

using namespace testing;  // NOLINT: the short constructors of program_helpers.h
using W = std::vector<uint32_t>;

// Rank 0's plan of a 4-rank program whose other ranks are empty.
RankPlan plan0(Collective c, std::vector<Step> steps, uint32_t cpb = 1, uint32_t scratch = 0, bool inPlace = false,
               uint32_t channels = 1) {
  Program p = program(c, {std::move(steps), {}, {}, {}}, cpb, scratch, inPlace, channels);
  Result<RankPlan> r = analyzeRank(p, 0);
  EXPECT_TRUE(r.isOk()) << r.status().message();
  return r.isOk() ? r.take() : RankPlan{};
}

TEST(Analysis, ReadAfterWrite) {
  RankPlan p = plan0(Collective::kAllReduce, {copy(in(0), scr(0)), send(1, scr(0)), send(2, in(0))}, 1, 1);
  EXPECT_EQ(p.steps[0].waitFor, W{});
  EXPECT_EQ(p.steps[1].waitFor, W{0});
  EXPECT_EQ(p.steps[2].waitFor, W{});  // reading the same input is no hazard
}

TEST(Analysis, WriteAfterReadAndWriteAfterWrite) {
  RankPlan p = plan0(Collective::kAllReduce,
                     {copy(in(0), out(0)), send(1, out(0)), send(2, out(0)), recv(3, out(0)), recv(1, out(0))});
  EXPECT_EQ(p.steps[1].waitFor, W{0});
  EXPECT_EQ(p.steps[2].waitFor, W{0});
  EXPECT_EQ(p.steps[3].waitFor, (W{1, 2}));  // both readers; the copy is implied by them
  EXPECT_EQ(p.steps[4].waitFor, W{3});       // WAW on the last writer only
}

TEST(Analysis, ReduceReadsItsDestination) {
  RankPlan p = plan0(Collective::kAllReduce, {recv(1, scr(0)), copy(in(0), out(0)), reduce(scr(0), out(0)),
                                              send(2, out(0))},
                     1, 1);
  EXPECT_EQ(p.steps[2].waitFor, (W{0, 1}));
  EXPECT_EQ(p.steps[3].waitFor, W{2});
}

TEST(Analysis, PartialOverlapOfRangesIsAHazard) {
  RankPlan p = plan0(Collective::kAllGather, {recv(1, out(1, 2)), send(2, out(2)), send(3, out(0))});
  EXPECT_EQ(p.steps[1].waitFor, W{0});
  EXPECT_EQ(p.steps[2].waitFor, W{});
}

TEST(Analysis, InPlaceAliasingMapsInputIntoOutput) {
  // allgather: the input of rank 0 is output block 0.
  std::vector<Step> steps = {send(1, in(0)), recv(1, out(0))};
  EXPECT_EQ(plan0(Collective::kAllGather, steps).steps[1].waitFor, W{});
  EXPECT_EQ(plan0(Collective::kAllGather, steps, 1, 0, true).steps[1].waitFor, W{0});
  // ... but not output block 1.
  std::vector<Step> other = {send(1, in(0)), recv(1, out(1))};
  EXPECT_EQ(plan0(Collective::kAllGather, other, 1, 0, true).steps[1].waitFor, W{});
  // reducescatter: the output of rank 0 is input block 0 (chunks 0..1 with 2 chunks per block).
  std::vector<Step> rs = {send(1, in(1)), send(2, in(2)), recv(3, out(1))};
  RankPlan p = plan0(Collective::kReduceScatter, rs, 2, 0, true);
  EXPECT_EQ(p.steps[2].waitFor, W{0});
  // allreduce: input == output.
  std::vector<Step> ar = {send(1, in(0)), recvReduce(2, scr(0), out(0))};
  EXPECT_EQ(plan0(Collective::kAllReduce, ar, 1, 1, true).steps[1].waitFor, W{0});
}

TEST(Analysis, PhysicalRangeFollowsInPlaceAlias) {
  Program p = program(Collective::kAllGather, {{}, {}, {}, {}}, 3, 0, true);
  PhysRange r = physicalRange(p, 2, ChunkRange{Buf::kInput, 1, 2});
  EXPECT_EQ(r.buf, Buf::kOutput);
  EXPECT_EQ(r.first, 7u);
  EXPECT_EQ(r.count, 2u);
  p.inPlace = false;
  EXPECT_EQ(physicalRange(p, 2, ChunkRange{Buf::kInput, 1, 2}).buf, Buf::kInput);
}

TEST(Analysis, MessagesAreOrderedPerPeerAndChannel) {
  RankPlan p = plan0(Collective::kAllGather,
                     {recv(1, out(1)), recv(1, out(2), 1), recv(1, out(3)), send(2, in(0)), send(2, in(0), 1),
                      send(2, in(0)), send(3, in(0))},
                     1, 0, false, 2);
  EXPECT_EQ(p.steps[0].recvAfter, -1);
  EXPECT_EQ(p.steps[1].recvAfter, -1);  // other channel
  EXPECT_EQ(p.steps[2].recvAfter, 0);
  EXPECT_EQ(p.steps[2].recvSeq, 1u);
  EXPECT_EQ(p.steps[1].recvSeq, 0u);
  EXPECT_EQ(p.steps[3].sendAfter, -1);
  EXPECT_EQ(p.steps[4].sendAfter, -1);
  EXPECT_EQ(p.steps[5].sendAfter, 3);
  EXPECT_EQ(p.steps[5].sendSeq, 1u);
  EXPECT_EQ(p.steps[6].sendAfter, -1);
  // Message order is not a waitFor edge (see analysis.h): nothing else links these.
  for (const StepPlan& s : p.steps) EXPECT_EQ(s.waitFor, W{});
  EXPECT_EQ(p.peers, (std::vector<int>{1, 2, 3}));
}

TEST(Analysis, TransitiveReduction) {
  // 1 waits for 0; 2 reads what both wrote: 0 is implied by 1.
  RankPlan p = plan0(Collective::kAllReduce, {copy(in(0), scr(0)), copy(scr(0), scr(1)), send(1, scr(0, 2))}, 1, 2);
  EXPECT_EQ(p.steps[2].waitFor, W{1});
  // An explicit dep already implied by a hazard edge is dropped; one that is not is kept.
  Step s = send(2, scr(1));
  s.deps = {0};
  Step t = send(3, in(0));
  t.deps = {0};
  p = plan0(Collective::kAllReduce, {copy(in(0), scr(0)), copy(scr(0), scr(1)), s, t}, 1, 2);
  EXPECT_EQ(p.steps[2].waitFor, W{1});
  EXPECT_EQ(p.steps[3].waitFor, W{0});
  // A sending step completes only after its predecessor on the same stream
  // sent (which completed it): waiting for 3 covers 2.
  p = plan0(Collective::kAllReduce,
            {copy(in(0), scr(0)), copy(in(0), scr(1)), send(1, scr(0)), send(1, scr(1)), recv(3, scr(0, 2))}, 1, 2);
  EXPECT_EQ(p.steps[3].sendAfter, 2);
  EXPECT_EQ(p.steps[3].waitFor, W{1});
  EXPECT_EQ(p.steps[4].waitFor, W{3});
}

TEST(Analysis, ReverseEdges) {
  RankPlan p = plan0(Collective::kAllReduce, {copy(in(0), scr(0)), send(1, scr(0)), send(2, scr(0))}, 1, 1);
  EXPECT_EQ(p.steps[0].unblocks, (W{1, 2}));
  EXPECT_EQ(p.steps[1].unblocks, W{});
}

TEST(Analysis, RingStepsOnlyWaitForMessagesNotForEachOther) {
  GenerateRequest req{Collective::kAllReduce, 4, 0, false, {}, {}};
  Program p = generateBuiltin("ring", req).take();
  Result<std::vector<RankPlan>> plans = analyzeProgram(p);
  ASSERT_TRUE(plans.isOk());
  // Out of place, every ring step touches its own segment: no hazards, only message order.
  for (const StepPlan& s : plans.value()[0].steps) EXPECT_EQ(s.waitFor, W{});
  EXPECT_EQ(plans.value()[0].peers, (std::vector<int>{1, 3}));
  // In place, the allgather half overwrites segments the reduce-scatter half read.
  req.inPlace = true;
  Program q = generateBuiltin("ring", req).take();
  Result<std::vector<RankPlan>> qp = analyzeProgram(q);
  ASSERT_TRUE(qp.isOk());
  size_t edges = 0;
  for (const StepPlan& s : qp.value()[0].steps) edges += s.waitFor.size();
  EXPECT_GT(edges, 0u);
}

TEST(Analysis, MalformedProgramsFailCleanly) {
  Program p = program(Collective::kAllReduce, {{send(1, in(5))}, {}});
  Result<RankPlan> r = analyzeRank(p, 0);
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find("src input chunk 5 is out of range"), std::string::npos);
  EXPECT_FALSE(analyzeRank(p, 2).isOk());
  EXPECT_FALSE(analyzeRank(p, -1).isOk());
  EXPECT_FALSE(analyzeProgram(p).isOk());
}

TEST(Analysis, LongProgramsStayCorrectWithoutReduction) {
  // More steps than the reduction handles: lists stay correct (deduplicated, ascending).
  std::vector<Step> steps;
  for (int i = 0; i < 5000; ++i) steps.push_back(i % 2 ? send(1, scr(0)) : copy(in(0), scr(0)));
  RankPlan p = plan0(Collective::kAllReduce, steps, 1, 1);
  EXPECT_EQ(p.steps[1].waitFor, W{0});
  EXPECT_EQ(p.steps[2].waitFor, (W{0, 1}));
  EXPECT_EQ(p.steps[4999].waitFor, W{4998});
}

}  // namespace
}  // namespace theseus::schedule
