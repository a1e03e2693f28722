// The IB network's pure parts: NCCL_IB_HCA's syntax and NVIDIA's port speed table.
#include <gtest/gtest.h>

#include "transport/ib/ib_devices.h"
#include "transport/ib/ib_hca_filter.h"

using theseus::transport::ib::HcaFilter;
using theseus::transport::ib::ibPortSpeedMbps;

TEST(HcaFilter, EmptyAllowsEverything) {
  HcaFilter f = HcaFilter::parse("");
  EXPECT_TRUE(f.allows("mlx5_0", 1));
  EXPECT_TRUE(f.allows("anything", 2));
}

TEST(HcaFilter, PrefixesAndPorts) {
  HcaFilter f = HcaFilter::parse("mlx5_0:1,mlx5_1");
  EXPECT_TRUE(f.allows("mlx5_0", 1));
  EXPECT_FALSE(f.allows("mlx5_0", 2));
  EXPECT_TRUE(f.allows("mlx5_1", 1));
  EXPECT_TRUE(f.allows("mlx5_1", 2));
  EXPECT_TRUE(f.allows("mlx5_10", 1)) << "a prefix, as in NCCL";
  EXPECT_FALSE(f.allows("mlx5_2", 1));
  EXPECT_EQ(f.describe(), "mlx5_0:1,mlx5_1");
}

TEST(HcaFilter, ExactAndExclude) {
  HcaFilter exact = HcaFilter::parse("=mlx5_1");
  EXPECT_TRUE(exact.allows("mlx5_1", 1));
  EXPECT_FALSE(exact.allows("mlx5_10", 1));
  HcaFilter exclude = HcaFilter::parse("^mlx5_2:1");
  EXPECT_TRUE(exclude.allows("mlx5_0", 1));
  EXPECT_TRUE(exclude.allows("mlx5_2", 2));
  EXPECT_FALSE(exclude.allows("mlx5_2", 1));
  HcaFilter both = HcaFilter::parse("^=mlx5_1");
  EXPECT_FALSE(both.allows("mlx5_1", 1));
  EXPECT_TRUE(both.allows("mlx5_10", 1));
  EXPECT_EQ(both.describe(), "^=mlx5_1");
}

TEST(HcaFilter, BadPortsMatchNothingAndSpacesAreTrimmed) {
  HcaFilter f = HcaFilter::parse(" mlx5_0:x , mlx5_1:2 ,,");
  ASSERT_EQ(f.entries.size(), 2u);
  EXPECT_FALSE(f.allows("mlx5_0", 1)) << "port 'x' is no port: the entry selects nothing";
  EXPECT_TRUE(f.allows("mlx5_1", 2));
}

TEST(IbSpeed, NvidiasTable) {
  EXPECT_EQ(ibPortSpeedMbps(1, 1), 2500);      // SDR 1x
  EXPECT_EQ(ibPortSpeedMbps(32, 2), 100000);   // EDR 4x
  EXPECT_EQ(ibPortSpeedMbps(64, 2), 200000);   // HDR 4x
  EXPECT_EQ(ibPortSpeedMbps(128, 2), 400000);  // NDR 4x
  EXPECT_EQ(ibPortSpeedMbps(128, 16), 200000); // NDR 2x
}
