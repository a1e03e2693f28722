// NCCL net plugins: loading by NCCL's rules and every supported version, the
// device properties read, the comma list with its fallbacks, the plugins that
// cannot be used, and NCCL_NET naming a plugin's network.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "policy/nccl_tuner.h"
#include "telemetry/nccl_profiler.h"
#include "transport/backend_order.h"
#include "transport/netplugin/net_plugin.h"
#include "transport/user_buffers.h"

namespace theseus::transport::netplugin {
namespace {

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

std::unique_ptr<NetPlugin> loadOk(const char* path) {
  auto p = NetPlugin::load(path, 0x42);
  EXPECT_TRUE(p.isOk()) << p.status().message();
  return p.isOk() ? p.take() : nullptr;
}

std::string loadError(const char* path) {
  auto p = NetPlugin::load(path, 0x42);
  EXPECT_FALSE(p.isOk()) << path << " loaded";
  return p.isOk() ? std::string() : p.status().message();
}

// The registry of ncclCommRegister'ed buffers that zero-copy sends look pieces up in.
TEST(NetPlugin, UserBuffersFindOnlyRangesInsideARegistration) {
  UserBuffers b;
  EXPECT_TRUE(b.empty());
  std::vector<char> one(4096), two(100);
  b.add(1, one.data(), one.size());
  b.add(2, two.data(), two.size());
  EXPECT_FALSE(b.empty());
  UserBuffers::Buffer got;
  ASSERT_TRUE(b.find(one.data(), 4096, &got));
  EXPECT_EQ(got.id, 1u);
  ASSERT_TRUE(b.find(one.data() + 4000, 96, &got));
  EXPECT_FALSE(b.find(one.data() + 4000, 97, &got));  // runs past the end
  EXPECT_FALSE(b.find(one.data() - 1, 2, &got));      // starts before it
  EXPECT_FALSE(b.find(one.data() + 1, SIZE_MAX, &got));
  ASSERT_TRUE(b.find(two.data() + 50, 50, &got));
  EXPECT_EQ(got.id, 2u);
  b.remove(1);
  EXPECT_FALSE(b.find(one.data(), 1, &got));
  b.remove(2);
  EXPECT_TRUE(b.empty());
}

TEST(NetPlugin, VersionTwelveDevicesAndProperties) {
  auto p = loadOk(TEST_NET_GOOD);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->name(), "test_net");
  EXPECT_EQ(p->version(), 12);
  ASSERT_EQ(p->devices().size(), 2u);
  const NetDevice& d1 = p->devices()[1];
  EXPECT_EQ(d1.name, "tnet1");
  EXPECT_EQ(d1.pciPath, "/sys/devices/pci0000:00/1");
  EXPECT_EQ(d1.guid, 0x1001u);
  EXPECT_EQ(d1.speedMbps, 200000);
  EXPECT_EQ(d1.port, 2);
  EXPECT_FLOAT_EQ(d1.latencyUs, 1.5f);
  EXPECT_EQ(d1.maxComms, 1024);
  EXPECT_EQ(d1.railId, 1);
  EXPECT_EQ(d1.describe(), "tnet1 port 2, 200000 Mb/s, host+cuda, rail 1 (/sys/devices/pci0000:00/1)");
  EXPECT_HAS(p->describe(), "NCCL net plugin 'test_net' v12 (");
  EXPECT_HAS(p->describe(), "2 device(s): tnet0 port 1, 100000 Mb/s, host");
}

TEST(NetPlugin, OlderVersionsAreRead) {
  auto v11 = loadOk(TEST_NET_V11);
  ASSERT_NE(v11, nullptr);
  EXPECT_EQ(v11->version(), 11);
  EXPECT_EQ(v11->devices().at(0).speedMbps, 100000);
  EXPECT_EQ(v11->devices().at(0).railId, -1);  // v12 only
  auto v9 = loadOk(TEST_NET_V9);
  ASSERT_NE(v9, nullptr);
  EXPECT_EQ(v9->version(), 9);
  EXPECT_EQ(v9->devices().at(1).port, 2);
  auto v6 = loadOk(TEST_NET_V6);
  ASSERT_NE(v6, nullptr);
  EXPECT_EQ(v6->version(), 6);
  EXPECT_EQ(v6->devices().at(1).name, "tnet1");
  EXPECT_EQ(v6->devices().at(1).speedMbps, -1);  // not read before v9
}

TEST(NetPlugin, UnusablePluginsAreRefusedByName) {
  EXPECT_HAS(loadError(TEST_NET_NEWER_ONLY), "exports ncclNetPlugin_v13, a newer net plugin ABI than this Theseus reads");
  EXPECT_HAS(loadError(TEST_NET_OLDER_ONLY), "exports ncclNetPlugin_v5, an older net plugin ABI than Theseus reads");
  EXPECT_HAS(loadError(TEST_NET_NO_SYMBOL), "not a net plugin: symbol ncclNetPlugin_v12 not found");
  EXPECT_HAS(loadError(TEST_NET_INIT_FAILS), "init() failed with 2 (ncclSystemError)");
  EXPECT_HAS(loadError(TEST_NET_NULL_DEVICES), "init, devices and getProperties are required");
  EXPECT_HAS(loadError(TEST_NET_NULL_ISEND), "net plugin 'test_net' (ncclNetPlugin_v12): its isend member is NULL");
}

TEST(NetPlugin, TheListTakesTheFirstUsableEntry) {
  std::vector<std::string> skipped;
  std::string list = std::string("no-such-net,") + TEST_NET_INIT_FAILS + "," + TEST_NET_V9 + "," + TEST_NET_GOOD;
  auto p = NetPlugin::loadList(list, true, 1, &skipped);
  ASSERT_TRUE(p.isOk()) << p.status().message();
  ASSERT_NE(p.value(), nullptr);
  EXPECT_EQ(p.value()->name(), "test_net_v9");
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_HAS(skipped[0], "NCCL_NET_PLUGIN=no-such-net: no net plugin could be loaded (tried no-such-net, "
                         "libnccl-net-no-such-net.so)");
  EXPECT_HAS(skipped[1], "init() failed");

  skipped.clear();
  auto none = NetPlugin::loadList("none", true, 1, &skipped);
  ASSERT_TRUE(none.isOk());
  EXPECT_EQ(none.value(), nullptr);
  EXPECT_TRUE(skipped.empty());
  auto unset = NetPlugin::loadList("", false, 1, &skipped);  // libnccl-net.so is not installed here
  ASSERT_TRUE(unset.isOk());
  EXPECT_EQ(unset.value(), nullptr);
  EXPECT_TRUE(skipped.empty());
}

// The plugin is loaded once per process (its init() may expect one call): this is the only test of this
// binary that goes through makeBackends with a plugin configured. NCCL_NET picks the plugin's network
// (by its name, case-insensitively) or Theseus' Socket; the plugin backend exists either way (every rank
// makes the same set-up rounds), and a name that is neither fails init listing both.
TEST(NetPlugin, NcclNetPicksThePluginOrTheSocketNetwork) {
  std::string log = "/tmp/theseus-net-init-" + std::to_string(getpid());
  setenv("TEST_NET_INIT_LOG", log.c_str(), 1);
  BackendContext ctx;
  ctx.config.netPlugin = TEST_NET_GOOD;
  for (const char* net : {"TEST_NET", "Socket", ""}) {
    ctx.config.net = net;
    auto b = makeBackends(ctx, {});
    ASSERT_TRUE(b.isOk()) << net << ": " << b.status().message();
    ASSERT_EQ(b.value().size(), 4u);  // shm, the plugin, IB (offering nothing without an HCA), Socket
    EXPECT_EQ(b.value()[1]->kind(), Kind::kNetPlugin);
    EXPECT_EQ(b.value()[2]->kind(), Kind::kIb);
    EXPECT_EQ(b.value()[3]->kind(), Kind::kSocket);
  }
  ctx.config.net = "Verbs";
  auto bad = makeBackends(ctx, {});
  ASSERT_FALSE(bad.isOk());
  EXPECT_HAS(bad.status().message(), "NCCL_NET/netName 'Verbs': no such network in Theseus (available: test_net (NCCL "
                                     "net plugin ");
  EXPECT_HAS(bad.status().message(), "), IB, Socket)");
  std::ifstream in(log);
  int inits = 0;
  for (std::string line; std::getline(in, line);) inits += line == "init";
  EXPECT_EQ(inits, 1);
  unlink(log.c_str());
  unsetenv("TEST_NET_INIT_LOG");
}

// NCCL looks for the tuner and profiler in the net plugin's library when their own is not found; a net
// plugin that carries neither is then simply no tuner and no profiler (no error, no WARN).
TEST(NetPlugin, ANetPluginWithoutTunerOrProfilerIsNeither) {
  setenv("NCCL_NET_PLUGIN", TEST_NET_GOOD, 1);
  unsetenv("NCCL_TUNER_PLUGIN");
  unsetenv("NCCL_PROFILER_PLUGIN");
  auto tuner = policy::NcclTuner::loadConfigured(policy::TunerContext{1, 2, {}});
  ASSERT_TRUE(tuner.isOk()) << tuner.status().message();
  EXPECT_EQ(tuner.value(), nullptr);
  auto profiler = telemetry::ProfilerSession::open(telemetry::ProfilerSession::Identity{1, "", 1, 2, 0});
  ASSERT_TRUE(profiler.isOk()) << profiler.status().message();
  EXPECT_EQ(profiler.value(), nullptr);
  // Named explicitly, the same library is an error: it is not a tuner.
  auto named = policy::NcclTuner::load(TEST_NET_GOOD, policy::TunerContext{1, 2, {}});
  ASSERT_FALSE(named.isOk());
  EXPECT_HAS(named.status().message(), "not a tuner plugin: symbol ncclTunerPlugin_v6 not found");
  unsetenv("NCCL_NET_PLUGIN");
}

}  // namespace
}  // namespace theseus::transport::netplugin
