// The template memo's device channels: operations the device executor runs get
// THESEUS_DEVICE_CHANNELS from THESEUS_DEVICE_CHANNEL_BYTES on, whatever size
// of a decision's range came first; fewer where a schedule multiplies them past
// THESEUS_MAX_CHANNELS; never for host operations, one rank or a decision's
// own channel count.
#include <gtest/gtest.h>

#include "comm/template_memo.h"

namespace theseus::comm {
namespace {

using schedule::Collective;

TemplateMemo::Settings settings(int nranks) {
  TemplateMemo::Settings s;
  s.rank = 0;
  s.nranks = nranks;
  s.sliceBytes = 128 << 10;
  s.maxSliceBytes = 128 << 10;
  s.maxChannels = 8;
  s.deviceChannels = 8;
  s.deviceChannelBytes = 4 << 20;
  return s;
}

// (The memo keys entries by table version: each table here has its own.)
uint32_t channelsOf(TemplateMemo& memo, const policy::DecisionTable& table, uint64_t version, Collective c,
                    size_t bytes, bool device, int nranks = 4) {
  auto e = memo.find(table, version, TemplateMemo::Request{c, bytes, 0, false, device});
  EXPECT_TRUE(e.isOk()) << e.status().message();
  if (!e.isOk()) return 0;
  EXPECT_EQ(e.value()->program->program.nranks, nranks);
  return e.value()->program->program.nchannels;
}

TEST(TemplateMemo, LargeDeviceOperationsGetTheDeviceChannels) {
  policy::DecisionTable ring;  // every allreduce size in one range of one decision
  policy::Decision d;
  d.schedule = "ring";
  ASSERT_TRUE(ring.add(Collective::kAllReduce, 0, ~0ull, d).isOk());
  TemplateMemo memo(settings(4));
  // The small size first: the large one of the same range must not reuse its entry.
  EXPECT_EQ(channelsOf(memo, ring, 1, Collective::kAllReduce, 1 << 20, true), 1u);
  EXPECT_EQ(channelsOf(memo, ring, 1, Collective::kAllReduce, 64 << 20, true), 8u);
  EXPECT_EQ(channelsOf(memo, ring, 1, Collective::kAllReduce, 64 << 20, false), 1u);  // host memory
  EXPECT_EQ(channelsOf(memo, ring, 1, Collective::kAllReduce, 2 << 20, true), 1u);

  policy::DecisionTable tree;  // two trees per channel: 8 device channels would need 16
  d.schedule = "double_binary_tree";
  ASSERT_TRUE(tree.add(Collective::kAllReduce, 0, ~0ull, d).isOk());
  EXPECT_EQ(channelsOf(memo, tree, 2, Collective::kAllReduce, 64 << 20, true), 8u);

  policy::DecisionTable own;  // a decision's own channel count stands
  d.schedule = "ring";
  d.params.channels = 2;
  ASSERT_TRUE(own.add(Collective::kAllReduce, 0, ~0ull, d).isOk());
  EXPECT_EQ(channelsOf(memo, own, 3, Collective::kAllReduce, 64 << 20, true), 2u);

  TemplateMemo one(settings(1));  // one rank: a local copy, nothing to spread
  EXPECT_EQ(channelsOf(one, ring, 1, Collective::kAllReduce, 64 << 20, true, 1), 1u);
}

}  // namespace
}  // namespace theseus::comm
