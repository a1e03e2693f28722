// HostProbes: NIC port states from a fake /sys/class/infiniband tree, and a
// machine without NVML (GPU probes skip cleanly).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "attrs/host_probes.h"

namespace theseus::attrs {
namespace {

class FakeSysfs : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/theseus_sysfs_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { (void)system(("rm -rf " + root_).c_str()); }
  void port(const std::string& dev, int port, const std::string& state) {
    std::string dir = root_ + "/" + dev + "/ports/" + std::to_string(port);
    ASSERT_EQ(system(("mkdir -p " + dir).c_str()), 0);
    std::ofstream(dir + "/state") << state << "\n";
  }
  HostProbes::Options options() const {
    HostProbes::Options o;
    o.infinibandSysfs = root_;
    o.nvmlLibrary = "libtheseus-no-such-nvml.so.1";
    o.minIntervalNs = 0;
    return o;
  }
  std::string root_;
};

TEST_F(FakeSysfs, NicHealthFromPortStates) {
  port("mlx5_0", 1, "4: ACTIVE");
  port("mlx5_1", 1, "1: DOWN");
  port("mlx5_2", 1, "1: DOWN");
  port("mlx5_2", 2, "4: ACTIVE");  // one active port is enough
  ASSERT_EQ(system(("mkdir -p " + root_ + "/mlx5_3/ports").c_str()), 0);  // no ports: no attribute
  HostProbes probes(0, -1, "node1.cluster", options());
  AttributeStore s(0);
  EXPECT_EQ(probes.poll(s), 3u);
  EXPECT_EQ(s.get("node.node1_cluster.nic.mlx5_0.healthy")->value, 1);
  EXPECT_EQ(s.get("node.node1_cluster.nic.mlx5_1.healthy")->value, 0);
  EXPECT_EQ(s.get("node.node1_cluster.nic.mlx5_2.healthy")->value, 1);
  EXPECT_FALSE(s.get("node.node1_cluster.nic.mlx5_3.healthy").has_value());
  EXPECT_EQ(s.get("node.node1_cluster.nic.mlx5_0.healthy")->source, Source::kProbe);
  // A port goes down: the next poll says so.
  port("mlx5_0", 1, "1: DOWN");
  probes.poll(s);
  EXPECT_EQ(s.get("node.node1_cluster.nic.mlx5_0.healthy")->value, 0);
}

TEST_F(FakeSysfs, PollsAtMostOncePerInterval) {
  port("mlx5_0", 1, "4: ACTIVE");
  HostProbes::Options o = options();
  o.minIntervalNs = 3600ull * 1000000000;
  HostProbes probes(0, -1, "h", o);
  AttributeStore s(0);
  EXPECT_EQ(probes.poll(s), 1u);
  port("mlx5_0", 1, "1: DOWN");
  EXPECT_EQ(probes.poll(s), 0u);  // too soon: the hardware is not read again
  EXPECT_EQ(s.get("node.h.nic.mlx5_0.healthy")->value, 1);
}

TEST_F(FakeSysfs, NoInfinibandAndNoNvmlIsNotAnError) {
  HostProbes::Options o = options();
  o.infinibandSysfs = root_ + "/missing";
  HostProbes probes(2, 0, "h", o);  // a CUDA device, but no NVML
  AttributeStore s(2);
  EXPECT_EQ(probes.poll(s), 0u);
  EXPECT_FALSE(probes.nvmlAvailable());
  EXPECT_EQ(s.size(), 0u);
}

}  // namespace
}  // namespace theseus::attrs
