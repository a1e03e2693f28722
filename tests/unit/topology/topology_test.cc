// The host topology on the shipped synthetic machines (tests/topology/: two
// sockets, 8 GPUs, 4 or 8 NICs behind four PCIe switches): NVIDIA's path
// classes, which NIC each GPU picks, NUMA nodes, bad files; and the net-plugin
// backend's device choice from it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>

#include "topology/topology.h"
#include "transport/netplugin/net_device_choice.h"
#include "transport/transport_config.h"

using theseus::topology::Path;
using theseus::topology::Topology;
using theseus::transport::netplugin::chooseNetDevice;
using theseus::transport::netplugin::NetDevice;

namespace {

std::unique_ptr<Topology> machine(const char* file) {
  auto t = Topology::load(std::string(THESEUS_TOPO_DIR) + "/" + file);
  EXPECT_TRUE(t.isOk()) << t.status().message();
  return t.isOk() ? t.take() : nullptr;
}

TEST(Topology, FourNicsTwoGpusPerNic) {
  auto t = machine("two-socket-8gpu-4nic.xml");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->gpus().size(), 8u);
  ASSERT_EQ(t->nics().size(), 4u);
  EXPECT_EQ(t->numaCount(), 2);
  EXPECT_EQ(t->nics()[2].name, "mlx5_2");
  EXPECT_TRUE(t->nics()[2].knows("ib2"));
  EXPECT_EQ(t->gpus()[5].index, 5);
  EXPECT_EQ(t->gpus()[5].numa, 1);
  EXPECT_EQ(t->nics()[3].numa, 1);
  EXPECT_EQ(t->path(0, 0), Path::kPix);  // one switch
  EXPECT_EQ(t->path(0, 1), Path::kPhb);  // the other switch of the socket
  EXPECT_EQ(t->path(0, 2), Path::kSys);  // the other socket
  EXPECT_EQ(t->path(7, 3), Path::kPix);
  for (size_t g = 0; g < 8; ++g) EXPECT_EQ(t->nicFor(g), static_cast<int>(g / 2)) << "GPU " << g;
  EXPECT_EQ(t->numaCpus(1), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_TRUE(t->numaCpus(7).empty());
  EXPECT_NE(t->describe().find("2 NUMA node(s), 8 GPU(s), 4 NIC(s)"), std::string::npos) << t->describe();
}

TEST(Topology, EightNicsOneGpuPerNic) {
  auto t = machine("two-socket-8gpu-8nic.xml");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->nics().size(), 8u);
  EXPECT_EQ(t->path(0, 1), Path::kPix);  // both NICs of the first switch are PIX to GPU 0
  for (size_t g = 0; g < 8; ++g) EXPECT_EQ(t->nicFor(g), static_cast<int>(g)) << "GPU " << g;
  EXPECT_EQ(t->gpuIndex(6), 6);
  EXPECT_EQ(t->gpuIndex(8), -1);
}

TEST(Topology, ThisMachineLoads) {
  auto t = Topology::load("");
  ASSERT_TRUE(t.isOk()) << t.status().message();
  EXPECT_GE(t.value()->numaCount(), 1);
}

TEST(Topology, BadFilesAreClearErrors) {
  auto missing = Topology::load("/nonexistent/topo.xml");
  ASSERT_FALSE(missing.isOk());
  EXPECT_NE(missing.status().message().find("topology file /nonexistent/topo.xml: No such file"), std::string::npos)
      << missing.status().message();
  std::string bad = "/tmp/theseus-bad-topo-" + std::to_string(getpid()) + ".xml";
  std::ofstream(bad) << "<topology version=\"2.0\"><object type=\"Machine\"";
  auto garbage = Topology::load(bad);
  ASSERT_FALSE(garbage.isOk());
  EXPECT_NE(garbage.status().message().find(bad), std::string::npos) << garbage.status().message();
  unlink(bad.c_str());
  TheseusTopoData d{};
  d.version = 99;
  EXPECT_FALSE(Topology::fromData(d, "test").isOk());
  d.version = THESEUS_TOPO_READER_VERSION;
  d.ngpus = THESEUS_TOPO_MAX_GPUS + 1;
  auto many = Topology::fromData(d, "test");
  ASSERT_FALSE(many.isOk());
  EXPECT_NE(many.status().message().find("counts out of range"), std::string::npos);
}

std::vector<NetDevice> devicesNamed(const std::vector<std::string>& names) {
  std::vector<NetDevice> out;
  for (const std::string& n : names) {
    NetDevice d;
    d.name = n;
    out.push_back(d);
  }
  return out;
}

TEST(NetDeviceChoice, TheNicClosestToTheGpuByNameOrPciPath) {
  auto t = machine("two-socket-8gpu-4nic.xml");
  ASSERT_NE(t, nullptr);
  // The plugin lists its devices in its own order.
  auto devs = devicesNamed({"mlx5_3", "mlx5_1", "mlx5_2", "mlx5_0"});
  auto c = chooseNetDevice(t.get(), 5, devs, 5);
  EXPECT_EQ(c.device, 2);
  EXPECT_EQ(c.cpus, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(c.why, "closest to GPU 5 (PIX): mlx5_2");
  EXPECT_EQ(c.rail, 2);
  EXPECT_EQ(c.numa, 1);
  // A plugin naming its devices otherwise (a socket plugin: network names; or only PCI paths).
  auto byAlias = chooseNetDevice(t.get(), 0, devicesNamed({"ib1", "ib0"}), 0);
  EXPECT_EQ(byAlias.device, 1);
  std::vector<NetDevice> byPath = devicesNamed({"nic-a", "nic-b"});
  byPath[1].pciPath = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:02.0/" + t->nics()[0].busId;
  EXPECT_EQ(chooseNetDevice(t.get(), 1, byPath, 1).device, 1);
}

// NCCL_NET_GDR_LEVEL: GPUDirect RDMA only within the level's distance; an unknown path leaves it to the
// network; LOC never.
TEST(NetDeviceChoice, GpuDirectRdmaStaysWithinTheGdrLevel) {
  auto t = machine("two-socket-8gpu-4nic.xml");
  ASSERT_NE(t, nullptr);
  auto c = chooseNetDevice(t.get(), 5, devicesNamed({"mlx5_3", "mlx5_1", "mlx5_2", "mlx5_0"}), 5);
  EXPECT_EQ(c.path, static_cast<int>(Path::kPix));
  for (int level = 1; level <= 4; ++level) EXPECT_TRUE(theseus::transport::netplugin::gdrWithin(c, level)) << level;
  EXPECT_FALSE(theseus::transport::netplugin::gdrWithin(c, 0)) << "LOC: never";
  theseus::transport::netplugin::DeviceChoice far = c;
  far.path = static_cast<int>(Path::kPhb);
  EXPECT_FALSE(theseus::transport::netplugin::gdrWithin(far, 2)) << "PHB is beyond PXB (the default)";
  EXPECT_TRUE(theseus::transport::netplugin::gdrWithin(far, 3));
  far.path = static_cast<int>(Path::kSys);
  EXPECT_FALSE(theseus::transport::netplugin::gdrWithin(far, 3));
  EXPECT_TRUE(theseus::transport::netplugin::gdrWithin(far, 4));
  auto unknown = chooseNetDevice(nullptr, 3, devicesNamed({"eth0"}), 0);
  EXPECT_EQ(unknown.path, -1);
  EXPECT_TRUE(theseus::transport::netplugin::gdrWithin(unknown, 2));
  EXPECT_FALSE(theseus::transport::netplugin::gdrWithin(unknown, 0));
  // The knob's words and NCCL's integers; anything else is an error naming it.
  using theseus::transport::parseGdrLevel;
  EXPECT_EQ(parseGdrLevel("pxb").value(), 2);
  EXPECT_EQ(parseGdrLevel("SYS").value(), 4);
  EXPECT_EQ(parseGdrLevel("0").value(), 0);
  EXPECT_EQ(parseGdrLevel("3").value(), 3);
  auto bad = parseGdrLevel("NVL");
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("NCCL_NET_GDR_LEVEL='NVL'"), std::string::npos);
  EXPECT_FALSE(parseGdrLevel("5").isOk());
}

TEST(NetDeviceChoice, FallsBackToTheLocalRankAndSaysWhy) {
  auto t = machine("two-socket-8gpu-4nic.xml");
  ASSERT_NE(t, nullptr);
  auto devs = devicesNamed({"eth0", "eth1", "eth2"});
  auto none = chooseNetDevice(nullptr, 3, devs, 4);
  EXPECT_EQ(none.device, 1);
  EXPECT_EQ(none.why, "local rank 4 of 3 device(s): the topology is unknown");
  EXPECT_TRUE(none.cpus.empty());
  EXPECT_EQ(none.rail, -1);
  EXPECT_EQ(chooseNetDevice(t.get(), -1, devs, 2).why, "local rank 2 of 3 device(s): no GPU");
  EXPECT_EQ(chooseNetDevice(t.get(), 11, devs, 0).why, "local rank 0 of 3 device(s): GPU 11 is not in the topology");
  auto unmatched = chooseNetDevice(t.get(), 2, devs, 2);
  EXPECT_EQ(unmatched.device, 2);
  EXPECT_NE(unmatched.why.find("the plugin has no device for NIC mlx5_1"), std::string::npos) << unmatched.why;
}

}  // namespace
