// The inventory of NCCL's variables: every one NVIDIA reads is listed once,
// honoured or with a reason; misspelt names find their closest known name.
#include <gtest/gtest.h>

#include <set>

#include "common/nccl_variables.h"

namespace theseus {
namespace {

TEST(NcclVariables, EveryNvidiaVariableIsAccountedForOnce) {
  auto all = ncclVariables();
  std::set<std::string> names;
  for (const auto& v : all) {
    EXPECT_TRUE(names.insert(v.name).second) << v.name << " listed twice";
    EXPECT_EQ(v.name.rfind("NCCL_", 0), 0u) << v.name;
    EXPECT_FALSE(v.effect.empty()) << v.name;
  }
  EXPECT_GE(all.size(), 240u);
  auto find = [&](const char* name) {
    for (const auto& v : all)
      if (v.name == name) return v;
    ADD_FAILURE() << name << " missing";
    return NcclVariable{};
  };
  EXPECT_TRUE(find("NCCL_SOCKET_IFNAME").honoured);
  EXPECT_TRUE(find("NCCL_DEBUG").honoured);
  EXPECT_TRUE(find("NCCL_TUNER_PLUGIN").honoured);
  EXPECT_TRUE(find("NCCL_PROFILER_PLUGIN").honoured);
  EXPECT_TRUE(find("NCCL_IB_HCA").honoured);  // Theseus' IB network
  auto ib = find("NCCL_IB_ADAPTIVE_ROUTING");
  EXPECT_FALSE(ib.honoured);
  EXPECT_NE(ib.effect.find("IB network"), std::string::npos) << ib.effect;
  EXPECT_FALSE(find("NCCL_NVLS_ENABLE").honoured);
  EXPECT_FALSE(find("NCCL_IB_RESILIENCY_PORT_FAILOVER").honoured);  // a 2.30 name
}

TEST(NcclVariables, MisspeltNamesFindTheClosestKnownName) {
  EXPECT_EQ(closestKnownName("NCCL_SOCKET_IFNMAE"), "NCCL_SOCKET_IFNAME");
  EXPECT_EQ(closestKnownName("NCCL_DEBGU"), "NCCL_DEBUG");
  EXPECT_EQ(closestKnownName("NCCL_IB_HCAA"), "NCCL_IB_HCA");
  EXPECT_EQ(closestKnownName("THESEUS_POLCY"), "THESEUS_POLICY");
  EXPECT_EQ(closestKnownName("NCCL_SOMETHING_ELSE_ENTIRELY"), "");
}

}  // namespace
}  // namespace theseus
